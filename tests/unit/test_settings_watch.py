"""A change of the mounted capacity settings ends the listener (listener/settings_watch.py),
so ARC's controller recreates it with them: a real settings file, updated the way the kubelet
updates a ConfigMap volume (a new directory, then the `..data` symlink swapped), read by the
listener's own loader, on the unit tier's virtual clock."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from capacity.settings import CONFIG_FILE_ENV, CapacitySettings, load_capacity_settings
from listener import app, startup
from listener.settings_watch import wait_for_change

INTERVAL = 10.0
SETTINGS = """\
enabled: true
proactive_capacity: 1
workflow_resources:
  requests: {cpu: "2", memory: 8Gi}
"""


class Volume:
    """A ConfigMap volume as the kubelet lays it out: `capacity.yaml` → `..data/capacity.yaml`,
    `..data` → the current version's directory, replaced by an atomic rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.versions = 0
        self.file = root / "capacity.yaml"

    def publish(self, content: str) -> None:
        self.versions += 1
        version = self.root / f"..version_{self.versions}"
        version.mkdir()
        (version / "capacity.yaml").write_text(content)
        staged = self.root / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.root / "..data")
        if not self.file.is_symlink():
            self.file.symlink_to("..data/capacity.yaml")

    def env(self) -> dict[str, str]:
        return {CONFIG_FILE_ENV: str(self.file)}


@pytest.fixture
def volume(tmp_path: Path) -> Volume:
    mounted = Volume(tmp_path)
    mounted.publish(SETTINGS)
    return mounted


def _watch(volume: Volume) -> asyncio.Task[CapacitySettings]:
    env = volume.env()
    running = load_capacity_settings(env)
    return asyncio.ensure_future(
        wait_for_change(
            volume.file, running, lambda: load_capacity_settings(env), interval=INTERVAL
        )
    )


async def _checks(count: int) -> None:
    """Let ``count`` checks pass; the test acts half an interval off the watcher's beat."""
    await asyncio.sleep(count * INTERVAL)


async def test_a_changed_setting_ends_the_watch_at_the_next_check(volume: Volume) -> None:
    watch = _watch(volume)
    await asyncio.sleep(INTERVAL / 2)
    await _checks(3)
    assert not watch.done()  # the same file: nothing to do
    volume.publish("# a comment, keys reordered\nworkflow_resources:\n  requests: {cpu: '2', "
                   "memory: 8Gi}\nproactive_capacity: 1\nenabled: true\n")  # fmt: skip
    await _checks(3)
    assert not watch.done()  # other bytes, the same settings: no restart
    loop = asyncio.get_running_loop()
    changed_at = loop.time()
    volume.publish(SETTINGS.replace("proactive_capacity: 1", "proactive_capacity: 3"))
    new = await asyncio.wait_for(watch, timeout=2 * INTERVAL)
    assert new.proactive_capacity == 3
    assert loop.time() - changed_at <= INTERVAL  # seen at the first check after the swap


async def test_settings_that_do_not_load_are_logged_once_and_kept_out(
    volume: Volume, caplog: pytest.LogCaptureFixture
) -> None:
    watch = _watch(volume)
    await asyncio.sleep(INTERVAL / 2)
    with caplog.at_level(logging.WARNING, logger="listener.settings"):
        volume.publish(SETTINGS.replace("proactive_capacity: 1", "proactive_capacity: -1"))
        await _checks(5)
        assert not watch.done()  # a listener that works is not replaced by one that cannot
        warnings = [r for r in caplog.records if "do not load" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "proactive_capacity" in str(warnings[0].__dict__["error"])
        volume.publish("enabled: [true\n")  # not YAML: another content, another line
        await _checks(2)
        assert len([r for r in caplog.records if "do not load" in r.getMessage()]) == 2
    volume.publish(SETTINGS.replace("enabled: true", "enabled: false"))
    new = await asyncio.wait_for(watch, timeout=2 * INTERVAL)
    assert new.enabled is False  # switching the monitor off is a change like any other


async def test_a_file_gone_keeps_the_running_settings(volume: Volume) -> None:
    watch = _watch(volume)
    await asyncio.sleep(INTERVAL / 2)
    (volume.root / "..data").unlink()
    await _checks(3)
    assert not watch.done()
    volume.publish(SETTINGS)  # back as it was: still nothing to do
    await _checks(2)
    assert not watch.done()
    watch.cancel()


def test_the_check_interval_is_a_listener_option(volume: Volume) -> None:
    assert startup.Options.from_env({}).settings_check_interval == INTERVAL
    options = startup.Options.from_env({"LISTENER_SETTINGS_CHECK_INTERVAL": "0"})
    assert options.settings_check_interval == 0  # off
    with pytest.raises(startup.StartupError, match="LISTENER_SETTINGS_CHECK_INTERVAL"):
        startup.Options.from_env({"LISTENER_SETTINGS_CHECK_INTERVAL": "soon"})


def test_only_a_settings_file_is_watched(volume: Volume) -> None:
    running = load_capacity_settings(volume.env())
    assert app._settings_watch({"CAPACITY_ENABLED": "false"}, running, INTERVAL) is None
    watch = app._settings_watch(volume.env(), running, INTERVAL)
    assert watch is not None
    watch.close()  # type: ignore[attr-defined]  # a coroutine, never started


async def test_switched_off_settings_are_watched_too(volume: Volume) -> None:
    """The monitor off (no settings in force) still restarts on a change: turning it on."""
    volume.publish(SETTINGS.replace("enabled: true", "enabled: false"))
    watch = app._settings_watch(volume.env(), None, INTERVAL)
    assert watch is not None
    task = asyncio.ensure_future(watch)
    await asyncio.sleep(INTERVAL * 2.5)
    assert not task.done()
    volume.publish(SETTINGS)
    new = await asyncio.wait_for(task, timeout=2 * INTERVAL)
    assert new.enabled is True
