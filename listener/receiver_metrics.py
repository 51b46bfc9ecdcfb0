"""The webhook receiver's metrics (its reads port's ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from base.exposition import GoStyleCollector
from capacity.webhook_queue import JobQueue

DELIVERY_RESULTS = (
    "changed",
    "duplicate",
    "out_of_order",
    "full",
    "too_old",
    "ignored",
    "bad_signature",
    "bad_request",
    "bad_payload",
    "bad_body",
    "too_large",
    "flood",
)
READ_RESULTS = ("ok", "stale", "bad_request")
RECONCILE_RESULTS = ("ok", "partial", "failed")


class ReceiverMetrics:
    """Counters by result, created at zero so that every series exists from the start."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._deliveries = Counter(
            "gha_receiver_deliveries",
            "Webhook deliveries by what they did (changed the queue, or why not).",
            ["result"],
            registry=None,
        )
        self._reads = Counter(
            "gha_receiver_reads", "Demand reads served to listeners.", ["result"], registry=None
        )
        self._reconciles = Counter(
            "gha_receiver_reconciles",
            "Reconciles with GitHub's REST API by result (partial: not every repository read).",
            ["result"],
            registry=None,
        )
        self._healed = Counter(
            "gha_receiver_reconciled_jobs",
            "Jobs a reconcile added (a lost queued delivery) or dropped (a lost start).",
            ["change"],
            registry=None,
        )
        self._jobs = Gauge("gha_receiver_jobs", "Jobs held by status.", ["status"], registry=None)
        self._last = Gauge(
            "gha_receiver_last_reconcile_timestamp_seconds",
            "When the last good reconcile ended (0: none since the start).",
            registry=None,
        )
        # One collector for all: no `_created` series, as on the listener's page.
        registry.register(
            GoStyleCollector(
                [
                    self._deliveries,
                    self._reads,
                    self._reconciles,
                    self._healed,
                    self._jobs,
                    self._last,
                ]
            )
        )
        for result in DELIVERY_RESULTS:
            self._deliveries.labels(result)
        for result in READ_RESULTS:
            self._reads.labels(result)
        for result in RECONCILE_RESULTS:
            self._reconciles.labels(result)
        for change in ("added", "dropped"):
            self._healed.labels(change)

    def delivery(self, result: str) -> None:
        self._deliveries.labels(result).inc()

    def read(self, result: str) -> None:
        self._reads.labels(result).inc()

    def reconcile(self, result: str, *, added: int = 0, dropped: int = 0, at: float = 0.0) -> None:
        self._reconciles.labels(result).inc()
        self._healed.labels("added").inc(added)
        self._healed.labels("dropped").inc(dropped)
        if at:
            self._last.set(at)

    def queue(self, queue: JobQueue) -> None:
        self._jobs.labels("queued").set(queue.queued)
        self._jobs.labels("all").set(len(queue))
