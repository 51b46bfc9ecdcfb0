"""``python -m tools.fakes_cli`` as a child process: it prints where the fakes listen,
serves them, and stops on SIGTERM. The fakes themselves: tests/unit/test_fake_actions.py."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


async def test_cli_serves_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.fakes_cli",
        "--scale-set",
        "7:linux",
        "--scale-set",
        "8:gpu:gpu,big",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            info = json.loads(await proc.stdout.readline())
        assert info["configure_url"] == f"{info['actions_url']}/acme"
        assert [s["labels"] for s in info["scale_sets"]] == [["linux"], ["gpu", "big"]]
        async with httpx.AsyncClient() as http:
            await http.post(
                f"{info['control_url']}/jobs", json={"count": 1, "labels": ["x", "gpu"]}
            )
            r = await http.get(
                info["hud_endpoint"],
                params={"parameters": json.dumps({"runnerLabels": ["gpu"]})},
                headers={"x-hud-internal-bot": info["hud_token"]},
            )
        assert r.json()[0]["num_queued_jobs"] == 1  # HUD groups by the second label
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
