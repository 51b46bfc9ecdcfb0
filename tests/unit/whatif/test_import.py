"""``ghalistener whatif import``: job history from GitHub's REST API (the fake GitHub REST
server end to end, respx for pacing), and from a file; nothing dropped without a count."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import respx

from tests.support.config_files import scale_set_config
from tests.support.fake_clock import FakeClock
from tools.fake_github_rest import FakeGitHubRest
from whatif import cli
from whatif.history import GitHubHistory, HistoryError
from whatif.trace import from_github, read_lines

PAT = "ghp_fake_pat"
API = "https://api.github.com"


def _config(tmp_path: Path, configure_url: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(scale_set_config(configure_url=configure_url, github_token=PAT)))
    return path


async def test_import_from_the_fake_github_rest_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    async with FakeGitHubRest(tokens=[PAT]) as fake:
        first = fake.finished_job(
            "acme",
            "app",
            ["self-hosted", "linux"],
            created_at=now - timedelta(hours=2),
            started_after=40,
            duration=300,
        )
        fake.finished_job(  # same run, a second stage
            "acme",
            "app",
            ["linux"],
            created_at=now - timedelta(hours=1, minutes=50),
            started_after=5,
            duration=60,
            run_id=first.run_id,
        )
        fake.finished_job(  # cancelled while queued: an arrival that never ran
            "acme",
            "app",
            ["linux"],
            created_at=now - timedelta(hours=1),
            started_after=None,
            conclusion="cancelled",
        )
        fake.finished_job(
            "acme",
            "app",
            ["linux"],
            created_at=now - timedelta(hours=1),
            started_after=None,
            conclusion="skipped",
        )
        fake.finished_job(  # another repository of the organization, a GPU job
            "acme",
            "ml",
            ["gpu"],
            created_at=now - timedelta(days=1, hours=3),
            started_after=10,
            duration=30,
        )
        fake.finished_job(  # outside the window
            "acme",
            "ml",
            ["gpu"],
            created_at=now - timedelta(days=4),
            started_after=10,
            duration=30,
        )
        fake.queue_job("acme", "app", ["linux"])  # still queued: reported, not traced
        fake.add_repositories("acme", ["old"], archived=True)
        config = _config(tmp_path, f"{fake.api_url.removesuffix('/api/v3')}/acme")
        out = tmp_path / "trace.jsonl"
        status = await cli.amain(
            ["import", "--config", str(config), "--days", "2", "--out", str(out)]
        )
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    jobs = read_lines(out.read_text().splitlines())
    assert [j.label_set for j in jobs] == ["gpu", "linux,self-hosted", "linux", "linux"]
    assert summary["written"] == 4
    assert summary["skipped"] == {
        "not finished (status queued)": 1,
        "skipped (never asked for a runner)": 1,
    }
    assert summary["repositories"] == 2  # the archived one is not read
    app_jobs = [j for j in jobs if j.label_set != "gpu"]
    assert app_jobs[0].wait == pytest.approx(40)
    assert app_jobs[0].duration == pytest.approx(300)
    assert app_jobs[0].run == app_jobs[1].run == str(first.run_id)
    assert app_jobs[2].started_at is None  # cancelled while queued
    runs_calls = [c for c in fake.calls if c.path.endswith("/actions/runs")]
    assert all(c.query["created"].count("..") == 1 for c in runs_calls)
    assert len(runs_calls) == 2 * 2  # two repositories, two one-day windows each


async def test_import_keeps_only_the_labels_served_and_says_how_many_it_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    async with FakeGitHubRest(tokens=[PAT]) as fake:
        for labels in (["linux"], ["gpu"], ["ubuntu-latest"]):
            fake.finished_job(
                "acme",
                "app",
                labels,
                created_at=now - timedelta(minutes=30),
                started_after=1,
                duration=2,
            )
        config = _config(tmp_path, f"{fake.api_url.removesuffix('/api/v3')}/acme/app")
        status = await cli.amain(
            [
                "import",
                "--config",
                str(config),
                "--days",
                "1",
                "--labels",
                "linux",
                "--out",
                str(tmp_path / "t.jsonl"),
            ]
        )
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["written"] == 1
    assert summary["skipped"] == {
        "labels not served (gpu)": 1,
        "labels not served (ubuntu-latest)": 1,
    }
    assert summary["repositories"] == 1  # the scale set's own repository


async def test_bad_credentials_end_the_import_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeGitHubRest(tokens=["ghp_other"]) as fake:
        config = _config(tmp_path, f"{fake.api_url.removesuffix('/api/v3')}/acme/app")
        status = await cli.amain(["import", "--config", str(config), "--days", "1"])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ")
    assert err.count("\n") == 1
    assert "401" in err
    assert PAT not in err


@respx.mock
async def test_history_paces_on_the_rate_limit_and_waits_out_secondary_limits() -> None:
    fake_clock = FakeClock()
    now = 1_800_000_000.0
    runs = respx.get(url__startswith=f"{API}/repos/acme/app/actions/runs?created=").mock(
        side_effect=[
            httpx.Response(403, headers={"Retry-After": "7"}, json={"message": "secondary"}),
            httpx.Response(
                200,
                json={"total_count": 1500, "workflow_runs": [{"id": 5}]},
                headers={"X-RateLimit-Remaining": "10", "X-RateLimit-Reset": str(int(now + 90))},
            ),
        ]
    )
    respx.get(f"{API}/repos/acme/app/actions/runs/5/jobs?per_page=100").mock(
        return_value=httpx.Response(
            200,
            json={"jobs": [{"id": 1, "status": "queued"}]},
            headers={"X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": str(int(now + 3600))},
        )
    )

    async def token() -> str:
        return PAT

    async with httpx.AsyncClient() as client:
        history = GitHubHistory(
            client, token, API, reserve=10, sleep=fake_clock.sleep, clock=lambda: now
        )
        since = datetime.fromtimestamp(now, UTC) - timedelta(hours=1)
        found = [
            job async for _, job in history.jobs(["acme/app"], since, since + timedelta(hours=1))
        ]
    assert found == [{"id": 1, "status": "queued"}]
    assert fake_clock.sleeps == [
        7.0,
        90.0,
    ]  # the secondary limit, then the reset (10 left = the reserve)
    assert history.stats.truncated_days == [f"acme/app {since.date().isoformat()}"]
    assert runs.call_count == 2


@respx.mock
async def test_history_gives_up_after_repeated_rate_limits() -> None:
    respx.get(url__startswith=f"{API}/repos/acme/app/actions/runs").mock(
        return_value=httpx.Response(403, headers={"Retry-After": "1"})
    )

    async def token() -> str:
        return PAT

    async with httpx.AsyncClient() as client:
        history = GitHubHistory(client, token, API, sleep=FakeClock().sleep)
        since = datetime(2026, 1, 1, tzinfo=UTC)
        with pytest.raises(HistoryError, match="still rate-limited"):
            async for _ in history.jobs(["acme/app"], since, since + timedelta(hours=1)):
                pass


@respx.mock
async def test_history_fills_the_workflow_job_name_and_attempt_from_the_rest_fields() -> None:
    now = 1_800_000_000.0
    respx.get(url__startswith=f"{API}/repos/acme/app/actions/runs?created=").mock(
        return_value=httpx.Response(
            200,
            json={
                "total_count": 2,
                "workflow_runs": [
                    {"id": 5, "path": ".github/workflows/pr.yml", "name": "PR", "run_attempt": 2},
                    {"id": 6, "name": "nightly"},  # no path: the name; no attempt: 1
                ],
            },
        )
    )
    finished = {
        "status": "completed",
        "conclusion": "success",
        "labels": ["linux-gpu"],
        "created_at": "2026-11-20T09:00:00Z",
        "started_at": "2026-11-20T09:00:30Z",
        "completed_at": "2026-11-20T09:05:30Z",
        "runner_name": "r-1",
    }
    respx.get(f"{API}/repos/acme/app/actions/runs/5/jobs?per_page=100").mock(
        return_value=httpx.Response(
            200,
            json={
                "jobs": [{**finished, "id": 1, "run_id": 5, "name": "test (1/4)", "run_attempt": 2}]
            },
        )
    )
    respx.get(f"{API}/repos/acme/app/actions/runs/6/jobs?per_page=100").mock(
        return_value=httpx.Response(200, json={"jobs": [{**finished, "id": 2, "run_id": 6}]})
    )

    async def token() -> str:
        return PAT

    async with httpx.AsyncClient() as client:
        history = GitHubHistory(client, token, API, clock=lambda: now)
        since = datetime.fromtimestamp(now, UTC) - timedelta(hours=1)
        traced = [
            from_github(run, job)
            async for run, job in history.jobs(["acme/app"], since, since + timedelta(hours=1))
        ]
    first, second = traced
    assert not isinstance(first, str)
    assert not isinstance(second, str)
    assert (first.workflow, first.job_name, first.run_attempt) == (
        ".github/workflows/pr.yml",
        "test (1/4)",
        2,
    )
    assert (second.workflow, second.job_name, second.run_attempt) == ("nightly", "", 1)
    # A bad attempt does not drop the job: it is a first attempt.
    odd = from_github({"id": 6}, {**finished, "id": 3, "run_attempt": "x"})
    assert not isinstance(odd, str)
    assert odd.run_attempt == 1


def test_github_jobs_become_trace_lines_or_a_reason() -> None:
    base = {
        "id": 9,
        "run_id": 4,
        "status": "completed",
        "conclusion": "success",
        "labels": ["linux", "self-hosted"],
        "created_at": "2026-11-20T09:00:00Z",
        "started_at": "2026-11-20T09:00:30Z",
        "completed_at": "2026-11-20T09:05:30Z",
        "runner_name": "r-1",
    }
    job = from_github({}, base)
    assert not isinstance(job, str)
    assert (job.wait, job.duration, job.runner) == (30, 300, "r-1")
    assert from_github({}, {**base, "status": "in_progress"}) == "not finished (status in_progress)"
    assert from_github({}, {**base, "labels": []}) == "no labels"
    assert from_github({}, {**base, "started_at": "2026-11-20T08:00:00Z"}) == "times out of order"
    assert from_github({}, {**base, "created_at": None}) == "no created_at"


async def test_a_file_is_validated_and_a_bad_line_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = '{"job":"1","run":"1","labels":["b","a"],"queued_at":"2026-01-01T00:00:10Z"}'
    bad = '{"job":"2","run":"1","labels":["a"],"queued_at":"yesterday"}'
    path = tmp_path / "in.jsonl"
    path.write_text(f"{good}\n{bad}\n")
    assert await cli.amain(["import", "--from", "file", "--file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"Error: {path}:2: field queued_at: not an RFC 3339 time: 'yesterday'\n"
    path.write_text(f"{good}\n")
    out = tmp_path / "out.jsonl"
    assert (
        await cli.amain(["import", "--from", "file", "--file", str(path), "--out", str(out)]) == 0
    )
    assert '"labels":["a","b"]' in out.read_text()  # normalised: labels sorted


async def test_hud_has_no_history_to_import(capsys: pytest.CaptureFixture[str]) -> None:
    assert await cli.amain(["import", "--from", "hud"]) == 1
    assert "HUD has no job-history endpoint" in capsys.readouterr().err
