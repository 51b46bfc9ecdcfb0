"""The value types every capacity settings group shares: durations ("30s", "5m", "1h30m"),
resource requests, tolerations and the names a half may land on (NodePools, node groups)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from capacity import quantity

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


def positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"duration must be more than 0, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(positive_duration)]
# A duration that may be left unset (None: the setting's documented automatic value).
OptionalDuration = Annotated[float | None, BeforeValidator(parse_duration)]
OptionalPositiveDuration = Annotated[float | None, BeforeValidator(positive_duration)]

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


def names_per_half(
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


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
