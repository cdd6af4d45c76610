"""The registry gates' rows in the SQL index, shared by every front end and replica: `RegistryRows`, `ScanRow`.

Owns the queries over `onnx_registry_deliveries` and `onnx_registry_claims`
(`service.store.sql.schema`, migration 11) and `onnx_harbor_scans`
(migration 13), the same in SQLite and
PostgreSQL, each one statement in autocommit:

- a delivery marker per delivery id (its key: the gate hashes the id):
  `first_delivery` inserts it, and an insert that meets one already there
  (`ON CONFLICT DO NOTHING`, no row changed) is a duplicate, whichever
  process or replica inserted it; `prune_deliveries` removes the markers
  older than the seconds given, by the database's clock;
- a claim per key (the gate's: a registered model's alias), held by one
  holder token until its lease ends: `claim` takes it when nobody holds it
  or the holder's lease has lapsed (a holder that died), `release` gives it
  back (only by its holder). A claim is a row, not a lock of the database:
  nothing waits in the database while the holder calls elsewhere (MLflow).
- a Harbor scan per scan id (`service.registry.harbor_scanner`): `begin_scan`
  inserts it running, with a lease its process renews (`renew_scans`) while
  it runs it; `end_scan` writes its state and body (the report, or the
  error); `scan` reads it back, with whether a running scan's lease has
  lapsed (its process died); `prune_scans` removes those asked for more
  than the seconds given ago.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.store.sql.database import SqlDatabase


@dataclass(frozen=True, slots=True)
class ScanRow:
    state: str  # running, done or error
    body: str  # the report's JSON (done), the error's message (error), "" (running)
    lapsed: bool  # running, and its process's lease has ended


class RegistryRows:
    def __init__(self, database: SqlDatabase) -> None:
        self.database = database
        dialect = database.dialect
        self._insert_delivery = f"INSERT INTO onnx_registry_deliveries (id, taken) VALUES (%s, {dialect.now}) ON CONFLICT (id) DO NOTHING"
        self._prune = f"DELETE FROM onnx_registry_deliveries WHERE taken <= {dialect.seconds_ago}"
        self._claim = (
            f"INSERT INTO onnx_registry_claims (name, holder, until) VALUES (%s, %s, {dialect.seconds_ahead})"
            " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until"
            f" WHERE onnx_registry_claims.until <= {dialect.now}"
        )
        self._begin_scan = (
            "INSERT INTO onnx_harbor_scans (id, state, body, created, until)"
            f" VALUES (%s, 'running', '', {dialect.now}, {dialect.seconds_ahead})"
        )
        self._renew_scan = f"UPDATE onnx_harbor_scans SET until = {dialect.seconds_ahead} WHERE id = %s AND state = 'running'"
        self._scan = f"SELECT state, body, CASE WHEN until <= {dialect.now} THEN 1 ELSE 0 END FROM onnx_harbor_scans WHERE id = %s"
        self._prune_scans = f"DELETE FROM onnx_harbor_scans WHERE created <= {dialect.seconds_ago}"

    def first_delivery(self, key: str) -> bool:
        """Mark the delivery `key` taken; False if it was already (by any process of any replica)."""
        return self.database.change(self._insert_delivery, (key,)) == 1

    def prune_deliveries(self, older_than: float) -> int:
        """Remove the delivery markers taken more than `older_than` seconds ago; how many went."""
        return self.database.change(self._prune, (older_than,), durable=False)

    def claim(self, key: str, holder: str, lease_seconds: float) -> bool:
        """Take the claim `key` for `holder`, for `lease_seconds`; False while another's lease runs."""
        return self.database.change(self._claim, (key, holder, lease_seconds)) == 1

    def release(self, key: str, holder: str) -> None:
        """Give the claim back, if `holder` still holds it."""
        self.database.change("DELETE FROM onnx_registry_claims WHERE name = %s AND holder = %s", (key, holder))

    def begin_scan(self, scan_id: str, lease_seconds: float) -> None:
        """A new scan, running, its process's lease `lease_seconds` long."""
        self.database.change(self._begin_scan, (scan_id, lease_seconds))

    def renew_scans(self, scan_ids: list[str], lease_seconds: float) -> None:
        """The leases of the running scans `scan_ids` (this process's), `lease_seconds` from now."""
        for scan_id in scan_ids:
            self.database.change(self._renew_scan, (lease_seconds, scan_id), durable=False)

    def end_scan(self, scan_id: str, state: str, body: str) -> None:
        """The scan's end: done (with its report) or error (with the message)."""
        self.database.change("UPDATE onnx_harbor_scans SET state = %s, body = %s WHERE id = %s", (state, body, scan_id))

    def scan(self, scan_id: str) -> ScanRow | None:
        """The scan `scan_id`; None if there is none (never asked for, or expired)."""
        row = self.database.one(self._scan, (scan_id,))
        return None if row is None else ScanRow(str(row[0]), str(row[1]), bool(row[2]))

    def prune_scans(self, older_than: float) -> int:
        """Remove the scans asked for more than `older_than` seconds ago; how many went."""
        return self.database.change(self._prune_scans, (older_than,), durable=False)
