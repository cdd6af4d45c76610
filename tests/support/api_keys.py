"""API keys for the tests: `key_file(path, roles)` writes a key file with one
new key per role (its tenant and scopes) and answers each role's secret; the
file holds only their SHA-256, as `python -m service keygen` makes them.
`ACCESS_ROLES` are the roles the access tests use."""

from __future__ import annotations

from pathlib import Path

from service.access.keys import new_key

Role = tuple[str, list[str]]  # tenant, scopes

ACCESS_ROLES: dict[str, Role] = {
    "alice": ("team-a", ["import", "read", "delete"]),
    "alice-reader": ("team-a", ["read"]),
    "bob": ("team-b", ["import", "read", "delete"]),
    "ops": ("ops", ["metrics"]),  # reads /metrics, nothing else
}


def key_file(path: Path, roles: dict[str, Role]) -> dict[str, str]:
    """Writes the key file at `path`; each role's secret."""
    made = {role: new_key(tenant, scopes) for role, (tenant, scopes) in roles.items()}
    path.write_text("\n".join(table for _, table in made.values()))
    return {role: secret for role, (secret, _) in made.items()}
