"""Per-scale-set capacity settings: an optional YAML file and/or `CAPACITY_*` environment
variables (environment wins; nested keys use "__", e.g. `CAPACITY_HUD__TIMEOUT=5s`).

    CAPACITY_CONFIG_FILE   path of the YAML file (absent: environment only)
    HUD_API_TOKEN          the HUD token (only from the environment; never in the file)

Keys are snake_case, as in `deploy/` examples. Durations accept "30s", "5m", "1h", "1h30m",
"500ms" or plain seconds. Bad values are reported all at once, one line each naming the
field and where its value came from, then a line pointing to deploy/config/REFERENCE.md, e.g.
`capacity setting placeholder_ready_timeout: invalid duration '5 minutes' (from environment
CAPACITY_PLACEHOLDER_READY_TIMEOUT)`. Rules between settings (renew_before < placeholder_ttl
...) are checked once every value is valid on its own.

The settings model is also the documentation: deploy/config/REFERENCE.md is generated from it,
and each field carries its description and validation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from capacity import quantity, warm_pool
from capacity.model import DemandSource, Params

ENV_PREFIX = "CAPACITY_"
CONFIG_FILE_ENV = "CAPACITY_CONFIG_FILE"
HUD_TOKEN_ENV = "HUD_API_TOKEN"

DEFAULT_IMAGE = "public.ecr.aws/docker/library/alpine:3.21"
DEFAULT_HUD_URL = "https://hud.pytorch.org/api/clickhouse/queued_jobs_aggregate"


REFERENCE = "deploy/config/REFERENCE.md"
# The default HUD read interval: a reading as fresh as this costs HUD two small queries.
HUD_READ_INTERVAL = 10.0
# The receiver answers from memory in the cluster: a read a second keeps the demand step
# about a second for little cost.
WEBHOOK_READ_INTERVAL = 1.0


@dataclass(frozen=True)
class SettingProblem:
    """One bad setting: ``text`` names the field (``capacity setting hud.timeout: ...``),
    ``source`` where its value came from (``environment CAPACITY_HUD__TIMEOUT``, ``file
    <path>``; empty when no source set it, e.g. a required setting left out)."""

    text: str
    source: str = ""

    @property
    def line(self) -> str:
        return f"{self.text} (from {self.source})" if self.source else self.text


class CapacitySettingsError(ValueError):
    """Bad capacity settings. str(): one line per problem, each naming the field and where
    its value came from, then a line pointing to the reference (a file that cannot be read at
    all is one line). Every problem at once: a pod that crash-loops on its settings should
    need one fix, not one restart per typo."""

    def __init__(self, *problems: SettingProblem | str, reference: bool = True) -> None:
        self.problems = tuple(
            p if isinstance(p, SettingProblem) else SettingProblem(p) for p in problems
        )
        lines = [p.line for p in self.problems]
        if reference:
            lines.append(f"every setting, its default and its variable: {REFERENCE}")
        super().__init__("\n".join(lines))


# --- value types --------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """Seconds from "30s", "5m", "1h30m", "500ms" or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"invalid duration {value!r}") from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise ValueError(f"invalid duration {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid duration {value!r}")
    return seconds


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"duration must be more than 0, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(_positive_duration)]
# A duration that may be left unset (None: the setting's documented automatic value).
OptionalDuration = Annotated[float | None, BeforeValidator(parse_duration)]
OptionalPositiveDuration = Annotated[float | None, BeforeValidator(_positive_duration)]

_BYTE_RESOURCES = ("memory", "ephemeral-storage")


