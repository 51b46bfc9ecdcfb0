"""The demand source settings: HUD, GitHub's REST API, the cluster's webhook receiver, and
how a queue shared with peer clusters is split (`demand`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from capacity.settings_values import (
    Duration,
    OptionalDuration,
    OptionalPositiveDuration,
    PositiveDuration,
)

HUD_TOKEN_ENV = "HUD_API_TOKEN"
DEFAULT_HUD_URL = "https://hud.pytorch.org/api/clickhouse/queued_jobs_aggregate"


class HudParameters(BaseModel):
    """The `parameters` JSON sent to HUD (camelCase names on the wire). `runnerLabels` is not
    configurable: it is always the scale set's labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queued_threshold_minutes: int = Field(default=0, ge=0)
    max_age_days: int = Field(default=1, ge=1)
    # Empty strings are dropped before sending: HUD reads `orgs: [""]` as *all* orgs. An
    # empty list leaves `orgs` out, so HUD applies its own default.
    orgs: list[str] = Field(default_factory=list)
    repo: str = ""


class HudSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    url: str = DEFAULT_HUD_URL
    parameters: HudParameters = Field(default_factory=HudParameters)
    timeout: PositiveDuration = 10.0
    max_response_bytes: int = Field(default=4_500_000, gt=0)  # Vercel's response limit
    stale_after: Duration = 300.0
    failure_base_capacity: int = Field(default=1, ge=0)
    # How far behind the queue HUD's rows are: runner pods created after (read − lag) are jobs
    # the rows may still count as queued.
    lag: Duration = 30.0
    # Only ever set by `load_capacity_settings` from HUD_API_TOKEN.
    token: SecretStr | None = Field(default=None, exclude=True, repr=False)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value) or any(c.isspace() for c in value):
            raise ValueError(f"invalid URL {value!r} (needs http:// or https://)")
        return value

    @field_validator("token", mode="before")
    @classmethod
    def _not_from_sources(cls, value: object) -> None:
        if value is not None:
            raise ValueError(f"set the token through {HUD_TOKEN_ENV}, not the settings")
        return None


class WebhookDemandSettings(BaseModel):
    """The cluster's webhook receiver (`ghalistener webhook-receiver`) as the demand source:
    the queue it keeps from GitHub's `workflow_job` deliveries, read over the cluster network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The receiver's reads port (the companion chart's Service sets it).
    url: str = ""
    timeout: PositiveDuration = 2.0
    stale_after: Duration = 300.0
    failure_base_capacity: int = Field(default=1, ge=0)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value and (not re.match(r"^https?://[^/\s]+", value) or any(c.isspace() for c in value)):
            raise ValueError(f"invalid URL {value!r} (needs http:// or https://)")
        return value.rstrip("/")


DemandSourceName = Literal["hud", "github", "webhook", "none"]


class DemandSettings(BaseModel):
    """Where queued jobs are read from, and how a queue shared with peer clusters is split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: "hud" when hud.enabled, else "none" (the settings before this key existed).
    source: DemandSourceName | None = None
    # Demand sharding: this cluster's index among `cluster_count` clusters that serve the same
    # labels. Fresh jobs are split between them; jobs queued longer than `aged_after` are
    # claimed by every one of them (failover without cross-cluster traffic).
    cluster_index: int = Field(default=0, ge=0)
    cluster_count: int = Field(default=1, ge=1)
    aged_after: PositiveDuration = 900.0
    # How often the source is read. None: 10 s for HUD (a stale reading is the longest step
    # before a pair can be made), `recalculate_interval` for GitHub's REST API (its rate limit).
    interval: OptionalPositiveDuration = None
    # How long pairs made for queued jobs are held once the queue stops asking for them.
    # None (auto): the pair launch time this listener observes (p90 of its recent launches),
    # within [30 s, downscale_delay]; `downscale_delay` until it has seen enough launches.
    hold: OptionalDuration = None


REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?$")


class GitHubDemandSettings(BaseModel):
    """The GitHub REST API as the demand source (queued workflow jobs whose labels match the
    scale set), with the listener's own GitHub credentials."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # "name" (under the scale set's owner) or "owner/name". Empty: the repository of a
    # repository-level scale set, else every repository of the organization.
    repositories: list[str] = Field(default_factory=list)
    # REST calls per recalculate_interval, 304s included. Repositories not reached keep their
    # last counts and are read first on the next pass.
    max_calls_per_interval: int = Field(default=200, ge=1)
    # Also read the jobs of runs already in progress: they can still hold queued jobs (the
    # rest of a matrix). Off halves the run-list calls and misses those.
    in_progress_runs: bool = True
    # Calls left untouched in the token's hourly allowance (it is shared with the listener).
    rate_limit_reserve: int = Field(default=500, ge=0)
    repositories_refresh: PositiveDuration = 600.0  # how often the repository list is re-read
    timeout: PositiveDuration = 10.0  # per call
    stale_after: Duration = 300.0
    failure_base_capacity: int = Field(default=1, ge=0)

    @field_validator("repositories")
    @classmethod
    def _check_repositories(cls, value: list[str]) -> list[str]:
        for name in value:
            if not REPOSITORY.match(name) or name.split("/")[-1] in (".", ".."):
                raise ValueError(f"invalid repository {name!r} (use 'name' or 'owner/name')")
        return list(dict.fromkeys(value))
