"""The fake HUD queued-jobs endpoint, driven by a plain httpx client over loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.unit.listener_fixtures import loop_clock
from tools.fake_actions import FakeActions
from tools.fake_http import Fault
from tools.fake_hud import AUTH_HEADER, FakeHUD, Outage, hud_runner_label

TOKEN = "hud-fake-token"


@pytest.fixture
async def hud() -> AsyncIterator[FakeHUD]:
    async with FakeHUD(TOKEN, oversized_bytes=256 * 1024) as h:
        yield h


async def query(
    hud: FakeHUD, params: dict[str, Any] | None = None, token: str | None = TOKEN, **kw: Any
) -> httpx.Response:
    headers = {AUTH_HEADER: token} if token is not None else {}
    query_params = {} if params is None else {"parameters": json.dumps(params)}
    async with httpx.AsyncClient(timeout=kw.pop("timeout", 5)) as http:
        return await http.get(hud.endpoint, params=query_params, headers=headers)


async def test_auth_header_and_parameters_are_required(hud: FakeHUD) -> None:
    assert (await query(hud, {}, token=None)).status_code == 401
    assert (await query(hud, {}, token="wrong")).status_code == 401
    assert (await query(hud, None)).status_code == 400
    async with httpx.AsyncClient() as http:
        r = await http.get(
            hud.endpoint, params={"parameters": "{nope"}, headers={AUTH_HEADER: TOKEN}
        )
    assert r.status_code == 400
    assert hud.parameters == []


async def test_rows_filters_and_order(hud: FakeHUD) -> None:
    hud.set_queued("linux", 3, max_minutes=40)
    hud.set_queued("linux", 2, repo="lib", max_minutes=10)
    hud.set_queued("gpu", 5, org="other", max_minutes=90)
    r = await query(hud, {"orgs": [], "repo": "", "runnerLabels": []})
    assert r.status_code == 200
    rows = r.json()
    assert [(x["runner_label"], x["repo"]) for x in rows] == [
        ("gpu", "app"),
        ("linux", "app"),
        ("linux", "lib"),
    ]
    assert set(rows[0]) == {
        "runner_label",
        "org",
        "repo",
        "num_queued_jobs",
        "min_queue_time_minutes",
        "max_queue_time_minutes",
    }
    linux = (await query(hud, {"runnerLabels": ["linux"]})).json()
    assert sum(x["num_queued_jobs"] for x in linux) == 5  # one label, two rows: sum them
    assert len((await query(hud, {"orgs": ["acme"]})).json()) == 2
    assert len((await query(hud, {"orgs": [""]})).json()) == 3  # [""] means every org
    assert len((await query(hud, {"repo": "lib"})).json()) == 1
    assert len((await query(hud, {"queuedThresholdMinutes": 30})).json()) == 2
    assert hud.parameters[-1] == {"queuedThresholdMinutes": 30}
    hud.set_queued("gpu", 0, org="other")
    assert len((await query(hud, {})).json()) == 2


def test_runner_label_rule() -> None:
    assert hud_runner_label([]) == "N/A"
    assert hud_runner_label(["linux"]) == "linux"
    assert hud_runner_label(["self-hosted", "linux.2xlarge", "x"]) == "linux.2xlarge"


async def test_linked_rows_follow_the_actions_queue() -> None:
    async with FakeActions(clock=loop_clock()) as actions, FakeHUD(TOKEN) as hud:
        actions.add_scale_set(1, "linux")
        hud.link(actions)
        actions.add_jobs(2, labels=["linux"], queued_ago=150)
        actions.add_jobs(1, labels=["gpu"], repo="lib")
        rows = (await query(hud, {"runnerLabels": ["linux"]})).json()
        assert rows == [
            {
                "runner_label": "linux",
                "org": "acme",
                "repo": "app",
                "num_queued_jobs": 2,
                "min_queue_time_minutes": 2,
                "max_queue_time_minutes": 2,
            }
        ]
        assert (await query(hud, {"queuedThresholdMinutes": 2})).json()[0]["runner_label"] == (
            "linux"
        )
        assert len((await query(hud, {"queuedThresholdMinutes": 3})).json()) == 0

        # Assigned to a scale set but not started: still queued on GitHub.
        actions.assign(1, capacity=2)
        assert (await query(hud, {"runnerLabels": ["linux"]})).json()[0]["num_queued_jobs"] == 2
        hud.link(actions, include_assigned=False)
        assert (await query(hud, {"runnerLabels": ["linux"]})).json() == []
        hud.link(actions)
        job = actions.claim_job(1, "runner-1")
        assert job is not None
        assert (await query(hud, {"runnerLabels": ["linux"]})).json()[0]["num_queued_jobs"] == 1


async def test_linked_rows_lag_behind() -> None:
    async with FakeActions(clock=loop_clock()) as actions, FakeHUD(TOKEN) as hud:
        hud.link(actions, lag=0.5)
        actions.add_jobs(4, labels=["linux"])
        assert (await query(hud, {})).json() == []
        await asyncio.sleep(0.55)
        assert (await query(hud, {})).json()[0]["num_queued_jobs"] == 4


async def test_a_linked_job_is_noted_when_an_answer_first_counts_it() -> None:
    async with FakeActions(clock=loop_clock()) as actions, FakeHUD(TOKEN) as hud:
        hud.link(actions, lag=0.5)
        (job,) = actions.add_jobs(1, labels=["linux"])
        hud.rows({})  # looked at, not served: not noted
        await query(hud, {})  # served, but the lag hides the job yet
        assert hud.first_served == {}
        await asyncio.sleep(0.55)
        hud.outage(Outage.SERVER_ERROR, times=1)
        await query(hud, {})  # an outage serves no rows
        assert hud.first_served == {}
        await query(hud, {})
        first = actions.clock()
        assert hud.first_served == {job.runner_request_id: first}
        await asyncio.sleep(0.1)
        await query(hud, {})
        assert hud.first_served == {job.runner_request_id: first}  # the first time is kept


async def test_server_error_outage_for_n_requests(hud: FakeHUD) -> None:
    hud.set_queued("linux", 1)
    hud.outage(Outage.SERVER_ERROR, times=2, status=502)
    assert (await query(hud, {})).status_code == 502
    assert (await query(hud, {})).status_code == 502
    assert (await query(hud, {})).status_code == 200


async def test_hang_outage_until_cleared(hud: FakeHUD) -> None:
    hud.outage("hang")
    with pytest.raises(httpx.ReadTimeout):
        await query(hud, {}, timeout=0.2)
    hud.clear_outage()
    assert (await query(hud, {})).status_code == 200


async def test_garbage_wrong_schema_and_oversized_bodies(hud: FakeHUD) -> None:
    hud.outage(Outage.GARBAGE, times=1)
    r = await query(hud, {})
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        r.json()
    hud.outage(Outage.WRONG_SCHEMA, times=1)
    body = (await query(hud, {})).json()
    assert not isinstance(body, list)
    hud.outage(Outage.OVERSIZED, times=1)
    r = await query(hud, {})
    assert len(r.content) > 256 * 1024
    assert isinstance(r.json(), list)
    assert (await query(hud, {})).json() == []


async def test_low_level_faults_and_recording(hud: FakeHUD) -> None:
    hud.inject(Fault.drop())
    with pytest.raises(httpx.RemoteProtocolError):
        await query(hud, {"runnerLabels": ["linux"]})
    assert (await query(hud, {"runnerLabels": ["linux"]})).status_code == 200
    assert [r.fault for r in hud.requests] == ["drop", None]
    assert hud.requests[-1].headers[AUTH_HEADER] == TOKEN
    assert json.loads(hud.requests[-1].query["parameters"]) == {"runnerLabels": ["linux"]}
