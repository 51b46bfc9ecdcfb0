"""The fake GitHub + Actions service, driven by a plain httpx client over loopback.

The tests share one deliberately independent protocol client (``Client``, not ours), so the
fake is checked against the service's wire format, not against the listener's reading of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest

from tests.unit.listener_fixtures import loop_clock
from tools.fake_actions import (
    MESSAGE_TYPE,
    ZERO_TIME,
    FakeActions,
    JobState,
    make_rsa_keypair,
)
from tools.fake_http import UTF8_BOM, Fault

HOLD = 0.3  # seconds a poll is held in these tests
PAT = "ghp_fake_pat"
API = {"api-version": "6.0-preview"}
ACCEPT = "application/json; api-version=6.0-preview"


@dataclass
class Session:
    scale_set_id: int
    body: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.body["sessionId"])

    @property
    def queue_url(self) -> str:
        return str(self.body["messageQueueUrl"])

    @property
    def token(self) -> str:
        return str(self.body["messageQueueAccessToken"])


class Client:
    """Just enough of a protocol client to exercise the fake (deliberately not ours)."""

    def __init__(self, fake: FakeActions, http: httpx.AsyncClient) -> None:
        self.fake = fake
        self.http = http
        self.service = ""
        self.admin = ""

    async def connect(self, credential: str = PAT, scope: str = "orgs/acme") -> None:
        r = await self.http.post(
            f"{self.fake.api_url}/{scope}/actions/runners/registration-token",
            headers={"Authorization": f"Bearer {credential}"},
        )
        assert r.status_code == 201, r.text
        r = await self.http.post(
            f"{self.fake.api_url}/actions/runner-registration",
            headers={"Authorization": f"RemoteAuth {r.json()['token']}"},
            json={"url": self.fake.configure_url(), "runner_event": "register"},
        )
        assert r.status_code == 200, r.text
        self.service, self.admin = r.json()["url"], r.json()["token"]

    def sets_url(self, scale_set_id: int, tail: str = "") -> str:
        base = self.service.rstrip("/")
        return f"{base}/_apis/runtime/runnerscalesets/{scale_set_id}{tail}"

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin}", "Content-Type": "application/json"}

    async def create_session(self, scale_set_id: int, owner: str = "pod-a") -> httpx.Response:
        return await self.http.post(
            self.sets_url(scale_set_id, "/sessions"),
            params=API,
            headers=self.admin_headers,
            json={"sessionId": "00000000-0000-0000-0000-000000000000", "ownerName": owner},
        )

    async def session(self, scale_set_id: int) -> Session:
        r = await self.create_session(scale_set_id)
        assert r.status_code == 200, r.text
        return Session(scale_set_id, r.json())

    async def poll(
        self, s: Session, capacity: int | None, last_id: int = 0, token: str | None = None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or s.token}", "Accept": ACCEPT}
        if capacity is not None:
            headers["X-ScaleSetMaxCapacity"] = str(capacity)
        url = httpx.URL(s.queue_url)
        if last_id > 0:
            url = url.copy_add_param("lastMessageId", str(last_id))
        return await self.http.get(url, headers=headers)

    async def ack(self, s: Session, message_id: int) -> httpx.Response:
        base = httpx.URL(s.queue_url)
        url = base.copy_with(path=f"{base.path}/{message_id}")
        return await self.http.delete(url, headers={"Authorization": f"Bearer {s.token}"})

    async def message(self, s: Session, capacity: int | None, last_id: int = 0) -> dict[str, Any]:
        r = await self.poll(s, capacity, last_id)
        assert r.status_code == 200, (r.status_code, r.text)
        envelope: dict[str, Any] = r.json()
        return envelope


def jobs_in(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    body = json.loads(envelope["body"])
    assert isinstance(body, list)
    return body


@pytest.fixture
async def fake() -> AsyncIterator[FakeActions]:
    async with FakeActions(poll_hold=HOLD, session_expiry=30, clock=loop_clock()) as f:
        f.add_scale_set(1, "linux")
        f.add_scale_set(2, "linux-b", labels=["linux"])
        yield f


@pytest.fixture
async def client(fake: FakeActions) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(timeout=10) as http:
        c = Client(fake, http)
        await c.connect()
        yield c


# ---------------------------------------------------------------------- auth chain


@pytest.mark.parametrize("scope", ["orgs/acme", "repos/acme/app", "enterprises/big"])
async def test_pat_registration_token_for_every_scope(client: Client, scope: str) -> None:
    r = await client.http.post(
        f"{client.fake.api_url}/{scope}/actions/runners/registration-token",
        headers={"Authorization": f"Bearer {PAT}"},
    )
    assert r.status_code == 201
    assert r.json()["token"]
    assert r.json()["expires_at"].endswith("Z")
    assert client.fake.registration_scopes[-1] == scope


async def test_bad_pat_and_wrong_scheme_are_401(client: Client) -> None:
    url = f"{client.fake.api_url}/orgs/acme/actions/runners/registration-token"
    assert (
        await client.http.post(url, headers={"Authorization": "Bearer nope"})
    ).status_code == 401
    assert (
        await client.http.post(url, headers={"Authorization": f"token {PAT}"})
    ).status_code == 401


async def test_runner_registration_returns_service_url_and_expiring_admin_jwt(
    client: Client,
) -> None:
    assert client.service == client.fake.service_url
    assert client.service.endswith("/")
    claims = jwt.decode(client.admin, options={"verify_signature": False})
    assert 3500 < claims["exp"] - time.time() <= 3601
    assert client.fake.registrations[-1]["runner_event"] == "register"


async def test_runner_registration_rejects_bad_token_and_body(fake: FakeActions) -> None:
    async with httpx.AsyncClient() as http:
        url = f"{fake.api_url}/actions/runner-registration"
        r = await http.post(url, headers={"Authorization": "RemoteAuth made-up"}, json={})
        assert r.status_code == 401
        reg = await http.post(
            f"{fake.api_url}/orgs/acme/actions/runners/registration-token",
            headers={"Authorization": f"Bearer {PAT}"},
        )
        auth = {"Authorization": f"RemoteAuth {reg.json()['token']}"}
        r = await http.post(url, headers=auth, json={"url": "x"})
        assert r.status_code == 422
        assert "runner_event" in r.json()["message"]


async def test_short_admin_token_ttl_and_expired_token_rejected() -> None:
    async with (
        FakeActions(admin_token_ttl=-5, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        claims = jwt.decode(c.admin, options={"verify_signature": False})
        assert claims["exp"] < time.time()
        r = await c.create_session(1)
        assert r.status_code == 401
        assert "expired" in r.json()["message"].lower()
        await c.connect()
        assert fake.admin_tokens_issued == 2


async def test_admin_endpoints_require_api_version(client: Client) -> None:
    r = await client.http.post(
        client.sets_url(1, "/sessions"), headers=client.admin_headers, json={"ownerName": "p"}
    )
    assert r.status_code == 400
    assert "api-version" in r.json()["message"]
    r = await client.http.get(client.sets_url(1), params=API, headers=client.admin_headers)
    assert r.status_code == 200
    assert [label["name"] for label in r.json()["labels"]] == ["linux"]


async def test_github_app_flow_verifies_jwt() -> None:
    private, public = make_rsa_keypair()
    other_private, _ = make_rsa_keypair()
    async with (
        FakeActions(
            app_id="4242", app_public_key=public, app_installation_id=77, clock=loop_clock()
        ) as fake,
        httpx.AsyncClient() as http,
    ):
        now = int(time.time())

        def app_jwt(iss: object, key: str = private) -> str:
            # Signed by hand: PyJWT refuses to encode a non-string iss, which is the point.
            claims = json.dumps({"iat": now - 60, "exp": now + 540, "iss": iss}).encode()
            return jwt.api_jws.encode(claims, key, algorithm="RS256")

        async def access(token: str, installation: int = 77) -> httpx.Response:
            return await http.post(
                f"{fake.api_url}/app/installations/{installation}/access_tokens",
                headers={"Authorization": f"Bearer {token}"},
            )

        assert (await access(app_jwt(4242))).status_code == 401  # iss must be a string
        assert (await access(app_jwt("999"))).status_code == 401
        assert (await access(app_jwt("4242", other_private))).status_code == 401
        assert (await access(app_jwt("4242"), installation=78)).status_code == 404
        r = await access(app_jwt("4242"))
        assert r.status_code == 201
        installation_token = r.json()["token"]
        c = Client(fake, http)
        await c.connect(credential=installation_token)
        assert c.admin
        assert fake.installation_tokens_issued == 1


# ---------------------------------------------------------------------- sessions


async def test_session_lifecycle_conflict_refresh_delete(client: Client) -> None:
    s = await client.session(1)
    assert s.body["statistics"]["totalAssignedJobs"] == 0
    assert s.body["runnerScaleSet"]["id"] == 1
    assert "sessionId=" in s.queue_url

    r = await client.create_session(1, owner="pod-b")
    assert r.status_code == 409
    assert "RunnerScaleSetSessionConflictException" in r.json()["typeName"]
    assert "pod-a" in r.json()["message"]

    r = await client.http.patch(
        client.sets_url(1, f"/sessions/{s.id}"), params=API, headers=client.admin_headers
    )
    assert r.status_code == 200
    refreshed = Session(1, r.json())
    assert refreshed.token != s.token
    assert (await client.poll(s, 1)).status_code == 401  # the old token is dead
    assert (await client.poll(refreshed, 1)).status_code == 202

    r = await client.http.delete(
        client.sets_url(1, f"/sessions/{s.id}"), params=API, headers=client.admin_headers
    )
    assert r.status_code == 204
    r = await client.http.delete(
        client.sets_url(1, f"/sessions/{s.id}"), params=API, headers=client.admin_headers
    )
    assert r.status_code == 400
    assert "RunnerScaleSetSessionExpiredException" in r.json()["typeName"]
    assert (await client.create_session(1)).status_code == 200


async def test_session_expires_without_polls_but_not_while_a_poll_is_held() -> None:
    async with (
        FakeActions(poll_hold=0.5, session_expiry=0.2, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        s = await c.session(1)
        held = asyncio.create_task(c.poll(s, 1))
        await asyncio.sleep(0.3)  # past the expiry, but a poll is in progress
        assert (await c.create_session(1)).status_code == 409
        assert (await held).status_code == 202
        await asyncio.sleep(0.3)  # now silent for longer than the expiry
        r = await c.create_session(1)
        assert r.status_code == 200
        assert len(fake.expired_sessions) == 1
        assert (await c.poll(s, 1)).status_code == 404


# ---------------------------------------------------------------------- long poll


async def test_empty_poll_is_held_then_202(client: Client) -> None:
    s = await client.session(1)
    now = loop_clock()
    started = now()
    r = await client.poll(s, 5)
    assert r.status_code == 202
    assert now() - started >= HOLD * 0.9
    assert client.fake.polls[-1].outcome == "empty"


async def test_held_poll_answers_as_soon_as_a_job_arrives() -> None:
    async with FakeActions(poll_hold=5, clock=loop_clock()) as fake, httpx.AsyncClient() as http:
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        s = await c.session(1)
        now = loop_clock()
        started = now()
        task = asyncio.create_task(c.message(s, 3))
        await fake.wait_until(lambda: bool(fake.polls))
        fake.add_jobs(1, labels=["linux"])
        envelope = await task
        assert now() - started < 2
        assert [j["messageType"] for j in jobs_in(envelope)] == ["JobAssigned"]


async def test_envelope_shape_and_job_fields(client: Client) -> None:
    (job,) = client.fake.add_jobs(
        1, labels=["linux"], display_name="build", event_name="pull_request"
    )
    s = await client.session(1)
    envelope = await client.message(s, 10)
    assert set(envelope) == {"messageId", "messageType", "body", "statistics"}
    assert envelope["messageType"] == MESSAGE_TYPE
    assert isinstance(envelope["body"], str)
    assert set(envelope["statistics"]) == {
        "totalAvailableJobs",
        "totalAcquiredJobs",
        "totalAssignedJobs",
        "totalRunningJobs",
        "totalRegisteredRunners",
        "totalBusyRunners",
        "totalIdleRunners",
    }
    (msg,) = jobs_in(envelope)
    assert msg["runnerRequestId"] == job.runner_request_id
    assert msg["jobId"] == job.job_id
    assert isinstance(msg["jobId"], str)
    assert msg["ownerName"] == "acme"
    assert msg["repositoryName"] == "app"
    assert msg["jobWorkflowRef"] == "acme/app/.github/workflows/ci.yml@refs/heads/main"
    assert msg["jobDisplayName"] == "build"
    assert msg["eventName"] == "pull_request"
    assert msg["runnerAssignTime"] == ZERO_TIME
    assert msg["scaleSetAssignTime"] != ZERO_TIME
    assert len(msg["queueTime"].split(".")[1]) == 8  # 7 digits + Z, as .NET writes


async def test_at_most_50_job_messages_per_envelope(client: Client) -> None:
    client.fake.add_jobs(60)
    s = await client.session(1)
    first = await client.message(s, None)  # no header: no limit
    second = await client.message(s, None, last_id=first["messageId"])
    assert (len(jobs_in(first)), len(jobs_in(second))) == (50, 10)
    assert second["statistics"]["totalAssignedJobs"] == 60


async def test_unacked_messages_are_redelivered(client: Client) -> None:
    client.fake.add_jobs(1)
    s = await client.session(1)
    first = await client.message(s, 1)
    again = await client.message(s, 1)  # lastMessageId 0: the first unacked message
    assert again == first
    assert (await client.poll(s, 1, last_id=first["messageId"])).status_code == 202
    assert (await client.ack(s, first["messageId"])).status_code == 204
    assert client.fake.acks == [(1, first["messageId"])]
    assert (await client.poll(s, 1)).status_code == 202


async def test_every_poll_records_its_capacity_header(client: Client) -> None:
    s = await client.session(1)
    for value in (3, 0, None):
        await client.poll(s, value)
    assert [c.value for c in client.fake.capacity_history(1)] == [3, 0, None]
    assert client.fake.capacity_history(2) == []


async def test_new_poll_ends_the_older_held_poll(client: Client) -> None:
    s = await client.session(1)
    old = asyncio.create_task(client.poll(s, 2))
    await client.fake.wait_until(lambda: len(client.fake.polls) == 1)
    new = asyncio.create_task(client.poll(s, 5))
    assert (await old).status_code == 202
    assert (await new).status_code == 202
    assert [p.outcome for p in client.fake.polls] == ["superseded", "empty"]
    assert [c.value for c in client.fake.capacity_history(1)] == [2, 5]


async def test_abandoned_poll_is_seen_as_disconnected(client: Client) -> None:
    s = await client.session(1)
    with pytest.raises(httpx.ReadTimeout):
        await client.http.get(
            s.queue_url,
            headers={"Authorization": f"Bearer {s.token}", "Accept": ACCEPT},
            timeout=0.05,
        )
    await client.fake.wait_until(lambda: client.fake.polls[-1].outcome != "holding")
    assert client.fake.polls[-1].outcome == "disconnected"


# ---------------------------------------------------------------------- shared queue


async def test_capacity_limits_assignment_across_two_scale_sets(client: Client) -> None:
    fake = client.fake
    fake.add_jobs(10, labels=["linux"])
    s1, s2 = await client.session(1), await client.session(2)
    m1 = await client.message(s1, 2)
    m2 = await client.message(s2, 3)
    assert len(jobs_in(m1)) == 2
    assert m1["statistics"]["totalAssignedJobs"] == 2
    assert len(jobs_in(m2)) == 3
    assert m2["statistics"]["totalAssignedJobs"] == 3
    assert len(fake.queued()) == 5
    await client.ack(s1, m1["messageId"])
    # Still at capacity: nothing more for set 1 until a job finishes.
    assert (await client.poll(s1, 2, last_id=m1["messageId"])).status_code == 202
    # A higher header makes room.
    m1b = await client.message(s1, 4, last_id=m1["messageId"])
    assert len(jobs_in(m1b)) == 2
    assert fake.counters(1)["assigned"] == 4
    assert fake.counters(2)["assigned"] == 3
    # Capacity 0 assigns nothing at all.
    assert (await client.poll(s2, 0, last_id=m2["messageId"])).status_code == 202
    assert len(fake.queued()) == 3


async def test_completed_job_frees_capacity(client: Client) -> None:
    fake = client.fake
    fake.add_jobs(2)
    s = await client.session(1)
    m = await client.message(s, 1)
    (assigned,) = jobs_in(m)
    job = fake.claim_job(1, "runner-1")
    assert job is not None
    assert job.runner_request_id == assigned["runnerRequestId"]
    fake.complete_job(job.job_id)
    m2 = await client.message(s, 1, last_id=m["messageId"])
    types = [j["messageType"] for j in jobs_in(m2)]
    assert types == ["JobStarted", "JobCompleted", "JobAssigned"]
    assert m2["statistics"]["totalAssignedJobs"] == 1


async def test_labels_route_jobs_to_matching_sets_only(client: Client) -> None:
    fake = client.fake
    fake.add_scale_set(3, "gpu")
    fake.add_jobs(2, labels=["gpu"])
    s1, s3 = await client.session(1), await client.session(3)
    assert (await client.poll(s1, 10)).status_code == 202
    assert len(jobs_in(await client.message(s3, 10))) == 2


# ---------------------------------------------------------------------- runner side


async def test_claim_start_complete_and_stranded_accounting() -> None:
    async with (
        FakeActions(poll_hold=HOLD, strand_grace=0.5, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        fake.add_jobs(3)
        s = await c.session(1)
        first = await c.message(s, 3)
        await c.ack(s, first["messageId"])
        a = fake.claim_job(1, "runner-a")
        b = fake.claim_job(1, "runner-b")
        d = fake.claim_job(1, "runner-d")
        assert a
        assert b
        assert d
        assert fake.claim_job(1, "runner-e") is None
        fake.mark_workflow_started(a.job_id)
        fake.report_stranded(d.runner_request_id)
        assert [j.job_id for j in fake.stranded(1)] == [d.job_id]
        await asyncio.sleep(0.6)  # b's workflow never started within the grace
        assert {j.job_id for j in fake.stranded()} == {b.job_id, d.job_id}

        fake.complete_job(a.job_id, result="failed")
        m = await c.message(s, 3, last_id=first["messageId"])
        started = [j for j in jobs_in(m) if j["messageType"] == "JobStarted"]
        completed = [j for j in jobs_in(m) if j["messageType"] == "JobCompleted"]
        assert [j["runnerName"] for j in started] == ["runner-a", "runner-b", "runner-d"]
        assert all(j["runnerId"] > 0 and j["runnerAssignTime"] != ZERO_TIME for j in started)
        assert completed[0]["result"] == "failed"
        assert completed[0]["finishTime"] != ZERO_TIME
        assert m["statistics"]["totalRunningJobs"] == 2
        assert m["statistics"]["totalBusyRunners"] == 2
        counts = fake.counters(1)
        assert (counts["assigned"], counts["started"], counts["completed"]) == (3, 3, 1)
        assert counts["stranded"] == 2


async def test_unclaimed_jobs_are_requeued_as_canceled_at_most_max_times() -> None:
    async with (
        FakeActions(poll_hold=HOLD, requeue_after=0.1, max_requeues=1, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        fake.add_scale_set(2, "linux-b", labels=["linux"])
        c = Client(fake, http)
        await c.connect()
        (job,) = fake.add_jobs(1, labels=["linux"])
        s1, s2 = await c.session(1), await c.session(2)
        m1 = await c.message(s1, 1)
        await c.ack(s1, m1["messageId"])
        await fake.wait_until(lambda: job.state is JobState.QUEUED)
        m1b = await c.message(s1, 0, last_id=m1["messageId"])  # capacity 0: just the cancel
        (cancel,) = jobs_in(m1b)
        assert cancel["messageType"] == "JobCompleted"
        assert cancel["result"] == "canceled"
        assert cancel["runnerAssignTime"] == ZERO_TIME
        m2 = await c.message(s2, 1)
        assert jobs_in(m2)[0]["messageType"] == "JobAssigned"
        await asyncio.sleep(0.3)
        assert job.state is JobState.ASSIGNED
        assert job.scale_set_id == 2
        assert fake.counters(1)["requeued"] == 1
        assert job.requeues == 1


# ---------------------------------------------------------------------- GHES acquire flow


async def test_ghes_mode_offers_jobs_that_must_be_acquired() -> None:
    async with (
        FakeActions(poll_hold=HOLD, ghes_mode=True, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        jobs = fake.add_jobs(2)
        s = await c.session(1)
        m = await c.message(s, 5)
        available = jobs_in(m)
        assert {j["messageType"] for j in available} == {"JobAvailable"}
        assert all("acquirejobs" in j["acquireJobUrl"] for j in available)
        assert m["statistics"]["totalAvailableJobs"] == 2
        assert fake.claim_job(1, "r1") is None  # not acquired yet
        ids = [j["runnerRequestId"] for j in available]
        url = c.sets_url(1, "/acquirejobs")
        r = await c.http.post(url, params=API, headers=c.admin_headers, json=ids)
        assert r.status_code == 401  # needs the message-queue token, not the admin token
        r = await c.http.post(
            url, params=API, headers={"Authorization": f"Bearer {s.token}"}, json=[ids[0], 99999]
        )
        assert r.json() == {"count": 1, "value": [ids[0]]}
        assert jobs[0].state is JobState.ASSIGNED
        assert jobs[1].state is JobState.AVAILABLE
        await c.ack(s, m["messageId"])
        m2 = await c.message(s, 5, last_id=m["messageId"])
        assert [j["messageType"] for j in jobs_in(m2)] == ["JobAssigned"]
        assert m2["statistics"]["totalAssignedJobs"] == 1
        assert fake.claim_job(1, "r1") is jobs[0]


# ---------------------------------------------------------------------- broker mode


@pytest.fixture
async def broker() -> AsyncIterator[Client]:
    async with (
        FakeActions(poll_hold=HOLD, broker=True, session_expiry=30, clock=loop_clock()) as fake,
        httpx.AsyncClient() as http,
    ):
        fake.add_scale_set(1, "linux")
        c = Client(fake, http)
        await c.connect()
        yield c


async def test_broker_urls_are_the_live_services(broker: Client) -> None:
    assert broker.service == f"{broker.fake.url}/rest"
    s = await broker.session(1)
    assert s.queue_url == f"{broker.fake.url}/rest/scalesets/message"  # no query string


async def test_broker_assigns_directly_up_to_the_header_with_request_id_zero(
    broker: Client,
) -> None:
    jobs = broker.fake.add_jobs(3)
    s = await broker.session(1)
    m = await broker.message(s, 2)
    assigned = jobs_in(m)
    assert [j["messageType"] for j in assigned] == ["JobAssigned", "JobAssigned"]
    assert {j["runnerRequestId"] for j in assigned} == {0}
    assert [j["jobId"] for j in assigned] == [jobs[0].job_id, jobs[1].job_id]
    assert all(j["scaleSetAssignTime"] != ZERO_TIME for j in assigned)
    assert m["statistics"]["totalAssignedJobs"] == 2
    assert jobs[2].state is JobState.QUEUED  # the header is the only gate


async def test_broker_has_no_acquire_endpoint(broker: Client) -> None:
    s = await broker.session(1)
    r = await broker.http.post(
        broker.sets_url(1, "/acquirejobs"),
        params=API,
        headers={"Authorization": f"Bearer {s.token}"},
        json=[1],
    )
    assert (r.status_code, r.text) == (404, "404 page not found")


async def test_broker_redelivers_an_unacked_message_with_the_same_id(broker: Client) -> None:
    broker.fake.add_jobs(1)
    s = await broker.session(1)
    first = await broker.message(s, 1)
    again = await broker.message(s, 1)  # lastMessageId 0, nothing acked
    assert again["messageId"] == first["messageId"]
    assert jobs_in(again) == jobs_in(first)
    assert (await broker.ack(s, first["messageId"])).status_code == 204
    r = await broker.poll(s, 1)
    assert r.status_code == 202


async def test_broker_queue_knows_the_session_by_its_token(broker: Client) -> None:
    s = await broker.session(1)
    assert (await broker.poll(s, 1, token="mq_not_a_token")).status_code == 401
    broker.fake.expire_session(1)
    assert (await broker.poll(s, 1)).status_code == 404
    s2 = await broker.session(1)
    broker.fake.evict_session(1)
    assert (await broker.poll(s2, 1)).status_code == 401


async def test_runner_group_settings_for_the_github_rest_api(client: Client) -> None:
    url = f"{client.fake.api_url}/orgs/acme/actions/runner-groups/1"
    r = await client.http.get(url, headers={"Authorization": f"Bearer {PAT}"})
    assert r.json()["allows_public_repositories"] is True
    client.fake.runner_group_public = False
    r = await client.http.get(url, headers={"Authorization": f"Bearer {PAT}"})
    assert (r.json()["name"], r.json()["allows_public_repositories"]) == ("Default", False)
    assert (await client.http.get(url)).status_code == 401
    missing = f"{client.fake.api_url}/orgs/acme/actions/runner-groups/9"
    assert (
        await client.http.get(missing, headers={"Authorization": f"Bearer {PAT}"})
    ).status_code == 404


def test_broker_and_ghes_acquire_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="broker"):
        FakeActions(broker=True, ghes_mode=True)


# ---------------------------------------------------------------------- faults


async def test_server_errors_then_recovery(client: Client) -> None:
    client.fake.inject("session_create", Fault.server_error(503), times=2)
    assert (await client.create_session(1)).status_code == 503
    assert (await client.create_session(1)).status_code == 503
    assert (await client.create_session(1)).status_code == 200
    assert [r.fault for r in client.fake.requests_for("session_create")] == ["status"] * 2 + [None]


async def test_rate_limit_carries_retry_after(client: Client) -> None:
    client.fake.inject("registration_token", Fault.rate_limited(7))
    r = await client.http.post(
        f"{client.fake.api_url}/orgs/acme/actions/runners/registration-token",
        headers={"Authorization": f"Bearer {PAT}"},
    )
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "7"


async def test_expired_queue_token_forces_refresh(client: Client) -> None:
    s = await client.session(1)
    client.fake.expire_message_queue_token(1)
    assert (await client.poll(s, 1)).status_code == 401
    assert (await client.ack(s, 1)).status_code == 401
    r = await client.http.patch(
        client.sets_url(1, f"/sessions/{s.id}"), params=API, headers=client.admin_headers
    )
    assert (await client.poll(Session(1, r.json()), 1)).status_code == 202


async def test_one_shot_401_and_409(client: Client) -> None:
    client.fake.inject_session_conflict()
    r = await client.create_session(1)
    assert r.status_code == 409
    assert "SessionConflict" in r.json()["typeName"]
    s = await client.session(1)
    client.fake.inject("get_message", Fault.unauthorized())
    assert (await client.poll(s, 1)).status_code == 401
    assert (await client.poll(s, 1)).status_code == 202


async def test_slow_response(client: Client) -> None:
    client.fake.inject("get_scale_set", Fault.slow(0.3, before_handler=False))
    now = loop_clock()
    started = now()
    r = await client.http.get(client.sets_url(1), params=API, headers=client.admin_headers)
    assert r.status_code == 200
    assert now() - started >= 0.27


async def test_dropped_and_truncated_connections(client: Client) -> None:
    s = await client.session(1)
    client.fake.add_jobs(1)
    client.fake.inject("get_message", Fault.drop())
    with pytest.raises(httpx.RemoteProtocolError):
        await client.poll(s, 1)
    assert client.fake.polls == []  # the handler never ran
    client.fake.inject("get_message", Fault.truncate())
    with pytest.raises(httpx.RemoteProtocolError):
        await client.poll(s, 1)
    # The truncated answer was produced (and lost); it is redelivered, unacked.
    assert len(jobs_in(await client.message(s, 1))) == 1


async def test_bom_and_malformed_bodies(client: Client) -> None:
    s = await client.session(1)
    client.fake.add_jobs(1)
    client.fake.inject("get_message", Fault.bom())
    r = await client.poll(s, 1)
    assert r.content.startswith(UTF8_BOM)
    assert json.loads(r.content.decode("utf-8-sig"))["messageType"] == MESSAGE_TYPE
    client.fake.inject("get_message", Fault.malformed())
    r = await client.poll(s, 1)
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.content)


def test_unknown_route_cannot_be_faulted() -> None:
    with pytest.raises(ValueError, match="unknown route"):
        FakeActions().inject("nope", Fault.drop())


# ---------------------------------------------------------------------- recording and control


async def test_requests_are_recorded_with_selected_headers(client: Client) -> None:
    s = await client.session(1)
    await client.poll(s, 4, last_id=0)
    get = client.fake.requests_for("get_message")[-1]
    assert get.method == "GET"
    assert get.status == 202
    assert get.headers["X-ScaleSetMaxCapacity"] == "4"
    assert get.headers["Accept"] == ACCEPT
    assert get.auth_scheme == "Bearer"
    assert get.auth_token == s.token
    assert get.query == {"sessionId": s.id}
    create = client.fake.requests_for("session_create")[-1]
    assert create.query == API
    assert json.loads(create.body)["ownerName"] == "pod-a"
    routes = [r.route for r in client.fake.requests]
    assert routes[:3] == ["registration_token", "runner_registration", "session_create"]


async def test_control_api_for_other_processes(fake: FakeActions) -> None:
    async with httpx.AsyncClient(base_url=fake.url) as http:
        r = await http.post("/_fake/jobs", json={"count": 2, "labels": ["linux"]})
        assert r.status_code == 200
        assert len(r.json()) == 2
        state = (await http.get("/_fake/state")).json()
        assert [j["state"] for j in state["jobs"]] == ["queued", "queued"]
        r = await http.post("/_fake/bogus", json={})
        assert r.status_code == 400
        assert "bogus" in r.json()["error"]
    assert fake.requests == []  # control traffic is not traffic under test


async def test_stop_releases_held_polls_promptly() -> None:
    fake = FakeActions(poll_hold=30, clock=loop_clock())
    await fake.start()
    fake.add_scale_set(1, "linux")
    async with httpx.AsyncClient(timeout=10) as http:
        c = Client(fake, http)
        await c.connect()
        s = await c.session(1)
        task = asyncio.create_task(c.poll(s, 1))
        await fake.wait_until(lambda: bool(fake.polls))
        now = loop_clock()
        started = now()
        await fake.stop()
        assert (await task).status_code == 202
        assert now() - started < 3


async def test_scripted_polls_are_answered_in_order_then_normal_polling_resumes(
    fake: FakeActions, client: Client
) -> None:
    from tools.fake_actions import ScriptedPoll

    s = await client.session(1)
    envelope = {"messageId": 9, "messageType": MESSAGE_TYPE, "body": "", "statistics": {}}
    fake.script_polls(1, [ScriptedPoll(None), ScriptedPoll(envelope), ScriptedPoll(b"{oops")])
    assert fake.script_left(1) == 3
    assert (await client.poll(s, 5)).status_code == 202
    assert (await client.message(s, 5))["messageId"] == 9
    raw = await client.poll(s, 5)
    assert (raw.status_code, raw.content) == (200, b"{oops")
    assert fake.script_left(1) == 0
    now = loop_clock()
    started = now()
    assert (await client.poll(s, 5)).status_code == 202  # held, then nothing: normal again
    assert now() - started >= HOLD * 0.9


async def test_a_mutate_fault_rewrites_the_handlers_json(fake: FakeActions, client: Client) -> None:
    fake.inject("session_create", Fault.mutate(lambda body: {**body, "statistics": None}))
    assert fake.faults_pending("session_create") == 1
    r = await client.create_session(1)
    assert r.status_code == 200
    assert r.json()["statistics"] is None
    assert r.json()["sessionId"]  # the rest is the handler's real answer
    assert fake.faults_pending("session_create") == 0


async def test_a_seeded_fake_spreads_jobs_over_scale_sets_with_room() -> None:
    # Without a seed the first scale set to assign takes every job; with one, each job goes to
    # the first scale set of its own seeded order that had room at its last poll.
    fake = FakeActions(assign_seed=3, clock=loop_clock())
    fake.add_scale_set(1, "a", ["linux"])
    fake.add_scale_set(2, "b", ["linux"])
    # Both listeners hold a session (what _first_choice asks before counting a scale set in).
    fake._live_session = lambda scale_set_id: object()  # type: ignore[method-assign,assignment,return-value]
    jobs = fake.add_jobs(40, labels=["linux"])
    fake.assign(2, 100)  # b polls: it learns nothing of a yet, a never polled (no room known)
    first = {j.scale_set_id for j in jobs}
    assert first == {2}
    again = fake.add_jobs(40, labels=["linux"])
    fake.assign(1, 100)
    fake.assign(2, 100)
    assert 5 < sum(j.scale_set_id == 1 for j in again) < 35
    assert all(j.scale_set_id in (1, 2) for j in again)
