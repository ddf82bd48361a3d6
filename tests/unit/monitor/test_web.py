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
    SUBSCRIBER_MAX_BEHIND,
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


def test_a_flush_of_more_calls_than_the_backlog_limit_reaches_a_live_page() -> None:
    # Start-up (24 h of history) or a busy pipeline changes hundreds of calls per flush; the page
    # must get every row and stay connected (one message per call once cost a queue slot each,
    # and 512 of them closed every live page at every such flush).
    calls = [f"burst-{n:04d}" for n in range(SUBSCRIBER_MAX_BEHIND + 100)]
    context = _context()

    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get("/api/stream")
        name, _ = await _next_event(response.content)
        assert name == "snapshot"
        for _round in range(2):
            for call_id in calls:
                context.store.apply(partial(call_id, "mono", 0, _round, "hello", "there"))
            assert push_changes(context) == len(calls)
            push_health(context)
            seen = []
            while len(seen) < len(calls) + 1:
                line = await asyncio.wait_for(response.content.readline(), 5)
                assert line, "the stream was closed"
                if line.startswith(b"event: "):
                    seen.append(line.removeprefix(b"event: ").strip().decode())
            assert seen == ["call"] * len(calls) + ["health"]
        assert len(context.hub) == 1
        response.close()

    _run(context, scenario)


def test_a_stream_holds_one_unsent_message_per_call_and_the_newest_health() -> None:
    async def main() -> None:
        hub = StreamHub()
        page = hub.subscribe(None)
        follower = hub.subscribe("c1")
        for n in range(10):
            hub.publish_calls({"c1": b"c1-%d" % n, "c2": b"c2-%d" % n})
            hub.publish_health(b"health-%d" % n)
        assert page.take() == [b"c1-9", b"c2-9", b"health-9"]
        assert follower.take() == [b"c1-9"]  # no other call, no health
        assert page.take() == []
        hub.publish_calls({"c2": b"c2-evicted"})
        assert follower.behind == 0
        assert page.take() == [b"c2-evicted"]

    asyncio.run(main())


def test_a_stream_that_stops_reading_is_closed_and_others_keep_going() -> None:
    async def main() -> None:
        hub = StreamHub()
        slow = hub.subscribe(None)
        reader = hub.subscribe(None)
        other = hub.subscribe("c1")
        for n in range(SUBSCRIBER_MAX_BEHIND + 1):
            hub.publish_calls({f"c{n % 3 + 2}": b"event: call\ndata: {}\n\n"})
            assert len(reader.take()) == 1
            assert len(slow.calls) <= 3  # coalesced per call while it waits
        assert slow.closed
        assert slow.wakeup.is_set()
        assert slow.take() == []  # nothing left to send
        assert len(hub) == 2
        assert not other.wakeup.is_set()
        hub.close()
        assert len(hub) == 0
        assert reader.closed
        assert other.closed

    asyncio.run(main())


def test_health_snapshots_serialize_as_flat_json() -> None:
    snapshot = HealthSnapshot(
        T0_MS, 60_000, True, 2, 1, 10, 120.5, None, 1500.0, 0.0, "metrics", ("x",)
    )
    data = orjson.loads(orjson.dumps(snapshot))
    assert data["p95_partial_ms"] == 120.5
    assert data["errors"] == ["x"]
