"""The Dockerfile as the tests read and reproduce it (test infrastructure).

``parse_dockerfile`` reads the build arguments and the stages; ``run_builder_stage`` runs the
builder stage's ENV, WORKDIR, COPY and RUN steps on this machine, with a fresh directory
standing in for the image's ``/`` and .dockerignore applied to every COPY as Docker applies it.
Any other instruction in the builder stage fails the run rather than being skipped, so the
reproduction cannot silently fall behind the Dockerfile.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.deploy_files import ROOT


@dataclass
class BuildStage:
    """One `FROM <base> [AS <name>]` stage and its instructions, continuation lines joined."""

    base: str
    name: str
    instructions: list[tuple[str, str]]


def parse_dockerfile(path: Path = ROOT / "Dockerfile") -> tuple[dict[str, str], list[BuildStage]]:
    """ARGs before the first FROM, and the stages with their (INSTRUCTION, arguments)."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical.append(pending + raw.strip())
        pending = ""
    args: dict[str, str] = {}
    stages: list[BuildStage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            stages.append(BuildStage(base, name, []))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def parse_env(rest: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in shlex.split(rest))


def _docker_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: `**` spans directories, `*` and `?` do not."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def dockerignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents wins."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _docker_pattern(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


def copy_into(sources: list[str], target: str, workdir: Path, patterns: list[str]) -> None:
    """COPY <sources> <target>: files into a directory target (trailing / or several
    sources) or onto a file path; a directory source copies its contents."""
    dest = workdir / target
    into_dir = target.endswith("/") or len(sources) > 1
    for source in sources:
        origin = ROOT / source
        assert origin.exists(), f"COPY {source}: not in the repository"
        if origin.is_file():
            assert not dockerignored(source, patterns), f"COPY {source}: excluded by .dockerignore"
            pairs = [(origin, dest / origin.name if into_dir else dest)]
        else:
            pairs = [
                (file, dest / file.relative_to(origin))
                for file in sorted(origin.rglob("*"))
                if file.is_file() and not dockerignored(file.relative_to(ROOT).as_posix(), patterns)
            ]
        for file, copied in pairs:
            copied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, copied)


def run_builder_stage(stage: BuildStage, root: Path) -> dict[str, str]:
    """Run a builder stage with `root` standing in for the image's /; returns its ENV."""
    patterns = dockerignore_patterns()
    env: dict[str, str] = {}
    workdir = root
    for keyword, rest in stage.instructions:
        if keyword == "ENV":
            for key, value in parse_env(rest).items():
                env[key] = str(root) + value if value.startswith("/") else value
        elif keyword == "WORKDIR":
            workdir = root / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            *sources, target = shlex.split(rest)
            assert not any(s.startswith("--") for s in sources), rest
            copy_into(sources, target, workdir, patterns)
        elif keyword == "RUN":
            process_env = {
                "PATH": os.environ["PATH"],
                "HOME": str(root / "home"),
                "PYTHON": sys.executable,
                **env,
            }
            # A docker build has no pip cache; locally the cache only saves downloads and
            # hash checking still applies to every file.
            process_env.pop("PIP_NO_CACHE_DIR", None)
            process_env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
            proc = subprocess.run(
                ["sh", "-c", rest],
                cwd=workdir,
                env=process_env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert proc.returncode == 0, f"RUN {rest}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        else:
            raise AssertionError(f"builder stage: {keyword} is not reproduced by this test")
    return env
