"""API keys: who a request is, and what it may do.

Owns `KeyRing` (the keys of a TOML key file, reloadable), `Principal` (a
tenant and its scopes), `load_key_file` and `new_key` (what `python -m
service keygen` prints). A key file holds one `[[key]]` table per key:

    [[key]]
    sha256 = "<hex SHA-256 of the secret>"   # the secret itself is never stored
    tenant = "team-a"
    scopes = ["import", "read", "delete"]     # a subset of import, read, delete, metrics

A request sends `Authorization: Bearer <secret>`. The secret's SHA-256 is
compared with every key's, each in constant time (`hmac.compare_digest`, and
no early exit), so neither the answer nor its timing says which keys exist.
Secrets are never logged. Without a key file there is one anonymous tenant
with every scope. `metrics` is the operator's scope (reading `/metrics`, whose
store totals span every tenant); a tenant's keys get `import`, `read` and
`delete` (keygen's default). A key file must hold at least one key: an empty
one (or only comments) is refused like a broken one, at the start and on reload.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("import", "read", "delete")  # a tenant's scopes (keygen's default)
METRICS_SCOPE = "metrics"  # the operator's: GET /metrics
KNOWN_SCOPES = (*SCOPES, METRICS_SCOPE)
ANONYMOUS = "anonymous"
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_SECRET_CHARS = 512


class KeyFileError(ValueError):
    """The key file cannot be used (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    scopes: frozenset[str]


@dataclass(frozen=True, slots=True)
class ApiKey:
    digest: bytes  # SHA-256 of the secret
    principal: Principal


def load_key_file(path: Path) -> list[ApiKey]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"{path}: cannot be read ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise KeyFileError(f"{path}: not TOML ({error})") from None
    tables = document.get("key", [])
    if not isinstance(tables, list) or set(document) - {"key"}:
        raise KeyFileError(f"{path}: only [[key]] tables are allowed")
    keys: list[ApiKey] = []
    seen: set[bytes] = set()
    for index, table in enumerate(tables):
        where = f"{path}: key {index + 1}"
        if not isinstance(table, dict) or set(table) != {"sha256", "tenant", "scopes"}:
            raise KeyFileError(f"{where}: needs exactly sha256, tenant and scopes")
        digest, tenant, scopes = table["sha256"], table["tenant"], table["scopes"]
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise KeyFileError(f"{where}: sha256 must be 64 hex digits (the SHA-256 of the secret)")
        if not isinstance(tenant, str) or not TENANT_NAME.fullmatch(tenant):
            raise KeyFileError(f"{where}: tenant must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -)")
        if not isinstance(scopes, list) or not scopes or not set(scopes) <= set(KNOWN_SCOPES) or len(set(scopes)) != len(scopes):
            raise KeyFileError(f"{where}: scopes must be a list of distinct values among {', '.join(KNOWN_SCOPES)}")
        raw = bytes.fromhex(digest)
        if raw in seen:
            raise KeyFileError(f"{where}: the same secret is listed twice")
        seen.add(raw)
        keys.append(ApiKey(raw, Principal(tenant, frozenset(scopes))))
    if not keys:
        raise KeyFileError(f"{path}: holds no [[key]] table: no key would be accepted")
    return keys


class KeyRing:
    """The keys in force. `None` path: anonymous (one tenant, every scope)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.keys: list[ApiKey] = load_key_file(path) if path is not None else []

    @property
    def anonymous(self) -> bool:
        return self.path is None

    def importing_tenants(self) -> set[str]:
        """The tenants that may import (the anonymous one without a key file)."""
        if self.anonymous:
            return {ANONYMOUS}
        return {key.principal.tenant for key in self.keys if "import" in key.principal.scopes}

    def reload(self) -> None:
        """Read the file again; on any error keep the keys in force (and raise, for the log)."""
        if self.path is not None:
            self.keys = load_key_file(self.path)

    def principal(self, authorization: str | None) -> Principal | None:
        """The principal of an `Authorization` header, or None (absent, malformed or unknown)."""
        if self.anonymous:
            return Principal(ANONYMOUS, frozenset(KNOWN_SCOPES))
        if authorization is None:
            return None
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret or len(secret) > MAX_SECRET_CHARS:
            return None
        digest = hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()
        found = None
        for key in self.keys:  # every key compared, in constant time each
            if hmac.compare_digest(key.digest, digest):
                found = key.principal
        return found


def new_key(tenant: str, scopes: list[str]) -> tuple[str, str]:
    """A new secret and its `[[key]]` table (the secret is shown once, never stored)."""
    if not TENANT_NAME.fullmatch(tenant):
        raise KeyFileError("the tenant must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -)")
    if not scopes or not set(scopes) <= set(KNOWN_SCOPES):
        raise KeyFileError(f"scopes must be among {', '.join(KNOWN_SCOPES)}")
    secret = "oik_" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    listed = ", ".join(f'"{scope}"' for scope in KNOWN_SCOPES if scope in scopes)
    return secret, f'[[key]]\nsha256 = "{digest}"\ntenant = "{tenant}"\nscopes = [{listed}]\n'
