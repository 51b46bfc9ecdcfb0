"""HUD client over faked HTTP (respx)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import respx

from capacity.hud import HudClient, build_parameters, parse_rows, sum_queued
from capacity.model import DemandOutcome, DemandResult
from capacity.settings import load_capacity_settings
from capacity.settings_demand import HudSettings

URL = "https://hud.test/api/clickhouse/queued_jobs_aggregate"
TOKEN = "tok-9f8e7d6c5b4a"
LABELS = ("linux.2xlarge", "linux.4xlarge")


def hud_settings(**env: str) -> HudSettings:
    base = {
        "CAPACITY_HUD__ENABLED": "true",
        "CAPACITY_HUD__URL": URL,
        "CAPACITY_HUD__PARAMETERS__ORGS": '["pytorch", "", "  "]',
        "CAPACITY_HUD__PARAMETERS__QUEUED_THRESHOLD_MINUTES": "5",
        "HUD_API_TOKEN": TOKEN,
    }
    return load_capacity_settings(base | env).hud


def row(
    label: str, queued: object, org: str = "pytorch", repo: str = "pytorch"
) -> dict[str, object]:
    return {
        "runner_label": label,
        "org": org,
        "repo": repo,
        "num_queued_jobs": queued,
        "min_queue_time_minutes": 1,
        "max_queue_time_minutes": 42.5,
    }


@pytest.fixture
def hud() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


async def fetch(settings: HudSettings | None = None) -> DemandOutcome:
    # The loop's clock: the duration is measured in the (virtual) time the deadline runs in.
    clock = asyncio.get_running_loop().time
    async with HudClient(settings or hud_settings(), LABELS, clock=clock) as client:
        return await client.fetch()


async def test_rows_are_summed_per_label_and_other_labels_ignored(
    hud: respx.MockRouter,
) -> None:
    route = hud.get(URL).respond(
        200,
        json=[
            row("linux.2xlarge", 3, repo="pytorch"),
            row("linux.2xlarge", "4", repo="vision"),  # quoted 64-bit integer
            row("linux.4xlarge", 1, org="meta-pytorch"),
            row("linux.g5.4xlarge.nvidia.gpu", 50),
            row("N/A", 7),
        ],
    )
    outcome = await fetch()
    assert outcome.result == DemandResult.OK
    assert outcome.queued == 8
    assert outcome.rows == 3
    assert outcome.duration >= 0
    request = route.calls.last.request
    assert request.headers["x-hud-internal-bot"] == TOKEN
    parameters = json.loads(request.url.params["parameters"])
    assert parameters == {
        "queuedThresholdMinutes": 5,
        "maxAgeDays": 1,
        "orgs": ["pytorch"],  # empty org names trimmed: [""] would mean every org
        "repo": "",
        "runnerLabels": list(LABELS),
    }


async def test_empty_answer_is_zero_queued(hud: respx.MockRouter) -> None:
    hud.get(URL).respond(200, json=[])
    outcome = await fetch()
    assert (outcome.result, outcome.queued, outcome.rows) == (DemandResult.OK, 0, 0)


async def test_no_token_means_no_header(hud: respx.MockRouter) -> None:
    route = hud.get(URL).respond(200, json=[])
    settings = hud_settings().model_copy(update={"token": None})
    await fetch(settings)
    assert "x-hud-internal-bot" not in route.calls.last.request.headers


async def test_transport_timeout(hud: respx.MockRouter) -> None:
    hud.get(URL).mock(side_effect=httpx.ReadTimeout("read timed out"))
    outcome = await fetch()
    assert outcome.result == DemandResult.TIMEOUT
    assert outcome.queued is None


async def test_whole_exchange_deadline(hud: respx.MockRouter) -> None:
    """A server that trickles its body within each read timeout still hits the deadline."""

    async def trickle() -> AsyncIterator[bytes]:
        yield b"["
        for _ in range(50):
            await asyncio.sleep(0.05)
            yield b" "
        yield b"]"

    hud.get(URL).mock(return_value=httpx.Response(200, content=trickle()))
    outcome = await fetch(hud_settings(CAPACITY_HUD__TIMEOUT="300ms"))
    assert outcome.result == DemandResult.TIMEOUT
    assert outcome.duration < 2.0
    assert outcome.detail == "no answer within 0.3s"


@pytest.mark.parametrize("status", [500, 502, 503, 401, 404])
async def test_http_errors(hud: respx.MockRouter, status: int) -> None:
    hud.get(URL).respond(status, text="oops")
    outcome = await fetch()
    assert outcome.result == DemandResult.HTTP_ERROR
    assert outcome.detail == f"HTTP {status}"
    assert outcome.queued is None


async def test_connection_error_never_shows_the_token(hud: respx.MockRouter) -> None:
    hud.get(URL).mock(side_effect=httpx.ConnectError(f"refused while sending {TOKEN}"))
    outcome = await fetch()
    assert outcome.result == DemandResult.HTTP_ERROR
    assert TOKEN not in outcome.detail
    assert TOKEN not in repr(outcome)
    assert outcome.detail.startswith("ConnectError: refused")


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        pytest.param(b"<html>bot challenge</html>", "not JSON (JSONDecodeError)", id="html"),
        pytest.param(b"\xff\xfe garbage", "not JSON (JSONDecodeError)", id="binary"),
        pytest.param(
            b'{"rows": []}',
            "unexpected rows: body: Input should be a valid list",
            id="object-not-list",
        ),
        pytest.param(
            json.dumps([{"runner_label": "x"}]).encode(),
            "unexpected rows: 0.org: Field required",
            id="missing-fields",
        ),
        pytest.param(
            json.dumps([row("linux.2xlarge", -1)]).encode(),
            "unexpected rows: 0.num_queued_jobs: Input should be greater than or equal to 0",
            id="negative-count",
        ),
        pytest.param(
            json.dumps([row("linux.2xlarge", "many")]).encode(),
            "unexpected rows: 0.num_queued_jobs: Input should be a valid integer, "
            "unable to parse string as an integer",
            id="count-not-a-number",
        ),
    ],
)
async def test_bad_responses(hud: respx.MockRouter, body: bytes, detail: str) -> None:
    hud.get(URL).respond(200, content=body)
    outcome = await fetch()
    assert outcome.result == DemandResult.BAD_RESPONSE
    assert outcome.detail == detail
    assert outcome.queued is None


async def test_oversized_declared_body(hud: respx.MockRouter) -> None:
    hud.get(URL).respond(200, json=[row("linux.2xlarge", 1)] * 100)
    outcome = await fetch(hud_settings(CAPACITY_HUD__MAX_RESPONSE_BYTES="1000"))
    assert outcome.result == DemandResult.TOO_LARGE
    assert outcome.detail.startswith("response too large (declared ")


async def test_oversized_streamed_body_is_abandoned(hud: respx.MockRouter) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b"["
        while True:
            sent += 1
            yield json.dumps(row("linux.2xlarge", 1)).encode() + b","

    hud.get(URL).mock(return_value=httpx.Response(200, content=endless()))
    outcome = await fetch(hud_settings(CAPACITY_HUD__MAX_RESPONSE_BYTES="5000"))
    assert outcome.result == DemandResult.TOO_LARGE
    assert outcome.detail == "response too large (over 5000 bytes)"
    assert sent < 100  # stopped reading at the cap


def test_build_parameters_drops_empty_orgs_entirely() -> None:
    settings = hud_settings(CAPACITY_HUD__PARAMETERS__ORGS='[""]')
    body = build_parameters(settings.parameters, ["a", "a", "", "b"])
    assert "orgs" not in body
    assert body["runnerLabels"] == ["a", "b"]


def test_sum_queued_counts_repeated_labels() -> None:
    rows = parse_rows(json.dumps([row("a", 2), row("a", 3), row("b", 4), row("c", 9)]).encode())
    assert sum_queued(rows, ["a", "b"]) == (9, 3)
    assert sum_queued(rows, []) == (0, 0)
