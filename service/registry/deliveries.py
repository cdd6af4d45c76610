"""Which deliveries the registry hooks have taken, shared by every front end of every replica: `Deliveries`.

A marker per delivery id (the MLflow hook's; the OCI hook's is the
registry, repository and manifest digest), its SHA-256, so any id makes a key, in the shared
SQL index (`service.store.sql.registry_rows`: SQLite alone, PostgreSQL in a
fleet), inserted once: of all the processes and replicas given the same
delivery, exactly one inserts its marker and validates; a replay to any of
them is a duplicate. A marker outlives the delivery's timestamp window
(`signature.MAX_SKEW`): past that a replay is refused as stale anyway, so
`prune` removes markers older than `KEEP_SECONDS` (the database's clock).
Its calls wait on the database: the hook runs them in a worker thread.
"""

from __future__ import annotations

import hashlib

from service.registry.signature import MAX_SKEW
from service.store.sql.registry_rows import RegistryRows

KEEP_SECONDS = 4 * MAX_SKEW


class Deliveries:
    def __init__(self, rows: RegistryRows) -> None:
        self.rows = rows

    def first(self, delivery_id: str) -> bool:
        """Mark `delivery_id` taken; False if it was already (by any process of any replica)."""
        return self.rows.first_delivery(hashlib.sha256(delivery_id.encode()).hexdigest())

    def prune(self) -> int:
        """Remove markers older than KEEP_SECONDS; how many went."""
        return self.rows.prune_deliveries(KEEP_SECONDS)
