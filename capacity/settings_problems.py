"""How bad capacity settings are reported: one line per problem, each naming the field and
where its value came from (the environment variable or the file's key), then a line pointing
to the reference."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from capacity.settings_pools import REMOVED_SETTINGS

REFERENCE = "deploy/config/REFERENCE.md"


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
        problem = REMOVED_SETTINGS.get(path, "unknown setting")
    else:
        problem = f"{error['msg'][:1].lower()}{error['msg'][1:]} (got {error['input']!r})"
    if not path:  # model-level checks name their field themselves
        texts = []
        for line in problem.splitlines():
            named = _NAMED_FIELD.match(line)
            texts.append((named.group(1) if named else "", f"capacity setting {line}"))
        return texts
    return [(path, f"capacity setting {path}: {problem}")]


def _env_lookup(env: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Upper-cased names with the settings' prefix -> the names as given (the settings ignore
    case)."""
    return {name.upper(): name for name in env if name.upper().startswith(prefix)}


def _in_file(data: object, parts: list[str]) -> bool:
    """Whether the file's mapping sets the first part of the path (a nested value comes
    from the file when its top-level key does)."""
    return isinstance(data, dict) and bool(parts) and parts[0] in data


def _source(
    path: str, env_names: Mapping[str, str], prefix: str, file_data: object, file_path: str
) -> str:
    """Where the value of `path` came from: the environment variable that set it or a
    mapping that holds it (the environment wins over the file), else the file, else ""."""
    parts = path.split(".") if path else []
    in_file = _in_file(file_data, parts)
    for end in range(len(parts), 0, -1):
        if any(part.isdigit() for part in parts[:end]):
            continue  # list items come in their list's variable
        name = prefix + "__".join(parts[:end]).upper()
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


def problems_of(
    exc: ValidationError, env: Mapping[str, str], prefix: str, file_data: object, file_path: str
) -> list[SettingProblem]:
    """One problem per line of ``exc``; ``prefix`` starts the settings' environment variables,
    ``file_data`` is the settings file's mapping (None: no file) read from ``file_path``."""
    env_names = _env_lookup(env, prefix)
    problems = []
    for error in exc.errors(include_url=False):
        for path, text in _error_texts(error):
            source = _source(path, env_names, prefix, file_data, file_path)
            problems.append(SettingProblem(text, source))
    return problems


def unreadable(line: str) -> CapacitySettingsError:
    """The settings file cannot be read at all: that one line, nothing else to report."""
    return CapacitySettingsError(line, reference=False)
