"""Capability links to a tenant's reports: `ReportLinks` makes and opens them, `Link` is what one says.

A link, `{--public-url}/links/{token}`, opens one report for whoever holds
it, with no API key: the SARIF report of one or several models (kind
`sarif`), or the comparison of two (`diff`), as the tenant it names sees
them, until it expires (`--link-days` after it was made). It opens nothing
else (`service.api.routes.links` answers that report and only it); a model
the tenant no longer holds is a 404, as on the tenant's own routes.

The token is the link's whole statement, signed: base64url, unpadded, of

    format (1 byte: 1) | kind (1: 0 sarif, 1 diff) | expiry (4: Unix seconds, big-endian)
    | the tenant's length (2) | the tenant (UTF-8) | each model id (32 bytes: its hex digits' bytes)
    | HMAC-SHA256 of all that (32)

The MAC is checked before anything else is read, against each key in turn
(`hmac.compare_digest`). A link is signed, not encrypted: its holder can
read the tenant's name and the ids in it. With a tenant of 6 characters it
is 104 characters for one id, 147 for two and 744 for 16 (MLflow's tag
values hold 5,000), at most `MAX_LINK_MODELS` ids.

The keys: the operator's, when given (`ONNX_SERVICE_LINK_KEY` or
`--link-key-file`, one a line: the first signs, every one opens, so a
rotation puts the new key first and keeps the old one while its links
should still open); else one the service makes once and keeps in its
index (`Store.shared_secret`), which every front end and every replica of
a fleet reads, so a link one made opens on every other. The stored key is
read when the store opens (`load`), and held from then on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from service.errors import LinkExpired, LinkRefused
from service.settings import MIN_LINK_KEY_CHARS, Settings, link_keys
from service.settings.kinds import SettingsError
from service.store.model_store import Store

LinkKind = Literal["sarif", "diff"]
KINDS: tuple[LinkKind, ...] = ("sarif", "diff")  # their numbers in the token
FORMAT = 1
MAX_LINK_MODELS = 64  # ids one link names: 64 with a tenant of 200 characters still fit MLflow's 5,000-character tag
MAX_TOKEN_CHARS = 8192  # a longer token is refused unread
LINK_KEY_NAME = "report-links"  # the stored key's name in the index (`onnx_secrets`)
SECONDS_PER_DAY = 86_400
_HEAD = struct.Struct(">BBIH")  # format, kind, expiry, the tenant's length
_ID_BYTES = 32
_MAC_BYTES = hashlib.sha256().digest_size
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
_CHANGED = "this link is not one the service made as it stands: it was changed or cut, or signed by a key the service no longer holds"


@dataclass(frozen=True)
class Link:
    """What a link says: its kind, the tenant whose report it opens, the models, its expiry (Unix seconds)."""

    kind: LinkKind
    tenant: str
    model_ids: tuple[str, ...]
    expires: int


class ReportLinks:
    """The service's links to reports (see the module comment)."""

    def __init__(self, store: Store, operator_keys: list[str], days: int) -> None:
        """`operator_keys`: the operator's keys (the first signs), none for the one kept in the index."""
        self.store = store
        self.days = days
        self._keys = [key.encode() for key in operator_keys]
        self._loading = threading.Lock()

    @classmethod
    def for_settings(cls, settings: Settings, store: Store) -> ReportLinks:
        """The links of `settings`: the operator's keys from the variable, else the file (SettingsError if it holds none fit)."""
        keys = link_keys(settings.link_key)
        if not keys and settings.link_key_file is not None:
            try:
                keys = link_keys(settings.link_key_file.read_text())
            except (OSError, UnicodeDecodeError) as error:
                raise SettingsError(f"--link-key-file cannot be read: {error}") from None
            if not keys or any(len(key) < MIN_LINK_KEY_CHARS for key in keys):
                raise SettingsError(f"--link-key-file must hold keys of at least {MIN_LINK_KEY_CHARS} characters, one per line")
        return cls(store, keys, settings.link_days)

    def load(self) -> None:
        """Read the stored key unless the operator gave keys (blocking: the index is asked once, then it is held)."""
        with self._loading:
            if not self._keys:
                self._keys = [self.store.shared_secret(LINK_KEY_NAME).encode()]

    def _signing_keys(self) -> list[bytes]:
        if not self._keys:
            self.load()  # the store opened without it (a link asked for before `load`): read now
        return self._keys

    # --- making links

    def report_link(self, public_url: str, tenant: str, model_ids: list[str], *, expires: float | None = None) -> str:
        """The link to the SARIF report of the tenant's `model_ids` (one run per model), expiring
        `expires` (Unix seconds; default: `--link-days` from now)."""
        return self._link(public_url, "sarif", tenant, model_ids, expires)

    def diff_link(self, public_url: str, tenant: str, before: str, after: str, *, expires: float | None = None) -> str:
        """The link to the comparison of the tenant's model `before` with its model `after`, as `report_link` expires."""
        return self._link(public_url, "diff", tenant, [before, after], expires)

    def _link(self, public_url: str, kind: LinkKind, tenant: str, model_ids: list[str], expires: float | None) -> str:
        if not 1 <= len(model_ids) <= MAX_LINK_MODELS:
            raise ValueError(f"a link names 1 to {MAX_LINK_MODELS} model ids, not {len(model_ids)}")
        until = time.time() + self.days * SECONDS_PER_DAY if expires is None else expires
        named = tenant.encode()
        if len(named) > 0xFFFF:
            raise ValueError("a link's tenant name is at most 65,535 bytes of UTF-8")
        payload = _HEAD.pack(FORMAT, KINDS.index(kind), min(max(int(until), 0), 2**32 - 1), len(named)) + named
        payload += b"".join(_id_bytes(model_id) for model_id in model_ids)
        token = base64.urlsafe_b64encode(payload + _mac(self._signing_keys()[0], payload)).rstrip(b"=").decode()
        return f"{public_url.rstrip('/')}/links/{token}"

    # --- opening links

    def opened(self, token: str) -> Link:
        """What the link `token` says, if the service made it and it has not expired;
        else `LinkRefused` (changed, cut, another key's) or `LinkExpired`."""
        signed = _decoded(token)
        payload, mac = signed[:-_MAC_BYTES], signed[-_MAC_BYTES:]
        if not any(hmac.compare_digest(mac, _mac(key, payload)) for key in self._signing_keys()):
            raise LinkRefused(_CHANGED)
        link = _parsed(payload)
        if link.expires <= time.time():
            raise LinkExpired(f"this link expired at {datetime.fromtimestamp(link.expires, UTC):%Y-%m-%d %H:%M:%S} UTC: ask for a new one")
        return link


