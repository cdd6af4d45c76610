"""Prometheus metrics, from `prometheus-client`, served at `/metrics`.

Owns `Metrics`: the instruments the service updates (imports by result,
import duration, HTTP requests by route template, method and status, their
duration) and a collector that reads, at each scrape, what is true now (imports
running and waiting, uploads being received; how many tenants hold places
and the most any one of them holds, against the share one may hold; the
store's bytes, models and free space). Labels never hold a tenant, a model id, a file or tensor name:
route templates (`/models/{model_id}/tensors/{name}`) and fixed words only
(the method label is one of the routed methods or `other`: see
`service.observability.request_log`).

With `PROMETHEUS_MULTIPROC_DIR` set before `prometheus_client` is imported
(several front-end processes), the counters and histograms are written to
files in that folder and a scrape adds up every process's (prometheus-client's
multiprocess mode, which has no `_created` samples); one `Metrics` per process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from service.errors import StorageUnavailable
from service.imports.admission import Admission
from service.store.model_store import Store

PREFIX = "onnx_import_"
IMPORT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class _NowCollector(Collector):
    """Gauges read at scrape time from the service's parts."""

    def __init__(self, admission: Callable[[], Admission | None], store: Store) -> None:
        self.admission = admission
        self.store = store

    def collect(self) -> Iterator[Metric]:
        admission = self.admission()
        if admission is not None:
            yield GaugeMetricFamily(PREFIX + "imports_running", "Import workers running now", value=admission.running)
            yield GaugeMetricFamily(PREFIX + "imports_waiting", "Imports waiting for a worker (queue depth)", value=admission.waiting)
            yield GaugeMetricFamily(PREFIX + "uploads_receiving", "Uploads whose bodies are arriving", value=admission.receiving_now)
            budget, reserved = admission.memory_in_bytes
            yield GaugeMetricFamily(PREFIX + "worker_memory_budget_bytes", "Memory sized workers may reserve (0: none)", value=budget)
            yield GaugeMetricFamily(PREFIX + "worker_memory_reserved_bytes", "Memory the sized workers running reserve now", value=reserved)
            yield from _tenant_places(admission)
        try:
            models = self.store.model_count()
            yield GaugeMetricFamily(PREFIX + "store_models", "Models stored (content, shared by tenants)", value=models)
            yield GaugeMetricFamily(PREFIX + "store_bytes", "Bytes the stored models take", value=self.store.usage())
            yield GaugeMetricFamily(PREFIX + "store_free_bytes", "Free bytes on the store's file system", value=self.store.free_bytes())
        except (OSError, StorageUnavailable):
            pass  # the store's gauges are missing from this scrape, the rest is there


def _tenant_places(admission: Admission) -> Iterator[Metric]:
    """Places per tenant, without naming one: how many tenants hold places, the most one holds of each kind, and the share's limit."""
    busy = admission.busy_tenants()
    yield GaugeMetricFamily(PREFIX + "tenants_busy", "Tenants holding an import or receiving place now", value=len(busy))
    most = GaugeMetricFamily(PREFIX + "tenant_places_most", "The most places of a kind any one tenant holds now", labels=["kind"])
    limit = GaugeMetricFamily(
        PREFIX + "tenant_places_limit", "The most places of a kind one tenant may hold (--tenant-share)", labels=["kind"]
    )
    for kind, held, places in (
        ("running", [tenant.running for tenant in busy], admission.workers),
        ("waiting", [tenant.waiting for tenant in busy], admission.capacity),
        ("receiving", [tenant.receiving for tenant in busy], admission.max_receiving),
    ):
        most.add_metric([kind], max(held, default=0))
        limit.add_metric([kind], admission.tenant_limit(places) if kind != "running" else places)
    yield most
    yield limit


class Metrics:
    def __init__(self, store: Store, admission: Callable[[], Admission | None]) -> None:
        self.registry = CollectorRegistry()
        self.imports = Counter(
            PREFIX + "imports",
            "Imports by result: ok, or the problem (import error kind or problem type)",
            ["result"],
            registry=self.registry,
        )
        self.import_seconds = Histogram(
            PREFIX + "import_duration_seconds",
            "Time of POST /models, from its first byte to its answer",
            buckets=IMPORT_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            PREFIX + "http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            PREFIX + "http_request_duration_seconds",
            "HTTP request time by route template",
            ["route"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        self.scraped = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            if not getattr(values.ValueClass, "_multiprocess", False):
                raise RuntimeError("PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported")
            self.scraped = CollectorRegistry()  # every process's instruments, from the folder's files
            MultiProcessCollector(self.scraped)  # type: ignore[no-untyped-call]
        self.scraped.register(_NowCollector(admission, store))

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.scraped), CONTENT_TYPE_LATEST
