"""Admission, fair between tenants: receiving places, the import queue and worker slots.

At most `workers` worker jobs run and `queue` more imports wait; beyond that
503 with a Retry-After estimated from recent jobs. Uploads whose bodies are
still arriving are bounded apart (`max_receiving`): an upload joins the
import queue only once its body is on disk, so slow clients hold receiving
places, never import places.

Fair between tenants:

- **A share.** One tenant holds at most `tenant_share` of the import places
  (running and queued) and of the receiving places (at least one of each);
  past it that tenant alone is refused, with a Retry-After from its own jobs
  still to run (each refused request told a later turn than the one
  before, as its places free), while the others are admitted. The share holds between
  tenants (`share_between`): a service only one tenant may import into
  gives it every place.
- **Turns.** A free worker slot goes to the waiter whose tenant runs the
  fewest workers now; then to an import that already runs a worker (its
  check worker: an import started is finished first); then to the tenant
  served least recently (round robin); within a tenant, to the oldest. Two
  busy tenants take turns, whatever either has queued; one tenant alone
  uses every worker.
- **Memory.** A worker whose memory cap is sized above `--worker-memory`
  (a check worker on a large model: `service.sandbox.memory_sizing`) also
  reserves its cap, in MiB, from `memory_budget` (`--worker-memory-share` of
  the machine's or the service's cgroup's memory) for as long as it runs:
  the sized workers running at once never add up past it (the others are
  bounded by `--workers` times `--worker-memory`, as before). One tenant
  already running a sized worker may reserve at most `tenant_share` of the
  budget in all; its first always fits (a sized cap is at most the budget).
  A slot whose memory is not free is waited for as the slot is, in its turn:
  the claim keeps its place ahead of later ones (here; a claim of another
  process gives way after `LEAVE_SECONDS`), so a large import is not passed
  over forever, and a tenant with a large worker running comes after one
  without.
- **Leaving.** A waiter whose task is cancelled (its client went:
  `service.api.client_presence`) leaves the queue and takes no place; the
  pipeline ends a running worker the same way
  (`service.imports.workers`).

The places are shared by every front-end process of one service: they are
locks on files in one folder (`service.imports.place_locks`), which the
kernel frees when a process dies; each tenant's are in files of its own,
named by a digest of the tenant, with the time its last slot was granted.
Each process's best waiter marks its claim in `waiting` as one byte whose
offset orders the claims (its tenant's running workers, whether its import
runs already, when its tenant was last served; equal claims in the order
they were marked): a free slot is left to a better claim of another
process, for at most `LEAVE_SECONDS` (a stopped process's claim never takes it). Owns `Admission` (`receiving(tenant)`,
`admitted(tenant)` giving a `Place`, whose `slot()` is one worker slot) and
the figures `/readyz` and the metrics show: totals, how many tenants hold
places and the most any one holds; a tenant's own with `for_tenant`, never
another's by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import random
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import Overloaded
from service.imports.place_locks import Marks, Membership, SharedCount

POLL_SECONDS = (0.01, 0.02)  # a process's best waiter looks for a slot freed elsewhere this often
LEAVE_SECONDS = 1.0  # how long a free slot is left to a better claim elsewhere (a stopped process's)
KINDS = ("receiving", "admitted", "running")
MAX_RETRY_AFTER = 3600
BUSY_SECONDS = 0.5  # how long a count of the busy tenants stands
_RUNNING_SHIFT = 54  # a claim's offset: its tenant's running workers, then not started, then last served (microseconds)
_STARTED_SHIFT = 53
_SERVED_MASK = (1 << _STARTED_SHIFT) - 1
_MOST_RUNNING = 510  # keeps every offset below 2**63 - 1
MIB = 1 << 20  # the memory budget's unit
_SERVED = struct.Struct("<q")  # a tenant's `served` file: CLOCK_MONOTONIC microseconds of its last slot


def tenant_key(tenant: str) -> str:
    """The name of a tenant's files: a digest (any tenant name makes a file name, and none is written out)."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class TenantPlaces:
    """One tenant's places now, across the service's processes."""

    receiving: int
    admitted: int
    running: int

    @property
    def waiting(self) -> int:
        return max(0, self.admitted - self.running)


class HeldSlot:
    """A worker slot `Place.slot` holds: given back as its block ends, or,
    once `given_back_by(register)` is called, when `register`'s callback is
    called (from any thread: a worker whose answer came before its exit
    keeps its slot and memory until it is gone)."""

    __slots__ = ("register",)

    def __init__(self) -> None:
        self.register: Callable[[Callable[[], None]], None] | None = None

    def given_back_by(self, register: Callable[[Callable[[], None]], None]) -> None:
        self.register = register


