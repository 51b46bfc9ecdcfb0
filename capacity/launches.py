"""How long this process's pairs take to launch: from the create to both halves Running.

The sample feeds the auto hold of pairs made for queued jobs and the stall timeouts
(``policy.demand_hold``, ``policy.stall_timeout``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from capacity import policy
from capacity.model import Observed, Params, Placeholder, PodPhase, Role


class Launches:
    """The pairs this process created and waits to see whole, and the recent launch times.
    ``record`` is told every launch (the histogram)."""

    def __init__(self, record: Callable[[float], None]) -> None:
        self._record = record
        # Slot -> when this process created the pair, until it is seen whole Running (its
        # launch time is recorded then) or is too old to be waited for.
        self._launching: dict[str, float] = {}
        # The recent launch times, for the auto hold of pairs made for queued jobs.
        self.times: deque[float] = deque(maxlen=policy.LAUNCHES_KEPT)

    def created(self, slot: str, at: float) -> None:
        """A pair (or a repaired half) of ``slot`` was created at ``at``."""
        self._launching[slot] = at

    def observe(
        self, observed: Observed, now: float, params: Params, *, wait: float | None
    ) -> None:
        """Record the launch (create → both halves Running) of each pair this process
        created, the first time a pass or a signal sees it whole; the signal path sees every
        coalesced view change, so the time is that close. A pair still not whole after its
        ready timeout and ``wait`` (the expectation TTL; None: keep waiting) is no longer
        waited for: the policy deletes it.

        Every launch goes to ``record``; ``times``, the sample the hold and the
        stall timeouts are taken from, leaves out a launch that waited out a shortage: one
        during which (or recently enough before which, as the policy applies the word) the
        pools said they cannot launch a node, and that took longer than every launch in the
        sample. Counted, it would stretch the stall timeouts to the ready timeout for the next
        shortage, and the stall would never fire (seen in the outcome benchmark, where pairs
        made in one shortage became whole after it). One no longer than the sample's longest
        is counted: pools that refuse one instance type and launch another at once (spot)
        still launch."""
        if not self._launching:
            return
        halves: dict[str, list[Placeholder]] = {}
        for p in observed.placeholders:
            if p.slot in self._launching:
                halves.setdefault(p.slot, []).append(p)
        for slot, pods in halves.items():
            whole = {p.role for p in pods if p.phase == PodPhase.RUNNING and not p.terminating}
            if whole == set(Role):
                created = self._launching.pop(slot)
                took = now - created
                self._record(took)
                if not policy.refused_during(params, created) or took <= max(
                    self.times, default=0.0
                ):
                    self.times.append(took)
        if wait is not None:
            limit = params.ready_timeout + wait
            for slot, created in list(self._launching.items()):
                if now - created > limit:
                    del self._launching[slot]
