"""The listener image, built from the Dockerfile as it is and run as its own user.

The checks a cluster would make: the entrypoint fails fast and clearly without its config;
with one it authenticates, polls, serves /metrics and the probes, keeps placeholders on the
real scheduler and stops cleanly on SIGTERM, all on a read-only root file system; it runs as
a non-root user and carries nothing to install or compile with.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re

import httpx
import pytest

from tests.support.image_listener import ImageListenerProcess, process_uid
from tools.e2e_site import SiteSpec, Stage
from tools.image import Built, Container, command_stderr
from tools.listener_process import metric_value

# A cold run bootstraps the base (mmdebstrap) and builds before the first test.
pytestmark = pytest.mark.timeout(900)

MISSING_CONFIG = "Error: LISTENER_CONFIG_PATH environment variable is not set"
COMPILERS = re.compile(r"(.*-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+|tcc|cpp)(-[\d.]+)?")


def test_image_runs_as_a_non_root_user(built: Built, container: Container) -> None:
    assert built.config["User"] == "65532:65532"
    assert built.config["Entrypoint"] == ["/ghalistener"]
    proc = container.run(["/venv/bin/python", "-c", "import os; print(os.getuid(), os.getgid())"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["65532", "65532"]


def test_entrypoint_without_config_fails_in_one_line(container: Container) -> None:
    proc = container.run(container.entrypoint, timeout=60)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert command_stderr(proc.stderr) == [MISSING_CONFIG]


def test_image_has_no_pip_and_no_compiler(container: Container) -> None:
    root = container.root
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        relative = "/" + os.path.relpath(directory, root)
        for name in dirs:
            if name == "pip" and relative.endswith(("site-packages", "dist-packages")):
                found.append(f"{relative}/{name}")
        in_bin = relative.endswith("/bin")
        for name in files:
            tool = in_bin and (name.startswith("pip") or COMPILERS.fullmatch(name) is not None)
            if tool or name.endswith(".whl"):
                found.append(f"{relative}/{name}")
    assert found == []
    for python in ("/usr/local/bin/python3", "/venv/bin/python"):
        proc = container.run([python, "-m", "pip", "--version"])
        assert proc.returncode == 1, (python, proc.stdout)
        assert "No module named pip" in proc.stderr, (python, proc.stderr)


def test_root_file_system_is_read_only_for_the_image_user(read_only_container: Container) -> None:
    """The emulation is in force: nothing under / can be written, as root of the container
    or as its user (so the live test below really runs on a read-only root)."""
    probe = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print(path, 'writable')\n"
        "    except OSError as exc:\n"
        "        print(path, exc.errno)\n"
    )
    paths = ["/probe", "/tmp/probe", "/venv/probe", "/etc/probe", "/run/probe"]
    for user in (read_only_container.user, "0:0"):
        proc = read_only_container.run(["/venv/bin/python", "-c", probe, *paths], user=user)
        assert proc.returncode == 0, proc.stderr
        results = dict(line.split() for line in proc.stdout.splitlines())
        expected = {p: "30" for p in paths}  # EROFS
        if user == "0:0":
            expected["/run/probe"] = "writable"  # buildah's own tmpfs, root-owned
        else:
            expected["/run/probe"] = "13"  # EACCES: not the image user's
        assert results == expected, (user, results)


async def test_listener_from_the_image_polls_serves_and_stops_on_sigterm(
    stage: Stage, read_only_container: Container
) -> None:
    site = await stage.add_site(SiteSpec(name="image", scale_set_id=81))
    listener = site.start_listener(
        capacity=site.capacity_settings(proactive=1),
        max_runners=4,
        process=functools.partial(ImageListenerProcess, container=read_only_container),
    )
    assert isinstance(listener, ImageListenerProcess)
    await site.wait_session(within=60)
    session = stage.fake.session(site.scale_set_id)
    assert session is not None

    # The capacity monitor works from inside the image: a pair on the scheduler, advertised.
    await site.wait_for(
        lambda: site.advertised() == 1 and site.view().pairs_running == 1,
        "one warm pair advertised",
        60,
    )
    pid = listener.main_pid()
    assert pid is not None
    assert process_uid(pid) == 65532

    metrics = await listener.metrics_text()
    labels = {"name": site.runner_set_name, "namespace": site.namespace}
    assert metric_value(metrics, "gha_capacity_advertised", labels) == 1.0
    assert metric_value(metrics, "gha_max_runners", labels) == 4.0
    probes = f"http://127.0.0.1:{listener.probe_port}"
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as http:
        response = await http.get(f"{probes}/healthz")
        assert response.status_code == 200, response.text
        # Ready once a long poll has completed (the fake holds each one for 2 s).
        async with asyncio.timeout(30):
            while (response := await http.get(f"{probes}/readyz")).status_code != 200:
                assert response.status_code == 503, response.text
                await asyncio.sleep(0.2)

    assert await listener.stop(within=30.0) == 0, listener.log_tail()
    assert session.deleted
    assert stage.fake.expired_sessions == []
    # A graceful stop removes its placeholders.
    await site.wait_for(lambda: not site.placeholders, "placeholders removed", 30)
