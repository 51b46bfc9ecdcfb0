"""Demand sources: where the monitor reads how many jobs are queued for its scale set.

Three sources sit behind one interface (`DemandReader.read`), chosen by `demand.source`:

- ``hud``: PyTorch's HUD queued-jobs API (`capacity.hud`);
- ``github``: GitHub's REST API, with the listener's own credentials (`capacity.github_demand`);
- ``webhook``: the cluster's webhook receiver, fed by GitHub's `workflow_job` deliveries
  (`capacity.webhook_demand`).

A read never raises: it returns a `Reading` whose `outcome` the pure policy folds into the
fallback state (`capacity.policy.record_demand`: hold the last good value, then the floor), and
whose other fields feed the metrics. A source never retries: the next read, one
`recalculate_interval` later, is the retry.

With demand sharding (`demand.cluster_count` > 1) a read also reports the *aged* part of the
queue: jobs queued longer than `demand.aged_after`, which every peer claims. HUD rows carry
only min/max queue times, not per-job ages, so the HUD source asks twice — once with the
configured threshold (every queued job) and once with the age threshold (the aged part) —
concurrently. GitHub's jobs carry their creation time, so that source counts both in one pass.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from base.http.client import Client, plain_client
from capacity.hud import HudClient
from capacity.model import DemandOutcome, DemandResult
from capacity.settings import CapacitySettings
from capacity.settings_demand import DemandSettings, HudSettings
from capacity.stages import QueuedJob, RunningParent


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One read of a demand source."""

    source: str  # "hud", "github" or "webhook"
    outcome: DemandOutcome  # what the policy uses: result, queued, aged
    # HUD: one outcome per HTTP request (one, or two with sharding), for the request metrics.
    requests: tuple[DemandOutcome, ...] = ()
    # GitHub: REST calls made during the read by result (ok, not_modified, rate_limited, error).
    calls: Mapping[str, int] = field(default_factory=dict)
    rate_limit_remaining: int | None = None  # GitHub: the last X-RateLimit-Remaining seen
    # GitHub: the jobs running now in the runs the source reads, any labels, at most
    # `github_demand.MAX_RUNNING` (the most recently started), in a successful reading only.
    # HUD leaves it empty: its queue API reports no in-progress jobs with start times.
    running: tuple[RunningParent, ...] = ()
    running_truncated: bool = False  # more were running than `running` holds
    # Some repository's running jobs come from a visit the call budget cut short: a job
    # missing from `running` may still be running in a run not reached.
    running_partial: bool = False
    # GitHub: the queued jobs it counted (run attempt, job id, queued at), from the same job
    # lists, for the stage model to link children to the parents that ended before them.
    queued_jobs: tuple[QueuedJob, ...] = ()
    # GitHub: every repository was read in this reading, none in part, so a queued job it
    # does not list is not queued (the webhook receiver's reconcile drops such jobs).
    complete: bool = False


class DemandReader(Protocol):
    """A demand source. `read` never raises (cancellation excepted)."""

    async def read(self) -> Reading: ...

    async def aclose(self) -> None: ...


def aged_minutes(demand: DemandSettings) -> int:
    """The age threshold in HUD's unit, whole minutes (settings reject anything else when
    sharding on HUD; rounding up keeps a stray fraction from claiming younger jobs)."""
    return max(1, math.ceil(demand.aged_after / 60))


class HudDemand:
    """HUD, asked once per read, or twice with sharding (the whole queue and its aged part)."""

    def __init__(
        self,
        settings: HudSettings,
        labels: Sequence[str],
        demand: DemandSettings,
        *,
        client: Client | None = None,
    ) -> None:
        self._own_client = client is None
        self._client = client or plain_client(settings.timeout)
        self._total = HudClient(settings, labels, client=self._client)
        self._aged: HudClient | None = None
        if demand.cluster_count > 1:
            threshold = max(settings.parameters.queued_threshold_minutes, aged_minutes(demand))
            aged_settings = settings.model_copy(
                update={
                    "parameters": settings.parameters.model_copy(
                        update={"queued_threshold_minutes": threshold}
                    )
                }
            )
            self._aged = HudClient(aged_settings, labels, client=self._client)

    async def read(self) -> Reading:
        if self._aged is None:
            total = await self._total.fetch()
            return Reading(source="hud", outcome=total, requests=(total,))
        async with asyncio.TaskGroup() as tg:
            total_task = tg.create_task(self._total.fetch())
            aged_task = tg.create_task(self._aged.fetch())
        total, aged = total_task.result(), aged_task.result()
        requests = (total, aged)
        duration = max(total.duration, aged.duration)
        # Both figures or neither: a total without its aged part would drop the failover, an
        # aged part without its total would drop the fresh share.
        failed = next((o for o in requests if o.result != DemandResult.OK), None)
        if failed is not None:
            outcome = DemandOutcome(result=failed.result, duration=duration, detail=failed.detail)
        else:
            outcome = DemandOutcome(
                result=DemandResult.OK,
                duration=duration,
                queued=total.queued,
                aged=aged.queued,
                rows=total.rows,
                detail=f"{total.detail}; aged: {aged.detail}",
            )
        return Reading(source="hud", outcome=outcome, requests=requests)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()


# The GitHub source needs what only the listener has: its HTTP client (proxy rules, CA
# bundle) and its credentials. The composition root passes them in as a factory.
GitHubReaderFactory = Callable[[CapacitySettings, Sequence[str]], DemandReader]


def build_reader(
    settings: CapacitySettings,
    labels: Sequence[str],
    *,
    github: GitHubReaderFactory | None = None,
    hud_client: Client | None = None,
) -> DemandReader | None:
    """The configured source, or None when there is none. ValueError (one line) when the
    GitHub source is selected but no GitHub access was given.

    ``hud_client`` is what HUD and the webhook receiver are read with: the composition root
    passes one built with the same proxy rules as every GitHub call (Go's NO_PROXY
    semantics, which httpx's own environment handling does not match), and closes it;
    without one, the source gets a plain client of its own."""
    source = settings.demand_source
    if source == "hud":
        # The token is in the settings already (load_capacity_settings, HUD_API_TOKEN).
        return HudDemand(settings.hud, labels, settings.demand, client=hud_client)
    if source == "webhook":
        # Here, not at the top: the webhook source's module builds on this one's Reading.
        from capacity.webhook_demand import WebhookDemand

        return WebhookDemand(settings.webhook, labels, settings.demand, client=hud_client)
    if source == "github":
        if github is None:
            raise ValueError("demand.source: 'github' needs the listener's GitHub credentials")
        return github(settings, labels)
    return None
