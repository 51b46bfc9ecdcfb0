"""The controller-facing routes of the fake Actions service (tools/fake_arc_admin.py), driven
over loopback in the order ARC's gha-runner-scale-set controller calls them, with the paths,
query strings and bodies of its client (github.com/actions/scaleset)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.unit.listener_fixtures import loop_clock
from tools.fake_actions import FakeActions
from tools.fake_arc_admin import ArcAdmin

PAT = "ghp_fake_pat"
API = {"api-version": "6.0-preview"}


class Controller:
    """The controller's calls (deliberately not the listener's client)."""

    def __init__(self, fake: FakeActions, http: httpx.AsyncClient) -> None:
        self.fake = fake
        self.http = http
        self.service = ""
        self.headers: dict[str, str] = {}

    async def connect(self) -> None:
        r = await self.http.post(
            f"{self.fake.api_url}/orgs/acme/actions/runners/registration-token",
            headers={"Authorization": f"Bearer {PAT}"},
        )
        assert r.status_code == 201, r.text
        r = await self.http.post(
            f"{self.fake.api_url}/actions/runner-registration",
            headers={"Authorization": f"RemoteAuth {r.json()['token']}"},
            json={"url": self.fake.configure_url(), "runner_event": "register"},
        )
        assert r.status_code == 200, r.text
        self.service = r.json()["url"]
        self.headers = {"Authorization": f"Bearer {r.json()['token']}"}

    async def call(self, method: str, path: str, body: Any = None, **query: str) -> httpx.Response:
        return await self.http.request(
            method,
            f"{self.service}{path}",
            params={**query, **API},
            headers=self.headers,
            json=body,
        )


@pytest.fixture
async def setup() -> AsyncIterator[tuple[FakeActions, ArcAdmin, Controller]]:
    fake = FakeActions(pats=(PAT,), poll_hold=0.1, clock=loop_clock())
    admin = ArcAdmin(fake, first_scale_set_id=7)
    async with fake, httpx.AsyncClient(timeout=10) as http:
        controller = Controller(fake, http)
        await controller.connect()
        yield fake, admin, controller


async def test_scale_set_create_find_update_delete(
    setup: tuple[FakeActions, ArcAdmin, Controller],
) -> None:
    fake, admin, arc = setup
    r = await arc.call("GET", "_apis/runtime/runnergroups/", groupName="Default")
    assert r.json() == {
        "count": 1,
        "value": [{"id": 1, "name": "Default", "size": 0, "isDefaultGroup": True}],
    }
    r = await arc.call("GET", "_apis/runtime/runnergroups/", groupName="gpu")
    assert r.json()["count"] == 0

    r = await arc.call("GET", "_apis/runtime/runnerscalesets", runnerGroupId="1", name="cpu")
    assert r.json() == {"count": 0, "value": []}
    body = {
        "name": "cpu",
        "runnerGroupId": 1,
        "labels": [{"type": "System", "name": "cpu"}, {"type": "System", "name": "linux"}],
        "RunnerSetting": {"disableUpdate": True},
    }
    r = await arc.call("POST", "_apis/runtime/runnerscalesets", body)
    assert r.status_code == 200, r.text
    created = r.json()
    assert created["id"] == 7
    assert created["runnerGroupName"] == "Default"
    assert [label["name"] for label in created["labels"]] == ["cpu", "linux"]
    assert created["runnerJitConfigUrl"].endswith("/runnerscalesets/7/generatejitconfig")
    assert fake.scale_sets[7].labels == ("cpu", "linux")
    again = await arc.call("POST", "_apis/runtime/runnerscalesets", body)
    assert again.status_code == 400
    assert "RunnerScaleSetExistsException" in again.json()["typeName"]

    r = await arc.call("GET", "_apis/runtime/runnerscalesets", runnerGroupId="1", name="cpu")
    assert [s["id"] for s in r.json()["value"]] == [7]
    r = await arc.call("PATCH", "_apis/runtime/runnerscalesets/7", {"name": "cpu-2"})
    assert r.json()["name"] == "cpu-2"
    r = await arc.call("GET", "_apis/runtime/runnerscalesets/7")  # FakeActions' own route
    assert r.json()["name"] == "cpu-2"

    r = await arc.call("DELETE", "_apis/runtime/runnerscalesets/7")
    assert r.status_code == 204
    assert admin.deleted == [7]
    r = await arc.call("DELETE", "_apis/runtime/runnerscalesets/7")
    assert r.status_code == 404
    r = await arc.call("GET", "_apis/runtime/runnerscalesets", runnerGroupId="1", name="cpu-2")
    assert r.json()["count"] == 0


async def test_jit_config_registers_the_runner_and_a_busy_one_cannot_be_removed(
    setup: tuple[FakeActions, ArcAdmin, Controller],
) -> None:
    fake, admin, arc = setup
    r = await arc.call("POST", "_apis/runtime/runnerscalesets", {"name": "cpu", "runnerGroupId": 1})
    scale_set_id = r.json()["id"]
    jit = f"_apis/runtime/runnerscalesets/{scale_set_id}/generatejitconfig"
    r = await arc.call("POST", jit, {"name": "cpu-abcde-runner-x1", "workFolder": "_work"})
    assert r.status_code == 200, r.text
    runner = r.json()["runner"]
    assert runner["name"] == "cpu-abcde-runner-x1"
    assert runner["runnerScaleSetId"] == scale_set_id
    assert json.loads(base64.b64decode(r.json()["encodedJITConfig"]))["id"] == runner["id"]
    assert fake.scale_sets[scale_set_id].runners == {"cpu-abcde-runner-x1": runner["id"]}
    r = await arc.call("POST", jit, {"name": "cpu-abcde-runner-x1", "workFolder": "_work"})
    assert "AgentExistsException" in r.json()["typeName"]

    agents = "_apis/distributedtask/pools/0/agents"
    r = await arc.call("GET", f"{agents}/{runner['id']}")
    assert r.json() == runner
    r = await arc.call("GET", agents, agentName="cpu-abcde-runner-x1")
    assert r.json() == {"count": 1, "value": [runner]}

    (job,) = fake.add_jobs(1)
    fake.assign(scale_set_id, None)
    assert fake.claim_job(scale_set_id, "cpu-abcde-runner-x1") is job
    r = await arc.call("DELETE", f"{agents}/{runner['id']}")
    assert r.status_code == 400
    assert "JobStillRunningException" in r.json()["typeName"]

    fake.complete_job(job.runner_request_id)  # ephemeral: the runner is gone with its job
    r = await arc.call("GET", f"{agents}/{runner['id']}")
    assert r.status_code == 404
    assert "AgentNotFoundException" in r.json()["typeName"]

    r = await arc.call("POST", jit, {"name": "idle", "workFolder": "_work"})
    idle = r.json()["runner"]["id"]
    r = await arc.call("DELETE", f"{agents}/{idle}")
    assert r.status_code == 204
    assert admin.removed_runners == [idle]
    assert fake.scale_sets[scale_set_id].runners == {}
    r = await arc.call("DELETE", f"{agents}/{idle}")  # the EphemeralRunner's finalizer, again
    assert r.status_code == 204


async def test_every_call_needs_the_admin_token(
    setup: tuple[FakeActions, ArcAdmin, Controller],
) -> None:
    _, _, arc = setup
    arc.headers = {"Authorization": f"Bearer {PAT}"}  # a GitHub token, not the admin JWT
    r = await arc.call("GET", "_apis/runtime/runnergroups/", groupName="Default")
    assert r.status_code == 401
