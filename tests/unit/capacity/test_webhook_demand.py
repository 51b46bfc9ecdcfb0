"""The webhook demand source (capacity/webhook_demand.py) and its settings: a read is one GET
of the receiver; anything but its answer is a failed read, never "nothing queued"."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from base.http.client import plain_client
from capacity.demand import build_reader
from capacity.model import DemandResult
from capacity.settings import CapacitySettings, load_capacity_settings, to_params
from capacity.settings_demand import DemandSettings, WebhookDemandSettings
from capacity.settings_problems import CapacitySettingsError
from capacity.webhook_demand import PATH, WebhookDemand

URL = "http://receiver.arc-systems.svc:8081"
LABELS = ["self-hosted", "linux"]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    http = plain_client(2.0)
    yield http
    await http.aclose()


def reader(client: httpx.AsyncClient, demand: DemandSettings | None = None) -> WebhookDemand:
    return WebhookDemand(
        WebhookDemandSettings(url=URL), LABELS, demand or DemandSettings(), client=client
    )


@respx.mock
async def test_a_read_asks_for_the_labels_and_takes_the_count(client: httpx.AsyncClient) -> None:
    route = respx.get(URL + PATH).mock(
        return_value=httpx.Response(200, json={"queued": 4, "aged": 1})
    )
    reading = await reader(client).read()
    assert reading.source == "webhook"
    assert (reading.outcome.result, reading.outcome.queued) == (DemandResult.OK, 4)
    assert reading.outcome.aged is None  # not asked for without sharding
    assert route.calls.last.request.url.params["labels"] == "self-hosted,linux"
    assert "aged_after" not in route.calls.last.request.url.params


@respx.mock
async def test_with_sharding_a_read_asks_for_the_aged_part(client: httpx.AsyncClient) -> None:
    route = respx.get(URL + PATH).mock(
        return_value=httpx.Response(200, json={"queued": 4, "aged": 1})
    )
    reading = await reader(client, DemandSettings(cluster_count=2, aged_after=600)).read()
    assert (reading.outcome.queued, reading.outcome.aged) == (4, 1)
    assert route.calls.last.request.url.params["aged_after"] == "600"


@pytest.mark.parametrize(
    ("response", "result"),
    [
        (httpx.Response(503, json={"error": "not reconciled"}), DemandResult.HTTP_ERROR),
        (httpx.Response(200, text="<html>"), DemandResult.BAD_RESPONSE),
        (httpx.Response(200, json={"queued": -1, "aged": 0}), DemandResult.BAD_RESPONSE),
        (httpx.Response(200, json={"aged": 0}), DemandResult.BAD_RESPONSE),
        (httpx.Response(200, text="x" * 10_000), DemandResult.TOO_LARGE),
        (httpx.ConnectError("refused"), DemandResult.HTTP_ERROR),
    ],
    ids=["stale receiver", "not JSON", "negative", "no count", "huge", "down"],
)
@respx.mock
async def test_anything_but_the_answer_is_a_failed_read(
    client: httpx.AsyncClient, response: httpx.Response | Exception, result: DemandResult
) -> None:
    respx.get(URL + PATH).mock(side_effect=[response])
    reading = await reader(client).read()
    assert reading.outcome.result == result
    assert reading.outcome.queued is None
    assert "\n" not in reading.outcome.detail


def test_the_webhook_source_needs_the_receivers_url() -> None:
    with pytest.raises(CapacitySettingsError, match=r"webhook\.url: required"):
        load_capacity_settings({"CAPACITY_ENABLED": "true", "CAPACITY_DEMAND__SOURCE": "webhook"})
    env = {"CAPACITY_ENABLED": "true", "CAPACITY_WEBHOOK__URL": "receiver:8081"}
    with pytest.raises(CapacitySettingsError, match=r"invalid URL 'receiver:8081'"):
        load_capacity_settings(env)


async def test_the_webhook_source_is_read_every_second_and_falls_back_on_its_own_settings() -> None:
    settings = CapacitySettings(
        demand=DemandSettings(source="webhook"),
        webhook=WebhookDemandSettings(url=URL + "/", stale_after=120, failure_base_capacity=2),
    )
    assert settings.demand_interval == 1.0
    assert settings.webhook.url == URL  # a trailing slash is dropped
    params = to_params(settings, 10)
    assert (params.demand_stale_after, params.demand_failure_base_capacity) == (120, 2)
    source = build_reader(settings, LABELS)
    assert isinstance(source, WebhookDemand)
    await source.aclose()
