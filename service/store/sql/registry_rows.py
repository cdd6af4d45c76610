"""The MLflow gate's rows in the SQL index, shared by every front end and replica: `RegistryRows`.

Owns the queries over `onnx_registry_deliveries` and `onnx_registry_claims`
(`service.store.sql.schema`, migration 9), the same in SQLite and
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
"""

from __future__ import annotations

from service.store.sql.database import SqlDatabase


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