def check_quantity(resource: str, value: object) -> str:
    """Validate one resource request; return it as the string Kubernetes expects."""
    try:
        amount = quantity.parse(value)
    except ValueError:
        raise ValueError(f"invalid quantity {value!r} for {resource}") from None
    text = str(value).strip()
    if amount.value <= 0:
        raise ValueError(f"quantity for {resource} must be more than 0, got {value!r}")
    if resource == "cpu" and amount.si not in ("", "m"):
        raise ValueError(f"invalid cpu quantity {value!r} (use cores like '2' or '750m')")
    if (resource in _BYTE_RESOURCES or resource.startswith("hugepages-")) and amount.si == "m":
        # "512m" is 0.512 bytes: almost always a typo for "512Mi"
        raise ValueError(f"invalid {resource} quantity {value!r} (did you mean {text[:-1]}Mi?)")
    if "/" in resource and amount.value.denominator != 1:
        # Kubernetes' own rule for extended resources: a whole value ("2", "1e3", not ".5").
        raise ValueError(f"extended resource {resource} needs a whole number, got {value!r}")
    return text


_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*)$")
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


class Resources(BaseModel):
    """Container resource requests, Kubernetes style: `{requests: {cpu: "4", memory: "16Gi",
    nvidia.com/gpu: "1"}}`. Extended resources (with a "/") must be whole numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: dict[str, str]

    @field_validator("requests", mode="before")
    @classmethod
    def _check(cls, value: object) -> dict[str, str]:
        if not isinstance(value, Mapping) or not value:
            raise ValueError(f"requests must be a non-empty mapping, got {value!r}")
        out: dict[str, str] = {}
        for name, amount in value.items():
            name = str(name)
            standard = name in _STANDARD_RESOURCES or name.startswith("hugepages-")
            if not standard and ("/" not in name or not _RESOURCE_NAME.match(name)):
                raise ValueError(f"unknown resource {name!r} (extended resources need a domain)")
            out[name] = check_quantity(name, amount)
        return out


class Toleration(BaseModel):
    """A pod toleration, with Kubernetes' field names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


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


_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?$")


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
            if not _REPOSITORY.match(name) or name.split("/")[-1] in (".", ".."):
                raise ValueError(f"invalid repository {name!r} (use 'name' or 'owner/name')")
        return list(dict.fromkeys(value))