@dataclass(eq=False)
class Place:
    """An import's place in the queue; `slot()` is a worker slot of it."""

    admission: Admission
    tenant: str
    arrived: int = field(default_factory=lambda: time.monotonic_ns() // 1000)  # microseconds: one clock for every process
    slots_taken: int = 0
    first_slot: float | None = None  # time.monotonic() of its first slot

    @contextlib.asynccontextmanager
    async def slot(self, memory: int = 0) -> AsyncIterator[HeldSlot]:
        """A worker slot; with `memory` (bytes, a sized worker's cap) reserved from the memory budget."""
        admission = self.admission
        units = admission.memory_units(memory)
        await admission.wait_for_slot(self, units)
        self.slots_taken += 1
        self.first_slot = self.first_slot or time.monotonic()
        held = HeldSlot()
        try:
            yield held
        finally:
            if held.register is None:
                admission.release_slot(self.tenant, units)
            else:
                loop = asyncio.get_running_loop()

                def give_back() -> None:
                    with contextlib.suppress(RuntimeError):  # the loop has closed: the process is ending, its places with it
                        loop.call_soon_threadsafe(admission.release_slot, self.tenant, units)

                held.register(give_back)


@dataclass
class _Pace:
    """How long imports hold their place once they run (a moving mean), and the last turn told to one refused."""

    seconds: float = 0.5
    last_turn: float = 0.0  # time.monotonic()

    def took(self, seconds: float) -> None:
        self.seconds = 0.8 * self.seconds + 0.2 * seconds

    def turn(self, interval: float) -> int:
        """Seconds until the next turn, one `interval` after the last one told (or now)."""
        now = time.monotonic()
        self.last_turn = max(now, self.last_turn) + interval
        return max(1, min(MAX_RETRY_AFTER, math.ceil(self.last_turn - now)))


@dataclass(eq=False)
class _Waiter:
    """One worker of an import waiting for a slot."""

    place: Place
    turn: asyncio.Event = field(default_factory=asyncio.Event)


class _Tenant:
    """A tenant's counts in this process's view (one `SharedCount` per kind, and its memory reserved, in MiB),
    and when it was last served."""

    def __init__(self, folder: Path, member: int) -> None:
        folder.mkdir(exist_ok=True)
        self.counts = {kind: SharedCount(folder / kind, member) for kind in KINDS}
        self.memory = SharedCount(folder / "memory", member)
        self.served_fd = os.open(folder / "served", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def places(self) -> TenantPlaces:
        return TenantPlaces(*(self.counts[kind].total() for kind in KINDS))

    def served(self) -> int:
        """When its last slot was granted (microseconds; 0: never)."""
        data = os.pread(self.served_fd, _SERVED.size, 0)
        return _SERVED.unpack(data)[0] if len(data) == _SERVED.size else 0

    def serve(self) -> None:
        os.pwrite(self.served_fd, _SERVED.pack(time.monotonic_ns() // 1000), 0)

    def close(self) -> None:
        for count in self.counts.values():
            count.close()
        self.memory.close()
        os.close(self.served_fd)


class Admission:
    def __init__(
        self, workers: int, queue: int, max_receiving: int, folder: Path, tenant_share: float = 1.0, memory_budget: int = 0
    ) -> None:
        self.workers = workers
        self.memory_budget = memory_budget // MIB  # MiB the sized workers may reserve in all (0: no budget)
        self.capacity = workers + queue
        self.max_receiving = max_receiving
        self.configured_share = tenant_share
        self.tenant_share = tenant_share  # in force: the configured share, or all of it for a lone tenant
        self.pace = _Pace()  # this process's imports, all tenants'
        self.paces: dict[str, _Pace] = {}  # each tenant's, in this process
        self.busy: tuple[float, list[TenantPlaces]] = (0.0, [])  # the busy tenants as last counted, and when
        self.folder = folder
        self.member = Membership(folder)
        self.places = {kind: SharedCount(folder / kind, self.member.index) for kind in KINDS}
        self.memory = SharedCount(folder / "memory", self.member.index)  # MiB reserved by the sized workers running
        (folder / "by-tenant").mkdir(exist_ok=True)
        self.tenants: dict[str, _Tenant] = {}
        self.claims = Marks(folder / "waiting")
        self.claim: int | None = None  # this process's claim (offset), if it marks one
        self.waiters: list[_Waiter] = []  # this process's workers waiting for a slot (an import may have two)

    def close(self) -> None:
        for count in self.places.values():
            count.close()
        self.memory.close()
        for tenant in self.tenants.values():
            tenant.close()
        self.claims.close()
        self.member.close()

    # --- the figures ---

    @property
    def receiving_now(self) -> int:
        return self.places["receiving"].total()

    @property
    def admitted_now(self) -> int:
        return self.places["admitted"].total()

    @property
    def running(self) -> int:
        return self.places["running"].total()

    @property
    def waiting(self) -> int:
        """Imports admitted, not running (never below 0: the two counts are read
        apart, and other processes take and free places meanwhile)."""
        return max(0, self.admitted_now - self.running)

    @property
    def saturated(self) -> bool:
        """A new import would be refused now, whoever sends it (queue full, or no place to receive)."""
        return self.admitted_now >= self.capacity or self.receiving_now >= self.max_receiving

    def share_between(self, tenants: int) -> None:
        """`tenants` may import: the configured share holds between two or more; one alone may hold every place."""
        self.tenant_share = self.configured_share if tenants > 1 else 1.0

    def tenant_limit(self, places: int) -> int:
        """The most of `places` one tenant may hold."""
        return max(1, math.floor(places * self.tenant_share + 1e-9))

    def for_tenant(self, tenant: str) -> TenantPlaces:
        return self._tenant(tenant).places()

    def busy_tenants(self) -> list[TenantPlaces]:
        """Every tenant holding a place, unnamed (each front end's and the others'), as counted at most
        BUSY_SECONDS ago (a count reads every tenant's files: /readyz asks it at every call)."""
        counted, found = self.busy
        if time.monotonic() - counted < BUSY_SECONDS:
            return found
        found = []
        for entry in os.scandir(self.folder / "by-tenant"):
            places = self._tenant_by_key(entry.name).places()
            if places.receiving or places.admitted:
                found.append(places)
        self.busy = (time.monotonic(), found)
        return found

    # --- receiving and queue places ---

    @contextlib.asynccontextmanager
    async def receiving(self, tenant: str) -> AsyncIterator[None]:
        """A place to receive a body (an upload's), not an import place; else Overloaded."""
        own = self._tenant(tenant).counts["receiving"]
        if not own.take(self.tenant_limit(self.max_receiving)):
            raise Overloaded(
                f"this tenant has {own.total()} uploads being received, its share of the {self.max_receiving} places "
                "(--tenant-share); try again once one has arrived",
                self._turn(tenant),
            )
        try:
            if not self.places["receiving"].take(self.max_receiving):
                raise Overloaded(f"{self.receiving_now} uploads are being received; try again later", self._turn())
            try:
                yield
            finally:
                self.places["receiving"].release()
        finally:
            own.release()

    @contextlib.asynccontextmanager
    async def admitted(self, tenant: str) -> AsyncIterator[Place]:
        """A place in the import queue for `tenant`; else Overloaded, with a Retry-After from the jobs ahead."""
        own = self._tenant(tenant).counts["admitted"]
        limit = self.tenant_limit(self.capacity)
        if not own.take(limit):
            held = own.total()
            raise Overloaded(
                f"this tenant has {held} imports running or waiting, its share of the {self.capacity} places "
                "(--tenant-share); try again once one has ended",
                self._turn(tenant),
            )
        place = Place(self, tenant)
        try:
            if not self.places["admitted"].take(self.capacity):
                raise Overloaded(f"{self.running} imports are running and {self.waiting} waiting; try again later", self._turn())
            try:
                yield place
            finally:
                self.places["admitted"].release()
                if place.first_slot is not None:
                    seconds = time.monotonic() - place.first_slot
                    self.pace.took(seconds)
                    self._pace(tenant).took(seconds)
        finally:
            own.release()

    def _turn(self, tenant: str | None = None) -> int:
        """A refused request's Retry-After: the turn it is given in a line of the refused. A place of the
        tenant's (or any place) frees every so often, at the pace of its recent imports over the workers it
        runs; each request refused meanwhile is told a turn one such interval after the last one told, so
        the herd of a tenant's refused clients comes back spread over the places as they free."""
        if tenant is None:
            return self.pace.turn(self.pace.seconds / self.workers)
        running = self._tenant(tenant).counts["running"].total()
        pace = self._pace(tenant)
        return pace.turn(pace.seconds / max(1, running))

    def _pace(self, tenant: str) -> _Pace:
        found = self.paces.get(tenant)
        if found is None:
            found = self.paces[tenant] = _Pace(self.pace.seconds)
        return found

    # --- worker slots ---

    def memory_units(self, memory: int) -> int:
        """The MiB a worker of `memory` bytes reserves (none without a budget), at most the budget."""
        return min(self.memory_budget, math.ceil(memory / MIB)) if self.memory_budget else 0

    @property
    def memory_reserved(self) -> int:
        """MiB the sized workers running hold, every process's."""
        return self.memory.total()

    @property
    def memory_in_bytes(self) -> tuple[int, int]:
        """The memory budget and what the sized workers running reserve of it now, in bytes (for /readyz and /metrics)."""
        return self.memory_budget * MIB, self.memory_reserved * MIB

    async def wait_for_slot(self, place: Place, memory: int = 0) -> None:
        """Take a worker slot for `place` once it is the best claim, here and elsewhere,
        and (`memory` MiB, a sized worker's) once the memory budget has that much free."""
        waiter = _Waiter(place)
        self.waiters.append(waiter)
        left_since: float | None = None  # since when a free slot is left to a better claim elsewhere
        try:
            while True:
                best = self._best()
                if best is waiter:
                    offset = self._mark(self._claim_of(place))
                    better = self.claims.any_before(offset)
                    if better and left_since is not None and time.monotonic() - left_since > LEAVE_SECONDS:
                        better = False  # left long enough: that claim's process does not take it
                    else:
                        left_since = (left_since or time.monotonic()) if better and self.running < self.workers else None
                    if not better and self.places["running"].take(self.workers):
                        if self._reserve(place.tenant, memory):
                            tenant = self._tenant(place.tenant)
                            tenant.counts["running"].take(self.workers)
                            tenant.serve()
                            return
                        self.places["running"].release()  # its memory is not free: it keeps its claim, and waits
                elif best is not None:
                    best.turn.set()  # the best claim changed meanwhile (another's counts moved): its turn to look
                waiter.turn.clear()
                await _woken(waiter.turn, random.uniform(*POLL_SECONDS) if best is waiter else None)
        finally:
            self.waiters.remove(waiter)
            self._unmark()
            self._wake_best()

    def release_slot(self, tenant: str, memory: int = 0) -> None:
        self.places["running"].release()
        own = self._tenant(tenant)
        own.counts["running"].release()
        if memory:
            own.memory.release(memory)
            self.memory.release(memory)
        self._wake_best()

    def _reserve(self, tenant: str, memory: int) -> bool:
        """`memory` MiB of the budget for `tenant`'s worker: within the budget, and within the tenant's share of it
        unless it reserves nothing yet (see the module comment)."""
        if not memory:
            return True
        own = self._tenant(tenant).memory
        limit = self.memory_budget if own.total() == 0 else max(1, math.floor(self.memory_budget * self.tenant_share + 1e-9))
        if not own.take(limit, memory):
            return False
        if self.memory.take(self.memory_budget, memory):
            return True
        own.release(memory)
        return False

    def _best(self) -> _Waiter | None:
        """This process's waiter with the best claim (the lowest offset; then the oldest import)."""
        claims: dict[str, tuple[int, int]] = {}
        best: tuple[int, int, _Waiter] | None = None
        for waiter in self.waiters:
            place = waiter.place
            if place.tenant not in claims:
                tenant = self._tenant(place.tenant)
                claims[place.tenant] = (tenant.counts["running"].total(), tenant.served())
            offset = _claim_offset(*claims[place.tenant], place.slots_taken > 0)
            if best is None or (offset, place.arrived) < best[:2]:
                best = (offset, place.arrived, waiter)
        return None if best is None else best[2]

    def _claim_of(self, place: Place) -> int:
        tenant = self._tenant(place.tenant)
        return _claim_offset(tenant.counts["running"].total(), tenant.served(), place.slots_taken > 0)

    def _mark(self, offset: int) -> int:
        """Mark this process's claim at `offset` (the first byte from there no other process marks); the byte."""
        if self.claim is not None and self.claim >= offset and self.claim - offset < 1 << 20:
            return self.claim  # marked already, at or just after `offset` (a tie moved it on)
        self._unmark()
        self.claim = self.claims.mark(offset)
        return self.claim

    def _unmark(self) -> None:
        if self.claim is not None:
            self.claims.unmark(self.claim)
            self.claim = None

    def _wake_best(self) -> None:
        best = self._best()
        if best is not None:
            best.turn.set()

    # --- tenants' files ---

    def _tenant(self, tenant: str) -> _Tenant:
        return self._tenant_by_key(tenant_key(tenant))

    def _tenant_by_key(self, key: str) -> _Tenant:
        found = self.tenants.get(key)
        if found is None:
            found = self.tenants[key] = _Tenant(self.folder / "by-tenant" / key, self.member.index)
        return found


def _claim_offset(running: int, served: int, started: bool) -> int:
    """The byte a claim marks: fewer running workers first, then an import that runs already, then the tenant served least recently."""
    return (min(running, _MOST_RUNNING) << _RUNNING_SHIFT) | ((0 if started else 1) << _STARTED_SHIFT) | (served & _SERVED_MASK)


async def _woken(turn: asyncio.Event, seconds: float | None) -> None:
    """Until `turn` is set, or `seconds` have passed."""
    timer = None if seconds is None else asyncio.get_running_loop().call_later(seconds, turn.set)
    try:
        await turn.wait()
    finally:
        if timer is not None:
            timer.cancel()