def _id_bytes(model_id: str) -> bytes:
    """A model id's 32 bytes (ValueError unless it is 64 lower-case hex digits, as the store's ids are)."""
    try:
        found = bytes.fromhex(model_id)
    except ValueError:
        found = b""
    if len(found) != _ID_BYTES or found.hex() != model_id:
        raise ValueError(f"a link's model id is 64 lower-case hex digits, not {model_id!r}")
    return found


def _mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def _decoded(token: str) -> bytes:
    """The token's bytes, long enough to hold a head and a MAC; LinkRefused for anything else."""
    if len(token) > MAX_TOKEN_CHARS or _TOKEN.fullmatch(token) is None:
        raise LinkRefused(_CHANGED)
    try:
        signed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise LinkRefused(_CHANGED) from None
    if len(signed) < _HEAD.size + _MAC_BYTES or base64.urlsafe_b64encode(signed).rstrip(b"=").decode() != token:
        raise LinkRefused(_CHANGED)  # too short, or a changed last character whose spare bits decode to the same bytes
    return signed


def _parsed(payload: bytes) -> Link:
    """A signed payload's statement (a format this release does not write is refused)."""
    version, kind, expires, tenant_length = _HEAD.unpack_from(payload)
    ids = payload[_HEAD.size + tenant_length :]
    count, rest = divmod(len(ids), _ID_BYTES)
    if version != FORMAT or kind >= len(KINDS) or rest or not 1 <= count <= MAX_LINK_MODELS or (KINDS[kind] == "diff" and count != 2):
        raise LinkRefused(_CHANGED)
    try:
        tenant = payload[_HEAD.size : _HEAD.size + tenant_length].decode()
    except UnicodeDecodeError:
        raise LinkRefused(_CHANGED) from None
    model_ids = tuple(ids[at : at + _ID_BYTES].hex() for at in range(0, len(ids), _ID_BYTES))
    return Link(KINDS[kind], tenant, model_ids, expires)
