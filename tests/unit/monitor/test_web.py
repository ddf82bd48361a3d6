"""The monitor's pages, JSON APIs and event stream, on aiohttp's test client with a store
filled by hand (no Kafka)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.clock import ManualClock
from pipeline.contracts.messages import EventType
from pipeline.monitor.health import HealthSnapshot, HealthTracker
from pipeline.monitor.store import MonitorStore, StoreLimits
from pipeline.monitor.web import (
    SECURITY_HEADERS,
    STATIC_DIR,
    MonitorContext,
    MonitorStatus,
    StreamHub,
    create_app,
    push_changes,
    push_health,
)
from tests.unit.monitor.builders import T0_MS, event, partial, said, summary_of

CALL = "acme.call-7"
AGENT_0 = said(CALL, "agent", 0, "this call may be recorded", 500)
CUSTOMER_0 = said(CALL, "customer", 0, "my bill is too high", 4000)


def _context(ready: bool = True) -> MonitorContext:
    clock = ManualClock(T0_MS + 10_000)
    store = MonitorStore(StoreLimits(ended_linger_ms=30_000), clock)
    tracker = HealthTracker((), 60_000)
    return MonitorContext(
        store=store,
        hub=StreamHub(),
        clock=clock,
        health=lambda: tracker.snapshot(clock.now_ms(), store.dead_letters_per_minute()),
        status=lambda: MonitorStatus(ready=ready, records=12, rejected=1),
    )


def _fill(store: MonitorStore) -> None:
    store.apply(event(EventType.SESSION_STARTED, CALL, "agent"))
    store.apply(event(EventType.SESSION_STARTED, CALL, "customer"))
    store.apply(AGENT_0)
    store.apply(CUSTOMER_0)
    store.apply(partial(CALL, "agent", 1, 2, "how can", "I help", at_ms=T0_MS + 9000))
    store.apply(event(EventType.SESSION_STARTED, "other-1", "mono", tenant="globex"))


def _run(
    context: MonitorContext, scenario: Callable[[TestClient[Any, Any]], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with TestClient(TestServer(create_app(context))) as client:
            await scenario(client)

    asyncio.run(main())


def test_pages_are_served_with_a_policy_that_forbids_other_origins() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        for path, title in (
            ("/", "Live calls"),
            ("/recent", "Recent calls"),
            (f"/calls/{CALL}", "Call"),
            ("/calls/with%2Fslash", "Call"),
        ):
            response = await client.get(path)
            assert response.status == 200, path
            assert response.content_type == "text/html"
            assert f"<title>{title} · Streamscribe monitor</title>" in await response.text()
            for name, value in SECURITY_HEADERS.items():
                assert response.headers[name] == value
        script = await client.get("/static/live.js")
        assert script.status == 200
        assert "javascript" in script.content_type
        assert (await client.get("/static/monitor.css")).status == 200

    _run(_context(), scenario)


def test_static_assets_load_nothing_from_another_origin() -> None:
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert not re.search(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", text), path.name
        assert "@import" not in text
        assert 'fetch("http' not in text
        assert "innerHTML" not in text, f"{path.name}: build DOM from text nodes only"


def test_api_calls_searches_and_pages() -> None:
    context = _context()
    _fill(context.store)

    async def scenario(client: TestClient[Any, Any]) -> None:
        everything = await (await client.get("/api/calls")).json()
        # Same start: ties go by call id.
        assert [row["call_id"] for row in everything["calls"]] == [CALL, "other-1"]
        assert (everything["total"], everything["page"], everything["pages"]) == (2, 1, 1)
        by_text = await (await client.get("/api/calls", params={"q": "May be recorded"})).json()
        assert [row["call_id"] for row in by_text["calls"]] == [CALL]
        by_tenant = await (await client.get("/api/calls", params={"tenant": "globex"})).json()
        assert [row["call_id"] for row in by_tenant["calls"]] == ["other-1"]
        window = {"from": str(T0_MS - 5000), "to": str(T0_MS + 5000), "page_size": "1"}
        paged = await (await client.get("/api/calls", params={**window, "page": "2"})).json()
        assert (paged["total"], paged["pages"], len(paged["calls"])) == (2, 2, 1)
        live = await (await client.get("/api/calls", params={"status": "live"})).json()
        assert live["total"] == 2

    _run(context, scenario)


@pytest.mark.parametrize(
    "params",
    [{"from": "yesterday"}, {"page": "0"}, {"page_size": "5000"}, {"status": "paused"}],
)
def test_api_calls_rejects_malformed_parameters(params: dict[str, str]) -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get("/api/calls", params=params)
        assert response.status == 400
        assert "error" in await response.json()

    _run(_context(), scenario)


def test_api_call_detail_has_the_conversation_lanes_words_and_qa_summary() -> None:
    context = _context()
    _fill(context.store)
    context.store.apply(summary_of(CALL, [AGENT_0, CUSTOMER_0]))

    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get(f"/api/calls/{CALL}")
        assert response.status == 200
        detail = await response.json()
        assert detail["call"]["call_id"] == CALL
        assert detail["call"]["status"] == "ended"  # the QA summary says it ended
        utterances = detail["utterances"]
        assert [(u["channel"], u["lane"], u["text"]) for u in utterances] == [
            ("agent", "left", "this call may be recorded"),
            ("customer", "right", "my bill is too high"),
        ]
        first_word = utterances[0]["words"][0]
        assert set(first_word) == {"word", "start_ms", "end_ms", "probability"}
        assert utterances[0]["endpoint_reason"] == "silence"
        qa = detail["qa"]
        assert qa["schema"] == "qa_call/1"
        assert qa["compliance_passed"] is True
        assert [rule["outcome"] for rule in qa["compliance"]] == ["pass", "pass"]
        assert qa["compliance"][0]["evidence"][0]["utterance_id"] == AGENT_0.utterance_id
        missing = await client.get("/api/calls/nobody")
        assert missing.status == 404
        assert "error" in await missing.json()

    _run(context, scenario)


def test_api_live_health_and_probes() -> None:
    context = _context(ready=False)
    _fill(context.store)

    async def scenario(client: TestClient[Any, Any]) -> None:
        live = await (await client.get("/api/live")).json()
        assert live["now_ms"] == T0_MS + 10_000
        assert live["ended_linger_ms"] == 30_000
        assert {row["call_id"] for row in live["calls"]} == {CALL, "other-1"}
        (agent,) = [c for row in live["calls"] for c in row["channels"] if c["channel"] == "agent"]
        assert (agent["committed_text"], agent["tentative_text"], agent["final"]) == (
            "how can",
            "I help",
            False,
        )
        health = await (await client.get("/api/health")).json()
        assert health["health"]["metrics_configured"] is False
        assert health["health"]["workers_up"] is None
        assert health["health"]["dlq_source"] == "events"
        assert health["monitor"] == {"ready": False, "records": 12, "rejected": 1}
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 503

    _run(context, scenario)


async def _next_event(lines: Any) -> tuple[str, dict[str, Any]]:
    name = ""
    while True:
        line = (await asyncio.wait_for(lines.readline(), 5)).decode().rstrip("\n")
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            return name, orjson.loads(line.removeprefix("data: "))


def test_the_stream_sends_a_snapshot_then_changed_calls_and_health() -> None:
    context = _context()
    _fill(context.store)
    context.store.drain_changes()

    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get("/api/stream")
        assert response.headers["Content-Type"] == "text/event-stream"
        name, snapshot = await _next_event(response.content)
        assert name == "snapshot"
        assert {row["call_id"] for row in snapshot["calls"]} == {CALL, "other-1"}
        assert snapshot["health"]["metrics_configured"] is False
        context.store.apply(partial(CALL, "agent", 1, 3, "how can I", "help you"))
        context.store.apply(partial(CALL, "agent", 1, 4, "how can I help", "you"))
        assert push_changes(context) == 1
        name, row = await _next_event(response.content)
        assert name == "call"
        agent = next(c for c in row["channels"] if c["channel"] == "agent")
        assert agent["committed_text"] == "how can I help"  # one message for both partials
        push_health(context)
        name, health = await _next_event(response.content)
        assert name == "health"
        assert set(health) >= {"workers_up", "consumer_lag_records", "p95_partial_ms"}
        response.close()

    _run(context, scenario)


def test_a_call_stream_carries_only_that_calls_updates() -> None:
    context = _context()
    _fill(context.store)
    context.store.drain_changes()

    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get("/api/stream", params={"call": CALL})
        name, snapshot = await _next_event(response.content)
        assert (name, snapshot["call"]["call_id"]) == ("snapshot", CALL)
        context.store.apply(partial("other-1", "mono", 0, 0, "", "noise"))
        push_changes(context)
        push_health(context)
        context.store.apply(event(EventType.SESSION_ENDED, CALL, "agent"))
        push_changes(context)
        name, row = await _next_event(response.content)
        assert (name, row["call_id"]) == ("call", CALL)
        response.close()

    _run(context, scenario)


def test_a_subscriber_that_falls_behind_is_closed_and_others_keep_going() -> None:
    async def main() -> None:
        hub = StreamHub()
        slow = hub.subscribe(None)
        other = hub.subscribe("c1")
        for _ in range(600):
            hub.publish(b"event: call\ndata: {}\n\n", "c2")
        assert len(hub) == 1
        assert slow.queue.get_nowait() == b""  # the close marker, nothing else
        assert other.queue.empty()
        hub.close()
        assert len(hub) == 0

    asyncio.run(main())


def test_health_snapshots_serialize_as_flat_json() -> None:
    snapshot = HealthSnapshot(T0_MS, 60_000, True, 2, 1, 10, 120.5, None, 0.0, "metrics", ("x",))
    data = orjson.loads(orjson.dumps(snapshot))
    assert data["p95_partial_ms"] == 120.5
    assert data["errors"] == ["x"]
