"""The Dockerfile: its shape and what .dockerignore keeps out of the context. Its builder
steps run in a fresh directory: tests/integration/test_dockerfile.py; the image itself is
built with buildah in tests/image."""

from __future__ import annotations

import json
import re
import tomllib

from tests.support.deploy_files import ROOT
from tests.support.dockerfile import (
    dockerignore_patterns,
    dockerignored,
    parse_dockerfile,
    parse_env,
)


def test_dockerfile_shape() -> None:
    args, stages = parse_dockerfile()
    assert len(stages) == 2
    builder, runtime = stages
    assert builder.name == "builder"
    assert "slim" in builder.base
    assert builder.base == runtime.base
    assert re.fullmatch(r"python:3\.1[1-9]-slim", args["PYTHON_IMAGE"])
    steps = dict(runtime.instructions[::-1])  # first occurrence wins
    assert steps["COPY"] == "--from=builder /venv /venv"
    assert steps["USER"] == "65532:65532"
    assert json.loads(steps["ENTRYPOINT"]) == ["/ghalistener"]
    assert "ln -s /venv/bin/ghalistener /ghalistener" in steps["RUN"]
    env = parse_env(steps["ENV"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/venv/bin:")
    # Nothing in the runtime stage installs or compiles anything.
    assert not re.search(r"\b(apt-get|apk|gcc|pip install)\b", steps["RUN"])


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = dockerignore_patterns()
    assert not dockerignored("listener/cli.py", patterns)
    assert not dockerignored("base/kube.py", patterns)
    assert not dockerignored("deploy/requirements.lock", patterns)
    assert dockerignored("listener/__pycache__/cli.cpython-311.pyc", patterns)
    assert dockerignored(".venv/bin/python", patterns)
    assert dockerignored("tests/unit/test_dockerfile.py", patterns)
    assert dockerignored("deploy/grafana/capacity-listener.json", patterns)


def test_the_image_copies_the_product_and_leaves_the_whatif_extra_out() -> None:
    """setuptools packages whatif where its directory is there (pyproject.toml); the image
    lacks it because the builder never copies it."""
    _, (builder, _runtime) = parse_dockerfile()
    sources = [
        source
        for keyword, rest in builder.instructions
        if keyword == "COPY"
        for source in rest.split()[:-1]
    ]
    packages = {source for source in sources if (ROOT / source).is_dir()}
    assert packages == {"listener", "capacity", "base"}
    assert not any(source.split("/")[0] == "whatif" for source in sources)
    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "whatif*" in found["tool"]["setuptools"]["packages"]["find"]["include"]
    assert "whatif" in found["project"]["optional-dependencies"]
