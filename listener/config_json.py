"""config.json's values read as Go's ``encoding/json`` reads them into ARC's struct (keys
matched case-insensitively, unknown keys ignored, ``null`` leaves a field at its zero value),
with ARC's words for a value of the wrong type. PURE: no I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from listener.config import ConfigError, MetricsConfig, MetricSpec, empty_specs
from listener.gojson import Fields, type_name

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def go_quote(value: str) -> str:
    """Close to Go's ``%q`` for the values ARC quotes (names, URLs)."""
    return json.dumps(value, ensure_ascii=False)


def decode_error(key: str, want: str, value: object) -> ConfigError:
    # Only the JSON type of the offending value is named, never the value: the field might
    # hold a secret.
    return ConfigError(
        f"failed to decode config: {key} must be {want}, got {type_name(value)}",
        field=key,
        stage="read",
    )


class ConfigObject(Fields):
    """A config.json object: Go's field matching, ARC's decode errors."""

    def __init__(self, raw: Mapping[str, Any], where: str = "") -> None:
        # Go prefers an exact key match, then a case-insensitive one; for a file written by
        # the controller (exact keys, no duplicates) "last case-folded key wins" is identical.
        super().__init__(raw)
        self._where = where

    def name(self, key: str) -> str:
        return f"{self._where}{key}"

    def string(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise decode_error(self.name(key), "a string", value)
        return value

    def integer(self, key: str, *, allow_digit_string: bool = False) -> int:
        value = self.get(key)
        if value is None:
            return 0
        if allow_digit_string and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            want = "an integer (or a string of digits)" if allow_digit_string else "an integer"
            raise decode_error(self.name(key), want, value)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ConfigError(
                f"failed to decode config: {self.name(key)} {value} overflows a 64-bit integer",
                field=self.name(key),
                stage="read",
            )
        return value


def _metric_specs(raw: Any, where: str, *, with_buckets: bool) -> Mapping[str, MetricSpec]:
    if raw is None:
        return empty_specs()
    if not isinstance(raw, dict):
        raise decode_error(where, "an object", raw)
    specs: dict[str, MetricSpec] = {}
    for name, entry in raw.items():
        entry_where = f"{where}[{go_quote(name)}]"
        if not isinstance(entry, dict):
            raise decode_error(entry_where, "an object", entry)
        obj = ConfigObject(entry, f"{entry_where}.")
        labels = obj.get("labels")
        if labels is None:
            labels = []
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise decode_error(obj.name("labels"), "an array of strings", labels)
        buckets: list[float] = []
        if with_buckets:
            raw_buckets = obj.get("buckets")
            if raw_buckets is None:
                raw_buckets = []
            if not isinstance(raw_buckets, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in raw_buckets
            ):
                raise decode_error(obj.name("buckets"), "an array of numbers", raw_buckets)
            buckets = [float(x) for x in raw_buckets]
        specs[name] = MetricSpec(labels=tuple(labels), buckets=tuple(buckets))
    return MappingProxyType(specs)


def metrics_config(raw: Any) -> MetricsConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise decode_error("metrics", "an object or null", raw)
    obj = ConfigObject(raw, "metrics.")
    return MetricsConfig(
        counters=_metric_specs(obj.get("counters"), obj.name("counters"), with_buckets=False),
        gauges=_metric_specs(obj.get("gauges"), obj.name("gauges"), with_buckets=False),
        histograms=_metric_specs(obj.get("histograms"), obj.name("histograms"), with_buckets=True),
    )
