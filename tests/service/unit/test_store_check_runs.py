"""Each tenant's check runs in the store, over each backend (local, memory,
fleet): kept with the tenant's holding, never another tenant's, replaced
whole, and gone with the holding (a DELETE, an eviction)."""

from __future__ import annotations

from pathlib import Path

from test_store import MakeStore, backend, commit, make_store, store  # noqa: F401  (fixtures)

from service.store.model_store import Store


def test_runs_are_the_holders_own(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"shared bytes")
    commit(store, "bob", b"shared bytes")
    assert store.checks("alice", model_id) is None
    assert store.keep_checks("alice", model_id, b'{"alice": 1}')
    assert store.checks("alice", model_id) == b'{"alice": 1}'
    assert store.checks("bob", model_id) is None
    assert store.keep_checks("bob", model_id, b'{"bob": 1}')
    assert store.keep_checks("bob", model_id, b'{"bob": 2}')  # replaced whole
    assert (store.checks("alice", model_id), store.checks("bob", model_id)) == (b'{"alice": 1}', b'{"bob": 2}')
    assert not store.keep_checks("carol", model_id, b"{}")  # carol holds nothing
    assert store.checks("carol", model_id) is None


def test_runs_go_with_the_holding(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"shared bytes")
    commit(store, "bob", b"shared bytes")
    store.keep_checks("alice", model_id, b'{"alice": 1}')
    store.keep_checks("bob", model_id, b'{"bob": 1}')
    assert store.release("alice", model_id)
    assert store.checks("alice", model_id) is None and store.checks("bob", model_id) == b'{"bob": 1}'
    commit(store, "alice", b"shared bytes")  # held again: no runs until its import keeps them
    assert store.checks("alice", model_id) is None


def test_an_evicted_models_runs_are_gone(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, store_max_bytes=1 << 20)
    try:
        first, _ = commit(store, "alice", b"a" * 600_000)
        store.keep_checks("alice", first, b'{"first": 1}')
        commit(store, "alice", b"b" * 600_000)  # takes the store past its cap: the first goes
        assert not store.has(first)
        assert store.checks("alice", first) is None
    finally:
        store.close()
