"""Every setting of the service: a command-line flag and an environment variable.

Owns `Settings` (frozen, validated) and `load_settings(argv, environ)`. Each
setting `--some-name` is also read from `ONNX_SERVICE_SOME_NAME`; the flag wins
over the variable, the variable over the default. Defaults are the safe ones
(loopback address, bounded uploads, bounded workers). Sizes accept a unit
(`512MiB`, `2GiB`, `1.5G`, plain bytes).

Each setting is declared once, as a field of `Settings` made by `setting()`:
its type, default, `Kind` (how text becomes a value and a value is shown), help
and single-value rule. The argparse parser, the variable names, the README's
settings table (`settings_table_markdown()`, printed by
`python -m service.settings`) and the checks of tests/e2e/test_settings_declaration.py
are all derived from those fields. To add a setting, add a field here (then
regenerate the README table and add its variable to deploy/configmap.yaml or
to the test's list of settings deliberately absent there).

May import: `service.checks.outcome` (the stage names a setting lists),
nothing else of the service: every package reads its settings from here.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from importer.limits import MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_CEILING
from service.checks.outcome import DEFAULT_CHECKS, GATE_CHECKS, STAGES, ChecksError, parse_checks, parse_dims_text
from service.settings.kinds import (
    A_SHARE,
    FRACTION,
    GIB,
    INT,
    KIB,
    LEVEL,
    MIB,
    NUMBER,
    OPTIONAL_PATH,
    PATH,
    S3_SCHEME,
    SECONDS,
    SIZE,
    SWITCH,
    TEXT,
    Kind,
    Rule,
    SettingsError,
    one_of,
    s3_location,
    within,
)

ENV_PREFIX = "ONNX_SERVICE_"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_ROOT = REPO / "testdata" / "samples"
DEFAULT_STORE = Path("state") / "store"
DEFAULT_CACHE = Path("state") / "cache"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
WORKER_ID = 65534  # the uid and gid a worker started as root takes by default ("nobody")
_DECLARATION = "setting"  # the key of a Settings field's metadata
T = TypeVar("T")


def env_name(field_name: str) -> str:
    """`worker_memory` -> `ONNX_SERVICE_WORKER_MEMORY`."""
    return ENV_PREFIX + field_name.upper()


def flag_name(field_name: str) -> str:
    """`worker_memory` -> `--worker-memory`."""
    return "--" + field_name.replace("_", "-")


STORE_BACKENDS = ("local", "memory")  # service.store.backends builds each


@dataclass(frozen=True, slots=True)
class Setting:
    """One declared setting, as the parser, the docs and the checks see it."""

    name: str  # the Settings field
    flag: str | None  # None: read from its variable only
    variable: str
    kind: Kind[Any]
    help: str
    default: str  # for people (Markdown): `2GiB`, CPU count, ...
    rule: Rule[Any] | None

    @property
    def label(self) -> str:
        """How errors name the setting: its flag, else its variable."""
        return self.flag or self.variable


@dataclass(frozen=True, slots=True)
class _Declaration:
    """What a `Settings` field's metadata holds: all of `Setting` but the names."""

    kind: Kind[Any]
    help: str
    default: str
    flag: bool
    rule: Rule[Any] | None


def _parses(parse: Callable[[str], object]) -> Callable[[str], bool]:
    """A rule's test: `parse` takes the text without a ChecksError."""

    def holds(text: str) -> bool:
        try:
            parse(text)
        except ChecksError:
            return False
        return True

    return holds


MIN_LINK_KEY_CHARS = 32  # a report link key's least length (`openssl rand -hex 32` gives 64 characters)


