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
and each field carries its description and validation. This module holds the top-level model
and its loading; the groups are in `capacity.settings_demand` and `capacity.settings_pools`,
their value types in `capacity.settings_values`, and the problem lines in
`capacity.settings_problems`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from capacity import warm_pool
from capacity.model import DemandSource, Params
from capacity.settings_demand import (
    HUD_TOKEN_ENV,
    DemandSettings,
    DemandSourceName,
    HudSettings,
    WebhookDemandSettings,
)

# Re-exported explicitly: tools/bench_receiver.py imports it from here.
from capacity.settings_demand import GitHubDemandSettings as GitHubDemandSettings
from capacity.settings_pools import ClusterAutoscalerSettings, NodePoolSettings, WarmPoolSettings
from capacity.settings_problems import (
    CapacitySettingsError,
    SettingProblem,
    problems_of,
    unreadable,
)
from capacity.settings_values import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Duration,
    PositiveDuration,
    Resources,
    Toleration,
)

ENV_PREFIX = "CAPACITY_"
CONFIG_FILE_ENV = "CAPACITY_CONFIG_FILE"

DEFAULT_IMAGE = "public.ecr.aws/docker/library/alpine:3.21"

# The default HUD read interval: a reading as fresh as this costs HUD two small queries.
HUD_READ_INTERVAL = 10.0
# The receiver answers from memory in the cluster: a read a second keeps the demand step
# about a second for little cost.
WEBHOOK_READ_INTERVAL = 1.0


def to_warm_pool(settings: CapacitySettings) -> warm_pool.WarmPool:
    """The warm pool the settings describe (validated already)."""
    pool = settings.warm_pool
    if pool.mode == "fixed":
        return warm_pool.FixedPool(settings.proactive_capacity)
    windows = [warm_pool.parse_window(w.window, w.floor) for w in pool.schedule]
    return warm_pool.ScheduledPool(windows, default=settings.proactive_capacity)


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
        if value is not None and not DNS_LABEL.match(value):
            raise ValueError(f"invalid namespace {value!r}")
        return value

    @field_validator("listener_role")
    @classmethod
    def _check_role(cls, value: str | None) -> str | None:
        if value and not DNS_SUBDOMAIN.match(value):
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


def load_capacity_settings(env: Mapping[str, str]) -> CapacitySettings:
    """Read the settings from `env` (normally os.environ) and the YAML file it names.
    Raises CapacitySettingsError naming every bad value and its source."""
    sources: list[PydanticBaseSettingsSource] = [_MappingEnvSource(CapacitySettings, env)]
    file_data: object = None  # the file's mapping, to name the source of a bad value
    path_text = env.get(CONFIG_FILE_ENV, "").strip()
    if path_text:
        path = Path(path_text)
        if not path.is_file():
            raise unreadable(f"capacity settings file {path_text}: not found")
        try:
            yaml_source = YamlConfigSettingsSource(CapacitySettings, yaml_file=path)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise unreadable(f"capacity settings file {path_text}: not valid YAML{where}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, UnicodeDecodeError):
                raise unreadable(f"capacity settings file {path_text}: not UTF-8 text") from None
            # the top level is a list or a scalar
            raise unreadable(
                f"capacity settings file {path_text}: must be a mapping of settings"
            ) from None
        except OSError as exc:
            raise unreadable(
                f"capacity settings file {path_text}: cannot read ({exc.__class__.__name__})"
            ) from None
        if not isinstance(yaml_source.yaml_data, dict):
            raise unreadable(f"capacity settings file {path_text}: must be a mapping of settings")
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
        problems += problems_of(exc, env, ENV_PREFIX, file_data, path_text)
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
