from __future__ import annotations

import json

import pytest

from listener.gojson import Fields, fold_keys, type_name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "bool"),
        (3, "number"),
        (3.5, "number"),
        ("x", "string"),
        ([1], "array"),
        ({"a": 1}, "object"),
    ],
)
def test_type_names_are_gos(value: object, name: str) -> None:
    assert type_name(value) == name


def test_the_later_of_two_keys_equal_without_case_wins() -> None:
    decoded = json.loads('{"MessageId": 1, "messageId": 2}', object_pairs_hook=fold_keys)
    assert decoded == {"messageid": 2}
    decoded = json.loads('{"messageId": 2, "MESSAGEID": 3}', object_pairs_hook=fold_keys)
    assert decoded == {"messageid": 3}


def test_fields_match_without_case() -> None:
    fields = Fields({"RunnerScaleSetId": 7, "name": "x"})
    assert fields.get("runnerScaleSetId") == 7
    assert fields.has("NAME")
    assert not fields.has("missing")
    assert fields.get("missing") is None
