"""The HUD demand source: once per read alone, twice with demand sharding (respx)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest
import respx

from capacity.demand import HudDemand, Reading, build_reader
from capacity.model import DemandResult
from capacity.settings import CapacitySettings, load_capacity_settings

URL = "https://hud.test/api/clickhouse/queued_jobs_aggregate"
LABELS = ("linux.2xlarge",)


def settings(**env: str) -> CapacitySettings:
    return load_capacity_settings(
        {"CAPACITY_HUD__ENABLED": "true", "CAPACITY_HUD__URL": URL, "HUD_API_TOKEN": "t0k"} | env
    )


SHARDED = {"CAPACITY_DEMAND__CLUSTER_COUNT": "2", "CAPACITY_DEMAND__AGED_AFTER": "10m"}


def rows(queued: int) -> list[dict[str, object]]:
    return [
        {
            "runner_label": LABELS[0],
            "org": "pytorch",
            "repo": "pytorch",
            "num_queued_jobs": queued,
            "min_queue_time_minutes": 1,
            "max_queue_time_minutes": 30,
        }
    ]


def threshold(request: httpx.Request) -> int:
    return int(json.loads(request.url.params["parameters"])["queuedThresholdMinutes"])


@pytest.fixture
def hud() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


def answer_by_threshold(
    by_threshold: dict[int, httpx.Response],
) -> Callable[[httpx.Request], httpx.Response]:
    def respond(request: httpx.Request) -> httpx.Response:
        return by_threshold[threshold(request)]

    return respond


async def read(cfg: CapacitySettings) -> Reading:
    reader = build_reader(cfg, LABELS)
    assert isinstance(reader, HudDemand)
    try:
        return await reader.read()
    finally:
        await reader.aclose()


async def test_one_peer_asks_once(hud: respx.MockRouter) -> None:
    route = hud.get(URL).respond(json=rows(7))
    reading = await read(settings())
    assert route.call_count == 1
    assert (reading.outcome.queued, reading.outcome.aged) == (7, None)


async def test_peers_ask_for_the_total_and_the_aged_part(hud: respx.MockRouter) -> None:
    route = hud.get(URL).mock(
        side_effect=answer_by_threshold(
            {0: httpx.Response(200, json=rows(9)), 10: httpx.Response(200, json=rows(2))}
        )
    )
    reading = await read(settings(**SHARDED))
    assert sorted(threshold(call.request) for call in route.calls) == [0, 10]
    outcome = reading.outcome
    assert (outcome.result, outcome.queued, outcome.aged) == (DemandResult.OK, 9, 2)
    assert len(reading.requests) == 2


async def test_a_configured_threshold_above_the_age_wins(hud: respx.MockRouter) -> None:
    route = hud.get(URL).respond(json=rows(1))
    await read(settings(**SHARDED, CAPACITY_HUD__PARAMETERS__QUEUED_THRESHOLD_MINUTES="20"))
    assert sorted(threshold(call.request) for call in route.calls) == [20, 20]


@pytest.mark.parametrize("failing", [0, 10])
async def test_either_request_failing_fails_the_read(hud: respx.MockRouter, failing: int) -> None:
    """A total without its aged part would drop the failover; the policy holds the last good
    pair of figures instead."""
    good = 10 if failing == 0 else 0
    hud.get(URL).mock(
        side_effect=answer_by_threshold(
            {failing: httpx.Response(503), good: httpx.Response(200, json=rows(4))}
        )
    )
    reading = await read(settings(**SHARDED))
    outcome = reading.outcome
    assert (outcome.result, outcome.queued, outcome.aged) == (DemandResult.HTTP_ERROR, None, None)
    results = sorted(r.result for r in reading.requests)
    assert results == sorted([DemandResult.OK, DemandResult.HTTP_ERROR])


def test_github_source_needs_the_listeners_access() -> None:
    cfg = load_capacity_settings({"CAPACITY_DEMAND__SOURCE": "github"})
    with pytest.raises(ValueError, match="needs the listener's GitHub credentials"):
        build_reader(cfg, LABELS)
    assert build_reader(load_capacity_settings({}), LABELS) is None


async def test_hud_is_read_with_the_client_it_is_given_and_does_not_close_it() -> None:
    """The composition root passes a client built with the listener's proxy rules; HUD reads
    go through it (never a client of HUD's own) and never follow a redirect."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=rows(3))

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(handler), follow_redirects=True
    ) as given:
        reader = build_reader(settings(), LABELS, hud_client=given)
        assert isinstance(reader, HudDemand)
        reading = await reader.read()
        await reader.aclose()
        assert reading.outcome.queued == 3
        assert len(seen) == 1
        assert not given.is_closed


async def test_a_redirect_from_hud_is_not_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "elsewhere.example":
            return httpx.Response(200, json=rows(5))
        return httpx.Response(302, headers={"Location": "https://elsewhere.example/q"})

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(handler), follow_redirects=True
    ) as given:
        reader = build_reader(settings(), LABELS, hud_client=given)
        assert reader is not None
        reading = await reader.read()
        assert reading.outcome.result == DemandResult.HTTP_ERROR