def link_keys(text: str) -> list[str]:
    """The report link keys of a variable's or a file's text: one per line, blank lines and surrounding spaces ignored."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _link_keys_hold(text: str) -> bool:
    return all(len(key) >= MIN_LINK_KEY_CHARS for key in link_keys(text))


def setting(default: T, kind: Kind[T], help: str, *, rule: Rule[T] | None = None, shown: str | None = None, flag: bool = True) -> T:
    """Declare a `Settings` field: its default, how to parse and show it, its help.

    `shown` replaces the default in the docs where the value itself means
    little (`CPU count`); `flag=False` makes a setting its variable only.
    """
    declaration = _Declaration(kind, help, f"`{kind.show(default)}`" if shown is None else shown, flag, rule)
    return field(default=default, metadata={_DECLARATION: declaration})


@dataclass(frozen=True, slots=True)
class Settings:
    """The validated settings. Sizes in bytes, durations in seconds.

    One `setting()` per field (it returns a `dataclasses.field`, which is why
    RUF009 is silenced where the annotation is not a type ruff knows immutable).
    """

    host: str = setting(
        "127.0.0.1", TEXT, "address to listen on", rule=Rule(lambda h: bool(h) and "\0" not in h, "must be a host name or address")
    )
    port: int = setting(8000, INT, "port to listen on (0: any free port)", rule=within(0, 65535))
    data_root: str = setting(
        str(DEFAULT_DATA_ROOT),
        TEXT,
        "where server-side models are (POST /models with a JSON path): a folder, or s3://BUCKET/PREFIX (objects read with the "
        "AWS_* environment, as --store's)",
        rule=Rule(
            lambda text: s3_location(text) is not None if text.startswith(S3_SCHEME) else os.path.isdir(text),
            "must be a directory, or s3://BUCKET/PREFIX (a valid bucket name; no empty, . or .. segment)",
        ),
        shown="the bundled samples (`testdata/samples`)",
    )
    store: str = setting(
        str(DEFAULT_STORE), TEXT,
        "where models are stored: a folder (created if missing), or s3://BUCKET/PREFIX on S3-compatible object storage "
        "(endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; needs --database)",
        rule=Rule(lambda text: bool(text) and (not text.startswith(S3_SCHEME) or s3_location(text) is not None),
                  "must be a folder or s3://BUCKET/PREFIX (a valid bucket name; no empty, . or .. segment)"),
    )  # fmt: skip
    database: str = setting(
        "", TEXT,
        "PostgreSQL URL of the index, postgresql://USER@HOST:PORT/DB (the password from the URL, PGPASSWORD or PGPASSFILE); "
        "empty: the index in the --store folder. Every replica given the same --store and --database is one service",
        rule=Rule(lambda url: url == "" or url.startswith(("postgresql://", "postgres://")), "must be empty or a postgresql:// URL"),
        shown="none (the local index)",
    )  # fmt: skip
    cache_dir: Path = setting(  # noqa: RUF009
        DEFAULT_CACHE, PATH, "local folder of an object-storage store: its work area and the catalogues it caches (created if missing)"
    )
    cache_max_bytes: int = setting(
        4 * GIB, SIZE, "bytes of catalogues kept in --cache-dir, least recently used out first",
        rule=Rule(lambda size: size >= MIB, "must be at least 1MiB"),
    )  # fmt: skip
    create_bucket: bool = setting(
        False,
        SWITCH,
        "make the --store bucket when it does not exist (object storage only); without it a missing bucket is named by /readyz, "
        "and the replica waits for it",
        shown="off",
    )
    store_backend: str = setting(
        "local", LEVEL, "local (the --store folder or bucket), or memory (a temporary folder, removed at exit: tests and trials only)",
        rule=one_of(*STORE_BACKENDS),
    )  # fmt: skip
    workers: int = setting(max(1, os.cpu_count() or 1), INT, "imports running at once", rule=within(1, 256), shown="CPU count")
    http_workers: int = setting(
        len(os.sched_getaffinity(0)) or 1, INT,
        "front-end processes serving HTTP on the one port; they share the store, the import capacity and the metrics",
        rule=within(1, 64), shown="CPU count",
    )  # fmt: skip
    queue: int = setting(64, INT, "imports that may wait for a worker; beyond that 503", rule=within(0, 100_000))
    tenant_share: float = setting(
        0.5, FRACTION,
        "share of the import places (--workers and --queue together) and of the receiving places (--max-receiving) one tenant "
        "may hold (0.5 or 50%; at least one of each) when several tenants may import (API keys, the MLflow hook's tenant); "
        "beyond it that tenant gets 503 while others are admitted. Free workers go to the tenant running the fewest",
        rule=A_SHARE,
    )  # fmt: skip
    worker_memory: int = setting(
        2 * GIB,
        SIZE,
        "memory cap of one import worker (RLIMIT_DATA, and its memory cgroup where the service may make one); a check "
        "worker's is at least this, sized to its model (--worker-memory-per-model-byte)",
        rule=Rule(lambda size: size >= 128 * MIB, "must be at least 128MiB (the worker's runtime alone takes about 95MiB)"),
    )
    worker_memory_per_model_byte: float = setting(
        2.5, NUMBER,
        "the check worker's memory cap per byte of its model (model file and external data): it runs under the larger of "
        "this times the model's bytes and --worker-memory (onnxruntime copies the bytes it is handed from the importer's "
        "memory: the worker peaks at about 2 times them); external data it binds for onnxruntime to map counts at "
        "--worker-memory-per-mapped-byte instead",
        rule=within(0.0, 1000.0),
    )  # fmt: skip
    worker_memory_per_mapped_byte: float = setting(
        1.5, NUMBER,
        "the check worker's memory cap per byte of the model's external data where workers have a minimal root to bind "
        "those files in for onnxruntime, which maps them and holds about one copy of what it pre-packs (the worker peaks at "
        "about 1.1 times them); where files cannot be bound they count at --worker-memory-per-model-byte",
        rule=within(0.0, 1000.0),
    )  # fmt: skip
    worker_memory_share: float = setting(
        0.5, FRACTION,
        "share of the machine's memory, or of the service's cgroup limit where lower, that a check worker sized to its model "
        "may take, and that the running sized workers take in all (one tenant at most --tenant-share of it while it runs "
        "another); a model needing more is incomplete, its reason naming the memory it needs",
        rule=A_SHARE,
    )  # fmt: skip
    worker_cpu_seconds: int = setting(60, INT, "CPU-time cap of one import worker (RLIMIT_CPU)", rule=within(1, 86_400))
    worker_timeout: float = setting(120.0, SECONDS, "wall-clock deadline of one import worker, in seconds", rule=within(0.1, 86_400.0))
    max_upload: int = setting(2 * GIB, SIZE, "largest model part of an upload", rule=Rule(lambda size: size >= 1, "must be positive"))
    max_upload_total: int = setting(16 * GIB, SIZE, "largest upload in all (model and external data); at least --max-upload")
    store_max_bytes: int = setting(
        64 * GIB,
        SIZE,
        "store size cap; least recently used models are evicted",
        rule=Rule(lambda size: size >= MIB, "must be at least 1MiB"),
    )
    tenant_max_bytes: int = setting(
        0,
        SIZE,
        "bytes of stored models one tenant may hold (a shared model counts for each holder; 0: no cap); beyond it 507",
        shown="`0` (no cap)",
    )
    tenant_max_models: int = setting(
        0, INT, "models one tenant may hold (0: no cap); beyond it 507", rule=within(0, 10_000_000), shown="`0` (no cap)"
    )
    tenant_max_reserved: float = setting(
        0.25, FRACTION,
        "share of the store's room (the free space above --store-min-free and what the store holds on that file system, at most "
        "--store-max-bytes) that one tenant's open resumable uploads may declare (0.25 or 25%); beyond it 507. Creating an "
        "upload never evicts a model",
        rule=A_SHARE,
    )  # fmt: skip
    max_external_files: int = setting(1000, INT, "external data files one model may name", rule=within(1, 100_000))
    max_tensor_bytes: int = setting(
        MAX_TENSOR_BYTES, SIZE,
        "largest tensor whose values are in external data, decided from its dims (4GiB, say): from the specification's "
        "2^31-1 bytes up to 2^60; a tensor held in the model file keeps 2^31-1 whatever this is (docs/import-rules.md §3)",
        rule=within(MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_CEILING), shown="`2147483647` (2^31-1)",
    )  # fmt: skip
    max_import_bytes: int = setting(
        32 * GIB,
        SIZE,
        "bytes one import may add to the store (uploaded files, converted tensors, catalogue); beyond it 413",
        rule=Rule(lambda size: size >= MIB, "must be at least 1MiB"),
    )
    store_min_free: int = setting(
        256 * MIB,
        SIZE,
        "free space kept on the store's file system: below it /readyz fails, and an import evicts or answers 507",
    )
    allow_hard_links: bool = setting(
        False,
        SWITCH,
        "accept model and external data files that have more than one hard link (a link can bring a file from outside the data root)",
        shown="off",
    )
    default_checks: str = setting(
        DEFAULT_CHECKS, TEXT, f"check stages an import runs when the request names none (?checks=): any of {', '.join(STAGES)}",
        rule=Rule(_parses(parse_checks), f"must name check stages, comma-separated, among {', '.join(STAGES)}"),
    )  # fmt: skip
    max_static_output: int = setting(
        GIB, SIZE, "the security check's bound on an output whose size constants fix (Range, ConstantOfShape, Expand, ...): "
        "a model past it is flagged and never run (neither loaded by onnxruntime nor smoke-run)",
        rule=Rule(lambda size: size >= 1, "must be positive"),
    )  # fmt: skip
    max_inlined_nodes: int = setting(
        1_000_000, INT, "the security check's bound on the nodes a model's calls of its own functions expand to once inlined "
        "(counted without inlining): a model past it fails and is handed to no other stage (shape, runtime, smoke skipped)",
        rule=within(1, 10**12),
    )  # fmt: skip
    max_loop_trips: int = setting(
        1_000_000, INT, "the security check's bound on a Loop's constant trip count: past it, a Loop nothing ends sooner (its "
        "condition absent or kept true) fails and is not smoke-run; one whose body computes its condition is a warning",
        rule=within(1, 2**63 - 1),
    )  # fmt: skip
    smoke_cpu_seconds: float = setting(
        3.0, SECONDS, "CPU-seconds each run of the smoke check may use, below --worker-cpu-seconds: past them onnxruntime stops "
        "the run and the stage is incomplete",
        rule=Rule(lambda seconds: 0 < seconds <= 86_400, "must be above 0 and at most 86400"),
    )  # fmt: skip
    smoke_second_dim: int = setting(
        2, INT, "the smoke check's second value of every dimension nothing binds (neither ?dim=, the model's metadata nor a "
        "registry): after a run at 1, a run at this value (each within --smoke-cpu-seconds); both must pass. 1: one run only",
        rule=within(1, 1_000_000),
    )  # fmt: skip
    trusted_signers: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH,
        "PEM file of the public keys (EC P-256, P-384, P-521) and CA certificates the signature check trusts: a model folder's "
        "model.sig (OpenSSF model signing) verified by none of them fails it. Not secret; read again for each check",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none (no signer trusted)",
    )  # fmt: skip
    require_signature: bool = setting(
        False, SWITCH,
        "the signature check fails a model whose folder holds no model.sig (without it: skipped, and the verdict incomplete)",
        shown="off",
    )  # fmt: skip
    header_timeout: float = setting(
        10.0, SECONDS, "seconds a client may take to send a request's headers; then the connection is closed", rule=within(0.1, 3600.0)
    )
    body_timeout: float = setting(
        10.0, SECONDS, "seconds a request body may stay silent; then 408 and the connection is closed", rule=within(0.1, 3600.0)
    )
    min_upload_rate: int = setting(
        32 * KIB, SIZE, "bytes per second an upload must average once it has run --body-timeout seconds; slower: 408 (0: no minimum)"
    )
    max_receiving: int = setting(
        128,
        INT,
        "uploads whose bodies may be arriving at once; beyond that 503 (a body is received before it queues)",
        rule=within(1, 10_000),
    )
    max_open_uploads: int = setting(
        32, INT, "resumable uploads (tus, /uploads) one tenant may have open at once; beyond that 429", rule=within(1, 100_000)
    )
    upload_expiry: float = setting(
        86_400.0, SECONDS,
        "seconds a resumable upload is kept after its last PATCH (or its creation); then it is removed. Until then its "
        "declared length counts against the store's free space",
        rule=within(1.0, 366 * 86_400.0),
    )  # fmt: skip
    api_keys: Path | None = setting(  # noqa: RUF009
        None,
        OPTIONAL_PATH,
        "TOML file of API keys ([[key]] with sha256, tenant, scopes); reloaded on SIGHUP. Without it: one anonymous tenant",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"),
        shown="none (anonymous)",
    )
    allow_anonymous: bool = setting(
        False,
        SWITCH,
        "without --api-keys, serve anonymously on a non-loopback address too (refused at start otherwise)",
        shown="off",
    )
    public_url: str = setting(
        "", TEXT, "the service's base URL as others reach it (http(s)://HOST[:PORT][/PREFIX]), for the links it writes elsewhere "
        "(the MLflow report and diff tags); empty: those links are relative (/links/...)",
        rule=Rule(lambda url: url == "" or url.startswith(("http://", "https://")), "must be empty or an http(s):// URL"),
        shown="none (relative links)",
    )  # fmt: skip
    mlflow_url: str = setting(
        "", TEXT, "the MLflow tracking server whose registry webhooks POST /hooks/mlflow takes (docs/registry.md); models are "
        "fetched through it only. Its auth: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
        rule=Rule(lambda url: url == "" or url.startswith(("http://", "https://")), "must be empty or an http(s):// URL"),
        shown="none (the hook is off)",
    )  # fmt: skip
    mlflow_webhook_secret: str = setting(
        "", TEXT, "the MLflow webhook's secret (HMAC-SHA256 of each delivery); or --mlflow-webhook-secret-file",
        shown="none", flag=False,
    )  # fmt: skip
    mlflow_webhook_secret_file: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file holding the MLflow webhook's secret (trailing newline ignored)",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none",
    )  # fmt: skip
    mlflow_tenant: str = setting(
        "mlflow", TEXT, "the tenant the MLflow hook imports and checks models as",
        rule=Rule(lambda name: bool(name) and len(name) <= 200 and name.isprintable(), "must be a tenant name"),
    )  # fmt: skip
    mlflow_checks: str = setting(
        GATE_CHECKS, TEXT, f"check stages the MLflow hook runs on each new model version: any of {', '.join(STAGES)}",
        rule=Rule(_parses(parse_checks), f"must name check stages, comma-separated, among {', '.join(STAGES)}"),
    )  # fmt: skip
    mlflow_dims: str = setting(
        "", TEXT, "dimension bindings the MLflow hook gives each version's smoke run, comma-separated NAME:VALUE or "
        "INPUT[AXIS]:VALUE (batch:4,seq:16), each used where the model has a free place for it; a version's tag onnx_import.dims "
        "wins over it, and it over the MLflow model signature's input shapes",
        rule=Rule(_parses(parse_dims_text), "must be comma-separated NAME:VALUE or INPUT[AXIS]:VALUE bindings"), shown="none",
    )  # fmt: skip
    mlflow_alias: str = setting(
        "validated", TEXT, "the registered-model alias the MLflow hook moves to a version that passes (never to one that does not)",
        rule=Rule(lambda name: bool(re.fullmatch(r"[A-Za-z0-9_-]{1,255}", name)), "must be letters, digits, _ or -"),
    )  # fmt: skip
    oci_registry: str = setting(
        "", TEXT, "the OCI registry whose notifications POST /hooks/oci takes (docs/registry.md, \"OCI registries\"): a pushed "
        "ONNX artifact is pulled from this registry only (never from a URL in the event), checked, and given a verdict referrer",
        rule=Rule(lambda url: url == "" or (url.startswith(("http://", "https://")) and "?" not in url and "#" not in url),
                  "must be empty or an http(s):// URL"),
        shown="none (the hook is off)",
    )  # fmt: skip
    oci_credentials: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "the OCI registry's credentials: a Docker config.json (its auths entry for the registry's host), "
        "or a file holding a bearer token",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none (anonymous)",
    )  # fmt: skip
    oci_webhook_secret: str = setting(
        "", TEXT, "the bearer token the OCI registry's notifications carry (Authorization: Bearer SECRET); or --oci-webhook-secret-file",
        shown="none", flag=False,
    )  # fmt: skip
    oci_webhook_secret_file: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file holding the OCI notifications' bearer token (trailing newline ignored)",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none",
    )  # fmt: skip
    oci_tenant: str = setting(
        "oci", TEXT, "the tenant the OCI hook imports and checks models as",
        rule=Rule(lambda name: bool(name) and len(name) <= 200 and name.isprintable(), "must be a tenant name"),
    )  # fmt: skip
    oci_checks: str = setting(
        GATE_CHECKS, TEXT, f"check stages the OCI hook runs on each pushed ONNX artifact: any of {', '.join(STAGES)}",
        rule=Rule(_parses(parse_checks), f"must name check stages, comma-separated, among {', '.join(STAGES)}"),
    )  # fmt: skip
    harbor_token: str = setting(
        "", TEXT, "the bearer token Harbor is registered with (its scanner's Authorization: Bearer TOKEN), which turns the Harbor "
        "scanner on at /harbor/api/v1 (docs/registry.md, \"Harbor\"); or --harbor-token-file. Needs --oci-registry: the one "
        "registry its scans pull from",
        shown="none (the scanner is off)", flag=False,
    )  # fmt: skip
    harbor_token_file: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file holding the bearer token Harbor is registered with (trailing newline ignored)",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none",
    )  # fmt: skip
    link_days: int = setting(
        90, INT, "days a report link the service writes elsewhere (the MLflow report and diff tags: /links/TOKEN) opens for, "
        "without an API key; then 403",
        rule=within(1, 3650),
    )  # fmt: skip
    link_key: str = setting(
        "", TEXT, "the keys report links are signed with, one per line, each at least 32 characters: the first signs, every "
        "one opens (rotation); or --link-key-file. None: a key the service makes once and keeps in its index, shared by "
        "every replica",
        rule=Rule(_link_keys_hold, f"must be keys of at least {MIN_LINK_KEY_CHARS} characters, one per line"),
        shown="none", flag=False,
    )  # fmt: skip
    link_key_file: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file holding the report links' keys, one per line (the first signs, every one opens)",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none (the key kept in the index)",
    )  # fmt: skip
    signing_key: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file holding the PEM private key (ECDSA P-256 or Ed25519, unencrypted: a file or a mounted secret only "
        "the service reads) that signs each check run's attestation (GET /models/{id}/attestation, docs/attestations.md); read "
        "once at start, never by a worker. Needs the signing extra",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none (no attestations)",
    )  # fmt: skip
    verify_keys: Path | None = setting(  # noqa: RUF009
        None, OPTIONAL_PATH, "file of PEM public keys whose attestations still verify beside --signing-key's (key rotation: the "
        "keys signed with before); /readyz lists their fingerprints",
        rule=Rule(lambda path: path is None or path.is_file(), "must be a file"), shown="none",
    )  # fmt: skip
    verifier_id: str = setting(
        "", TEXT, "the service's identity in its attestations (the verifier.id of their SLSA verification summary)",
        rule=Rule(lambda name: len(name) <= 1000 and name.isprintable(), "must be printable text"),
        shown="--public-url, else onnx-import-service@HOSTNAME",
    )  # fmt: skip
    log_level: str = setting("info", LEVEL, f"{', '.join(LOG_LEVELS)}; debug also logs each request", rule=one_of(*LOG_LEVELS))
    log_format: str = setting(
        "text", LEVEL, "text, or json (one JSON object per line: requests, audit events)", rule=one_of("text", "json")
    )
    worker_uid: int = setting(
        WORKER_ID,
        INT,
        "uid an import worker takes once its inputs are open, before it parses, when the service runs as root"
        " (otherwise workers keep the service's, in a user namespace of their own)",
        rule=within(1, 2**32 - 2),
    )
    worker_gid: int = setting(WORKER_ID, INT, "gid an import worker takes with --worker-uid", rule=within(1, 2**32 - 2))
    require_landlock: bool = setting(
        False,
        SWITCH,
        "refuse to start where the workers cannot be confined by Landlock (its file policy); without it, /readyz says so",
        shown="off",
    )

    def __post_init__(self) -> None:
        # Every path is made absolute once, against the directory the service
        # was started in: nothing later (the worker included) depends on the
        # process's current directory.
        for declared in SETTINGS:
            value = getattr(self, declared.name)
            if isinstance(value, Path) and not value.is_absolute():
                object.__setattr__(self, declared.name, _started_in() / value)
        for name in ("store", "data_root"):  # a folder (made absolute, given as a Path or not) or s3://...
            location = str(getattr(self, name))
            if not location.startswith(S3_SCHEME) and not os.path.isabs(location):
                location = str(_started_in() / location)
            object.__setattr__(self, name, location)
        for declared in SETTINGS:
            value = getattr(self, declared.name)
            if declared.rule is not None and not declared.rule.holds(value):
                shown = repr(str(value)) if isinstance(value, str | Path) else declared.kind.show(value)
                raise SettingsError(f"{declared.label} {declared.rule.requirement}, not {shown}")
        # The rules between settings.
        if self.store_bucket is not None and not self.database:
            raise SettingsError("--store s3://... needs --database (the index of a store on object storage is in PostgreSQL)")
        if self.store_backend == "memory" and (self.store_bucket is not None or self.database):
            raise SettingsError("--store-backend memory keeps everything in a temporary folder: give it neither s3:// nor --database")
        if self.max_upload_total < self.max_upload:
            raise SettingsError("--max-upload-total must be at least --max-upload")
        if self.verify_keys is not None and self.signing_key is None:
            raise SettingsError("--verify-keys names the keys that verify beside --signing-key's: give --signing-key too")
        if self.mlflow_url and not (self.mlflow_webhook_secret or self.mlflow_webhook_secret_file):
            raise SettingsError(
                "--mlflow-url needs the webhook's secret: ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET or --mlflow-webhook-secret-file"
            )
        if self.oci_registry and not (self.oci_webhook_secret or self.oci_webhook_secret_file):
            raise SettingsError(
                "--oci-registry needs the notifications' token: ONNX_SERVICE_OCI_WEBHOOK_SECRET or --oci-webhook-secret-file"
            )
        if (self.harbor_token or self.harbor_token_file) and not self.oci_registry:
            raise SettingsError("the Harbor scanner (ONNX_SERVICE_HARBOR_TOKEN or --harbor-token-file) needs --oci-registry: "
                                "the registry its scans pull from")  # fmt: skip

    @property
    def store_bucket(self) -> tuple[str, str] | None:
        """(bucket, prefix) of a store on object storage; None for a folder."""
        return s3_location(self.store)

    @property
    def data_root_bucket(self) -> tuple[str, str] | None:
        """(bucket, prefix) of a data root on object storage; None for a folder."""
        return s3_location(self.data_root)

    @property
    def local_root(self) -> Path:
        """The local folder of the store: --store itself, or --cache-dir for one on object storage."""
        return self.cache_dir if self.store_bucket is not None else Path(self.store)


def _started_in() -> Path:
    """The directory the service was started in, which relative paths are taken from."""
    try:
        return Path.cwd()
    except OSError as error:
        raise SettingsError(f"the current directory cannot be read ({error.strerror}): give absolute paths") from None


def _declared(name: str, metadata: Mapping[str, Any]) -> Setting:
    declaration = metadata[_DECLARATION]
    if not isinstance(declaration, _Declaration):
        raise TypeError(f"Settings.{name} is not declared with setting()")
    flag = flag_name(name) if declaration.flag else None
    return Setting(name, flag, env_name(name), declaration.kind, declaration.help, declaration.default, declaration.rule)


SETTINGS: tuple[Setting, ...] = tuple(_declared(f.name, f.metadata) for f in fields(Settings))  # in declaration order


def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m service`: one `--flag VALUE` per declared flag (strings; parsed later)."""
    parser = argparse.ArgumentParser(prog="python -m service", description="Sandboxed ONNX import service.")
    for declared in SETTINGS:
        if declared.flag is not None:
            text = f"{declared.help} (default: {declared.default.replace('`', '')}; env {declared.variable})"
            if declared.kind is SWITCH:  # a flag alone turns it on
                parser.add_argument(declared.flag, dest=declared.name, default=None, action="store_const", const="1", help=text)
            else:
                parser.add_argument(declared.flag, dest=declared.name, default=None, metavar="VALUE", help=text.replace("%", "%%"))
    return parser


def load_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags, then environment variables, then defaults."""
    environ = os.environ if environ is None else environ
    arguments = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    for declared in SETTINGS:
        text, source = arguments.get(declared.name), declared.flag
        if text is None:
            text, source = environ.get(declared.variable), declared.variable
        if text is not None:
            try:
                values[declared.name] = declared.kind.parse(text)
            except SettingsError as error:
                raise SettingsError(f"{source}: {error}") from None
    return Settings(**values)


def settings_table_markdown() -> str:
    """The README's settings table (flag, variable, default, meaning), one row per setting."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| Flag | Variable | Default | Meaning |", "| --- | --- | --- | --- |"]
    for declared in SETTINGS:
        flag = f"`{declared.flag}`" if declared.flag else "(none)"
        rows.append(f"| {flag} | `{declared.variable}` | {cell(declared.default)} | {cell(declared.help)} |")
    return "\n".join(rows) + "\n"
