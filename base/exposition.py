"""The metrics page as client_golang writes a registry, for every ``/metrics`` page here.

ARC's listener is a Go program and its users' queries, recording rules and dashboards were
written against a Go page; the capacity series share the page and its conventions. Three
things differ in prometheus_client's own output: ``_created`` series (Go has none; dropped
per collector so the process-wide prometheus_client switch is left alone), families with no
samples (a Go vector without children is not written at all) and bucket bounds (Go writes
``le="1"``, Python ``le="1.0"``, and Prometheus keeps the label exactly as written, so a
query selecting one bucket by ``le`` would miss).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

_SUFFIX_RANK: Final = {"_bucket": 0, "_sum": 1, "_count": 2}

Registry = CollectorRegistry
"""The registry type the listener and the monitor pass around (the one name for it; they do
not import prometheus_client outside their metrics modules)."""


def new_registry() -> Registry:
    """The process's private registry: only what the listener and the monitor register, no
    process or platform collectors (ARC's page has none either)."""
    return CollectorRegistry(auto_describe=True)


def go_float(value: float) -> str:
    """``value`` as client_golang writes a bucket bound: strconv's shortest ``'g'`` format.

    ``1`` → ``"1"``, ``3600`` → ``"3600"``, ``1e6`` → ``"1e+06"`` (exponent form from 1e6 and
    below 1e-4). prometheus_client writes ``"1.0"``/``"3600.0"``, and Prometheus 2 keeps the
    ``le`` label exactly as written, so queries that select a bucket by ``le`` would miss.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    # repr gives the shortest digits that round-trip, the same digits Go picks.
    parts = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    assert isinstance(parts.exponent, int)  # finite: NaN and infinities are handled above
    exponent = len(digits) + parts.exponent - 1
    sign = "-" if value < 0 else ""
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole = digits[: exponent + 1].ljust(exponent + 1, "0")
    fraction = digits[exponent + 1 :]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


def _go_order(family: str) -> Callable[[Sample], tuple[list[tuple[str, str]], int]]:
    def key(s: Sample) -> tuple[list[tuple[str, str]], int]:
        return (
            sorted((k, v) for k, v in s.labels.items() if k != "le"),
            _SUFFIX_RANK.get(s.name.removeprefix(family), 0),
        )

    return key


class Source(Protocol):
    """What :class:`GoStyleCollector` reads: a prometheus_client metric, or a custom
    collector whose families are built from state at scrape time."""

    def describe(self) -> Iterable[Metric]: ...

    def collect(self) -> Iterable[Metric]: ...


class GoStyleCollector:
    """Exposes prometheus_client metrics the way client_golang writes a registry.

    The metrics are created unregistered and handed to this collector, which is registered
    once. It drops ``_created`` samples (Go has none), drops families with no samples (a Go
    vector without children is not written), skips label-less metrics until they are
    first used (:meth:`touch`), because a Go vector only appears once a child exists, and
    writes bucket bounds (``le``) the way Go formats them (:func:`go_float`). Families of
    one name from several sources (the same series for several label sets, each kept by its
    own owner) are written as one family, as Go writes one vector.
    """

    def __init__(
        self,
        metrics: Iterable[Source],
        *,
        hidden_until_touched: Iterable[Source] = (),
    ) -> None:
        self._metrics = list(metrics)
        self._untouched = {id(m) for m in hidden_until_touched}

    def touch(self, metric: Source) -> None:
        self._untouched.discard(id(metric))

    def describe(self) -> list[Metric]:
        families: list[Metric] = []
        for metric in self._metrics:
            families.extend(metric.describe())
        return families

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for metric in self._metrics:
            if id(metric) in self._untouched:
                continue
            for family in metric.collect():
                created = family.name + "_created"
                samples = [
                    s._replace(labels={**s.labels, "le": go_float(float(s.labels["le"]))})
                    if "le" in s.labels
                    else s
                    for s in family.samples
                    if s.name != created
                ]
                if not samples:
                    continue
                into = families.setdefault(family.name, family)
                into.samples = [*into.samples, *samples] if into is not family else samples
        for family in families.values():
            # Group each series' samples (Go orders series by label values) and put
            # _sum before _count inside a histogram series, as Go does. Python's sort
            # is stable, so bucket order is kept.
            family.samples.sort(key=_go_order(family.name))
        # By exposed name; prometheus_client appends "_total" to counters when writing.
        yield from sorted(
            families.values(), key=lambda f: f.name + "_total" if f.type == "counter" else f.name
        )