class NodePoolSettings(BaseModel):
    """Karpenter NodePool limits: read the NodePools the placeholders can land on and create
    no pair their remaining `limits` cannot hold (needs deploy/rbac/clusterrole-nodepools.yaml;
    without it, or without Karpenter, the monitor logs one line and works as before). With
    it, Karpenter's FailedScheduling Events on the placeholders are read too (the `events`
    rule of deploy/rbac/role.yaml): a half Karpenter has no node for holds new pairs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # On by default: Karpenter is the common case, and on a cluster without it the watch
    # answers 404 once, is logged at info, and the monitor plans as if it were off.
    enabled: bool = True
    # NodePool names per half. None: every NodePool whose template (labels, requirements,
    # taints) admits the half's node selector and tolerations.
    runner: list[str] | None = None
    workflow: list[str] | None = None
    # Where Karpenter's Events on NodeClaims land (`default`: they are cluster-scoped). Its
    # insufficient-capacity Events for a half's NodePools release a stalled pair after one
    # launch time, not two (needs deploy/rbac/role-karpenter-events.yaml). "": not read.
    events_namespace: str = "default"

    @field_validator("runner", "workflow")
    @classmethod
    def _check_names(cls, value: list[str] | None) -> list[str] | None:
        return _names_per_half(
            value, "NodePool", "leave it unset to resolve", lambda n: bool(_DNS_SUBDOMAIN.match(n))
        )

    @field_validator("events_namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if value and not _DNS_LABEL.match(value):
            raise ValueError(f"invalid namespace {value!r}")
        return value


# --- warm pool (docs/capacity-model.md §10) ------------------------------------------------

WarmPoolMode = Literal["fixed", "scheduled"]
# A configuration written for the adaptive pool, which is gone, is refused with what to use
# instead rather than as an unknown value or setting.
_ADAPTIVE_REPLACEMENT = "use mode: fixed (proactive_capacity pairs) or scheduled"
_REMOVED_SETTINGS = {
    f"warm_pool.{name}": f"removed with warm_pool.mode adaptive; {_ADAPTIVE_REPLACEMENT}"
    for name in (
        "target_ready",
        "max",
        "lead_time",
        "launch_cost",
        "fast_window",
        "profile_timezone",
    )
}


class WarmWindow(BaseModel):
    """One window of a scheduled warm pool: `{window: "Mon-Fri 08:00-18:00 Europe/Berlin",
    floor: 6}` (days Mon..Sun with ranges and commas, wall-clock times, an IANA time zone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: str
    floor: int = Field(ge=0)

    @field_validator("window")
    @classmethod
    def _check_window(cls, value: str) -> str:
        warm_pool.parse_window(value, 0)  # ValueError names the problem
        return value


class PredictiveSettings(BaseModel):
    """Pairs ahead of a fan-out (docs/whatif.md "Staged CI"): a stage model learned from the
    jobs the demand source sees end and queue, and pairs for the children the jobs running
    now will queue on this scale set within `horizon`, on top of the `mode`'s pool. Needs
    `demand.source: github` (HUD reports no running jobs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    # Children expected this soon get pairs now. None: 1.25 x the longest recent pair launch
    # this listener observed (at least 60 s), 300 s until it has seen 8 launches.
    horizon: OptionalPositiveDuration = None
    # A parent this long past the 0.9 quantile of its runs that fanned out counts no more
    # (the break-even hold). None: the longest recent launch (at least 60 s), 240 s before.
    hold: OptionalDuration = None
    # Cover this quantile of a fan-out's size instead of its mean (None: the mean).
    count_quantile: float | None = Field(default=None, gt=0, le=1)

    def problem(self) -> str | None:
        """The first knob set while the pool is off, as `field: why`."""
        if self.enabled:
            return None
        for name in ("horizon", "hold", "count_quantile"):
            if name in self.model_fields_set:
                return (
                    f"warm_pool.predictive.{name}: set, but warm_pool.predictive.enabled is false"
                )
        return None


class WarmPoolSettings(BaseModel):
    """Pairs held beyond the queued jobs. `fixed`: `proactive_capacity` pairs. `scheduled`:
    the largest `floor` of the `schedule` windows active now, `proactive_capacity` outside
    them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: WarmPoolMode = "fixed"
    schedule: list[WarmWindow] = Field(default_factory=list)
    # Off by default. On: the pool above is the base, predicted children come on top.
    predictive: PredictiveSettings = Field(default_factory=PredictiveSettings)

    @field_validator("mode", mode="before")
    @classmethod
    def _check_removed_mode(cls, value: object) -> object:
        if value == "adaptive":
            raise ValueError(f"adaptive was removed; {_ADAPTIVE_REPLACEMENT}")
        return value

    def problem(self) -> str | None:
        """The first contradiction, as `field: why` (checked with the other settings)."""
        if self.mode == "scheduled" and not self.schedule:
            return "warm_pool.schedule: required when warm_pool.mode is scheduled"
        if self.mode == "fixed" and self.schedule:
            return "warm_pool.schedule: set, but warm_pool.mode is fixed"
        return self.predictive.problem()


def to_warm_pool(settings: CapacitySettings) -> warm_pool.WarmPool:
    """The warm pool the settings describe (validated already)."""
    pool = settings.warm_pool
    if pool.mode == "fixed":
        return warm_pool.FixedPool(settings.proactive_capacity)
    windows = [warm_pool.parse_window(w.window, w.floor) for w in pool.schedule]
    return warm_pool.ScheduledPool(windows, default=settings.proactive_capacity)


class ClusterAutoscalerSettings(BaseModel):
    """cluster-autoscaler node groups: read CA's `cluster-autoscaler-status` ConfigMap, export
    each named node group's size and headroom, and create no pair a full group cannot back
    (needs deploy/rbac/role-cluster-autoscaler-status.yaml; without it, or without CA, the
    monitor logs one line and works as before)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    # Node group names per half (CA's names, as in its status). Unset: metrics only, no cap
    # (CA's status does not say which pods a group's nodes admit).
    runner: list[str] | None = None
    workflow: list[str] | None = None
    status_namespace: str = "kube-system"
    status_configmap: str = "cluster-autoscaler-status"

    @field_validator("runner", "workflow")
    @classmethod
    def _check_names(cls, value: list[str] | None) -> list[str] | None:
        return _names_per_half(
            value, "node group", "leave it unset for no cap", lambda n: bool(n.strip())
        )

    @field_validator("status_namespace", "status_configmap")
    @classmethod
    def _check_object_name(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"invalid name {value!r}")
        return value


def _names_per_half(
    value: list[str] | None, kind: str, unset: str, valid: Callable[[str], bool]
) -> list[str] | None:
    """The names one half may land on (NodePools, node groups): None stays unset, an empty
    list is refused (``unset`` says what leaving it out does), duplicates are dropped."""
    if value is None:
        return None
    if not value:
        raise ValueError(f"must name at least one {kind} ({unset})")
    for name in value:
        if not isinstance(name, str) or not valid(name):
            raise ValueError(f"invalid {kind} name {name!r}")
    return list(dict.fromkeys(value))


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class CapacitySettings(BaseSettings):
    """The capacity monitor's settings for one scale set (deploy/config/REFERENCE.md)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    enabled: bool = False
    proactive_capacity: int = Field(default=0, ge=0)
    recalculate_interval: PositiveDuration = 30.0
    placeholder_ready_timeout: PositiveDuration = 300.0
    # Required when enabled; must be the requests of the *largest* workflow pod.
    workflow_resources: Resources | None = None
    # None: the runner pod template's requests, else 750m CPU / 512Mi (specs.py).
    runner_resources: Resources | None = None
    # None: the runner pod template's. The workflow_* ones default to the runner half's.
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    workflow_node_selector: dict[str, str] | None = None
    workflow_tolerations: list[Toleration] | None = None
    placeholder_namespace: str | None = None  # None: the runner namespace
    # ARC's Role for this listener in the runner namespace: the placeholders' owner, so the
    # garbage collector removes them when ARC removes the listener. None: the pod's own name
    # (ARC names the listener pod, its ServiceAccount and its Role alike); "" turns it off.
    listener_role: str | None = None
    placeholder_image: str = DEFAULT_IMAGE
    placeholder_ttl: PositiveDuration = 900.0
    renew_before: Duration = 300.0
    max_pending_pairs: int = Field(default=30, ge=1)
    downscale_delay: Duration = 300.0
    node_checks: bool = False
    hud: HudSettings = Field(default_factory=HudSettings)
    demand: DemandSettings = Field(default_factory=DemandSettings)
    github: GitHubDemandSettings = Field(default_factory=GitHubDemandSettings)
    webhook: WebhookDemandSettings = Field(default_factory=WebhookDemandSettings)
    nodepools: NodePoolSettings = Field(default_factory=NodePoolSettings)
    warm_pool: WarmPoolSettings = Field(default_factory=WarmPoolSettings)
    cluster_autoscaler: ClusterAutoscalerSettings = Field(default_factory=ClusterAutoscalerSettings)

    @property
    def demand_source(self) -> DemandSourceName:
        """The demand source in effect."""
        if self.demand.source is not None:
            return self.demand.source
        return "hud" if self.hud.enabled else "none"

    @property
    def demand_interval(self) -> float:
        """Seconds between reads of the demand source (`demand.interval`, or its default)."""
        if self.demand.interval is not None:
            return self.demand.interval
        if self.demand_source == "hud":
            return min(HUD_READ_INTERVAL, self.recalculate_interval)
        if self.demand_source == "webhook":
            return WEBHOOK_READ_INTERVAL
        return self.recalculate_interval

    @property
    def demand_lag(self) -> float:
        """How far behind the queue the source's readings are (HUD: `hud.lag`; GitHub's REST
        API is read live)."""
        return self.hud.lag if self.demand_source == "hud" else 0.0

    @field_validator("placeholder_namespace")
    @classmethod
    def _check_namespace(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_LABEL.match(value):
            raise ValueError(f"invalid namespace {value!r}")
        return value

    @field_validator("listener_role")
    @classmethod
    def _check_role(cls, value: str | None) -> str | None:
        if value and not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"invalid Role name {value!r}")
        return value

    @field_validator("placeholder_image")
    @classmethod
    def _check_image(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() for c in value):
            raise ValueError(f"invalid image {value!r}")
        return value

    @model_validator(mode="after")
    def _check_together(self) -> CapacitySettings:
        problems = self._contradictions()
        if problems:
            # One ValueError per model: the lines are split again in `_problems`.
            raise ValueError("\n".join(problems))
        return self

    def _contradictions(self) -> list[str]:
        """Every rule between settings that these values break, as `field: why`."""
        problems = []
        if self.enabled and self.workflow_resources is None:
            problems.append(
                "workflow_resources: required when enabled (the requests of the largest "
                "workflow pod)"
            )
        if self.renew_before >= self.placeholder_ttl:
            problems.append(
                f"renew_before: {self.renew_before:g}s must be shorter than "
                f"placeholder_ttl ({self.placeholder_ttl:g}s)"
            )
        demand = self.demand
        if demand.cluster_index >= demand.cluster_count:
            problems.append(
                f"demand.cluster_index: {demand.cluster_index} must be less than "
                f"demand.cluster_count ({demand.cluster_count})"
            )
        if self.demand_source == "webhook" and not self.webhook.url:
            problems.append("webhook.url: required with demand.source 'webhook'")
        if demand.source in ("github", "webhook", "none") and self.hud.enabled:
            problems.append(
                f"demand.source: {demand.source!r} but hud.enabled is true (choose one source)"
            )
        if self.demand_source == "hud" and demand.cluster_count > 1 and demand.aged_after % 60:
            problems.append(
                f"demand.aged_after: HUD counts queue time in whole minutes, got "
                f"{demand.aged_after:g}s"
            )
        warm = self.warm_pool.problem()
        if warm is not None:
            problems.append(warm)
        pools = self.nodepools
        if not pools.enabled and (pools.runner is not None or pools.workflow is not None):
            named = "nodepools.runner" if pools.runner is not None else "nodepools.workflow"
            problems.append(f"{named}: set, but nodepools.enabled is false")
        ca = self.cluster_autoscaler
        if not ca.enabled and (ca.runner is not None or ca.workflow is not None):
            named = (
                "cluster_autoscaler.runner"
                if ca.runner is not None
                else "cluster_autoscaler.workflow"
            )
            problems.append(f"{named}: set, but cluster_autoscaler.enabled is false")
        predictive = self.warm_pool.predictive
        if predictive.enabled and self.demand_source != "github":
            problems.append(
                f"warm_pool.predictive.enabled: needs demand.source github, the one source "
                f"that reports running jobs (demand source is {self.demand_source})"
            )
        elif predictive.enabled and demand.cluster_count > 1:
            problems.append(
                "warm_pool.predictive.enabled: not with demand sharding (demand.cluster_count "
                "> 1): every peer would hold pairs for every predicted child"
            )
        if self.demand_source == "none" and demand.cluster_count > 1:
            problems.append(
                "demand.cluster_count: sharding needs a demand source (demand.source: hud or "
                "github)"
            )
        return problems

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments first, then whatever `load_capacity_settings` prepared (the
        # environment before the file). os.environ is never read implicitly.
        return (init_settings, *_LOADING.get())


# The sources of the `load_capacity_settings` call in progress.
_LOADING: ContextVar[tuple[PydanticBaseSettingsSource, ...]] = ContextVar("_LOADING", default=())


class _MappingEnvSource(EnvSettingsSource):
    """The environment source, reading a given mapping instead of os.environ (so start-up
    code and tests pass the environment explicitly)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given_env = dict(env)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._given_env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


# --- loading and error lines --------------------------------------------------------------


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


_NAMED_FIELD = re.compile(r"([a-z_]+(?:\.[a-z0-9_]+)*): ")


def _error_texts(error: ErrorDetails) -> list[tuple[str, str]]:
    """(field path, `capacity setting <path>: <problem>`) for one pydantic error; a
    model-level error may hold several lines, each naming its own field."""
    path = _field_path(error["loc"])
    kind = error["type"]
    if kind == "value_error":
        problem = str(error.get("ctx", {}).get("error", error["msg"]))
    elif kind == "missing":
        problem = "is required"
    elif kind == "extra_forbidden":
        # Never echo the value: it may be a misplaced secret.
        problem = _REMOVED_SETTINGS.get(path, "unknown setting")
    else:
        problem = f"{error['msg'][:1].lower()}{error['msg'][1:]} (got {error['input']!r})"
    if not path:  # model-level checks name their field themselves
        texts = []
        for line in problem.splitlines():
            named = _NAMED_FIELD.match(line)
            texts.append((named.group(1) if named else "", f"capacity setting {line}"))
        return texts
    return [(path, f"capacity setting {path}: {problem}")]


def _env_lookup(env: Mapping[str, str]) -> dict[str, str]:
    """Upper-cased CAPACITY_* names -> the names as given (the settings ignore case)."""
    return {name.upper(): name for name in env if name.upper().startswith(ENV_PREFIX)}


def _in_file(data: object, parts: list[str]) -> bool:
    """Whether the file's mapping sets the first part of the path (a nested value comes
    from the file when its top-level key does)."""
    return isinstance(data, dict) and bool(parts) and parts[0] in data


def _source(path: str, env_names: Mapping[str, str], file_data: object, file_path: str) -> str:
    """Where the value of `path` came from: the environment variable that set it or a
    mapping that holds it (the environment wins over the file), else the file, else ""."""
    parts = path.split(".") if path else []
    in_file = _in_file(file_data, parts)
    for end in range(len(parts), 0, -1):
        if any(part.isdigit() for part in parts[:end]):
            continue  # list items come in their list's variable
        name = ENV_PREFIX + "__".join(parts[:end]).upper()
        if name in env_names:
            given = env_names[name]
            return (
                f"environment {given}, over the file's value"
                if in_file
                else (f"environment {given}")
            )
    if in_file:
        return f"file {file_path}, key {path}"
    return ""


def _problems(
    exc: ValidationError, env: Mapping[str, str], file_data: object, file_path: str
) -> list[SettingProblem]:
    env_names = _env_lookup(env)
    problems = []
    for error in exc.errors(include_url=False):
        for path, text in _error_texts(error):
            problems.append(SettingProblem(text, _source(path, env_names, file_data, file_path)))
    return problems


def _unknown_env_names(env: Mapping[str, str]) -> list[str]:
    """CAPACITY_* variables that name no setting (typos would otherwise pass silently).
    Unknown nested keys are caught by the models themselves."""
    fields = set(CapacitySettings.model_fields)
    unknown = []
    for name in sorted(env):
        if not name.upper().startswith(ENV_PREFIX) or name.upper() == CONFIG_FILE_ENV:
            continue
        head = name[len(ENV_PREFIX) :].split("__", 1)[0].lower()
        if head not in fields:
            unknown.append(name)
    return unknown


def _unreadable(line: str) -> CapacitySettingsError:
    """The settings file cannot be read at all: that one line, nothing else to report."""
    return CapacitySettingsError(line, reference=False)


def load_capacity_settings(env: Mapping[str, str]) -> CapacitySettings:
    """Read the settings from `env` (normally os.environ) and the YAML file it names.
    Raises CapacitySettingsError naming every bad value and its source."""
    sources: list[PydanticBaseSettingsSource] = [_MappingEnvSource(CapacitySettings, env)]
    file_data: object = None  # the file's mapping, to name the source of a bad value
    path_text = env.get(CONFIG_FILE_ENV, "").strip()
    if path_text:
        path = Path(path_text)
        if not path.is_file():
            raise _unreadable(f"capacity settings file {path_text}: not found")
        try:
            yaml_source = YamlConfigSettingsSource(CapacitySettings, yaml_file=path)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise _unreadable(
                f"capacity settings file {path_text}: not valid YAML{where}"
            ) from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, UnicodeDecodeError):
                raise _unreadable(f"capacity settings file {path_text}: not UTF-8 text") from None
            # the top level is a list or a scalar
            raise _unreadable(
                f"capacity settings file {path_text}: must be a mapping of settings"
            ) from None
        except OSError as exc:
            raise _unreadable(
                f"capacity settings file {path_text}: cannot read ({exc.__class__.__name__})"
            ) from None
        if not isinstance(yaml_source.yaml_data, dict):
            raise _unreadable(f"capacity settings file {path_text}: must be a mapping of settings")
        file_data = yaml_source.yaml_data
        sources.append(yaml_source)  # after env: the environment wins
    problems = [
        SettingProblem(f"capacity setting {name}: unknown environment variable")
        for name in _unknown_env_names(env)
    ]
    token_reset = _LOADING.set(tuple(sources))
    try:
        settings = CapacitySettings()
    except ValidationError as exc:
        problems += _problems(exc, env, file_data, path_text)
    finally:
        _LOADING.reset(token_reset)
    if problems:
        raise CapacitySettingsError(*problems)
    token = env.get(HUD_TOKEN_ENV, "")
    if token:
        settings = settings.model_copy(
            update={"hud": settings.hud.model_copy(update={"token": SecretStr(token)})}
        )
    return settings


def to_params(settings: CapacitySettings, max_runners: int) -> Params:
    """The policy's knobs. `max_runners` comes from ARC's config and may change later."""
    return Params(
        max_runners=max(0, max_runners),
        proactive_capacity=settings.proactive_capacity,
        max_pending_pairs=settings.max_pending_pairs,
        ready_timeout=settings.placeholder_ready_timeout,
        downscale_delay=settings.downscale_delay,
        ttl=settings.placeholder_ttl,
        renew_before=settings.renew_before,
        node_checks=settings.node_checks,
        demand_hold=settings.demand.hold,
        **_demand_params(settings),
    )


def _demand_params(settings: CapacitySettings) -> dict[str, Any]:
    source = settings.demand_source
    shard = {
        "cluster_index": settings.demand.cluster_index,
        "cluster_count": settings.demand.cluster_count,
    }
    if source == "github":
        return {
            "demand_enabled": True,
            "demand_stale_after": settings.github.stale_after,
            "demand_failure_base_capacity": settings.github.failure_base_capacity,
            "demand_live": DemandSource.GITHUB,
            **shard,
        }
    if source == "webhook":
        return {
            "demand_enabled": True,
            "demand_stale_after": settings.webhook.stale_after,
            "demand_failure_base_capacity": settings.webhook.failure_base_capacity,
            "demand_live": DemandSource.WEBHOOK,
            **shard,
        }
    return {
        "demand_enabled": source == "hud",
        "demand_stale_after": settings.hud.stale_after,
        "demand_failure_base_capacity": settings.hud.failure_base_capacity,
        "demand_live": DemandSource.HUD,
        **shard,
    }
