"""The settings of what a pair may land on and how many are held: Karpenter NodePool limits,
cluster-autoscaler node groups and the warm pool (docs/capacity-model.md §10)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from capacity import warm_pool
from capacity.settings_values import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    OptionalDuration,
    OptionalPositiveDuration,
    names_per_half,
)


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
        return names_per_half(
            value, "NodePool", "leave it unset to resolve", lambda n: bool(DNS_SUBDOMAIN.match(n))
        )

    @field_validator("events_namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if value and not DNS_LABEL.match(value):
            raise ValueError(f"invalid namespace {value!r}")
        return value


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
        return names_per_half(
            value, "node group", "leave it unset for no cap", lambda n: bool(n.strip())
        )

    @field_validator("status_namespace", "status_configmap")
    @classmethod
    def _check_object_name(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(f"invalid name {value!r}")
        return value


WarmPoolMode = Literal["fixed", "scheduled"]
# A configuration written for the adaptive pool, which is gone, is refused with what to use
# instead rather than as an unknown value or setting.
_ADAPTIVE_REPLACEMENT = "use mode: fixed (proactive_capacity pairs) or scheduled"
REMOVED_SETTINGS = {
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
