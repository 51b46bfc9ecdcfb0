"""JSON read the way Go's ``encoding/json`` reads it into a struct, for the two documents this
process shares with Go programs: ARC's config.json and the Actions service's bodies.

Two rules matter for compatibility: object keys match struct fields without regard to case
(the service has sent ``messageId`` and ``MessageId``), and when two keys differ only in case
the later one wins, because Go assigns members in document order. Errors name the offending
value's JSON type in Go's words (``bool``, ``number``, ``string``, ``array``, ``object``), never
the value itself: the field might hold a secret.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def type_name(value: object) -> str:
    """The JSON type of a decoded value, in the words Go's decoder uses in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def fold_keys(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members keyed without case, the later of two equal keys winning.

    Usable as ``json.loads(..., object_pairs_hook=fold_keys)``: the pairs still come in
    document order there, which a plain dict would not keep for two keys folded together.
    """
    return {key.casefold(): value for key, value in pairs}


class Fields:
    """One JSON object, its members looked up as Go matches struct fields."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._values = fold_keys(raw.items())

    def has(self, key: str) -> bool:
        return key.casefold() in self._values

    def get(self, key: str) -> Any:
        return self._values.get(key.casefold())
