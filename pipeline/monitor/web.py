"""The monitor's web app (aiohttp): three pages, their JSON APIs and a server-sent event stream.

Routes:

- ``GET /``, ``GET /calls/{call_id}``, ``GET /recent``: the live page, a call's page
  (conversation, word timings, QA summary) and the recent-call search.
- ``GET /api/live``: ``{now_ms, ended_linger_ms, calls}``, the live page's calls.
- ``GET /api/calls``: ``{calls, total, page, page_size, pages}``; query parameters ``call``,
  ``tenant``, ``from`` and ``to`` (epoch ms), ``q`` (text), ``status`` (``live``/``ended``),
  ``page``, ``page_size`` (see ``CallQuery``); ``400`` for a malformed one.
- ``GET /api/calls/{call_id}``: the call's ``CallDetail``; ``404`` when the monitor does not hold
  it.
- ``GET /api/health``: ``{health, monitor}``, the health strip and the monitor's own status.
- ``GET /api/stream[?call=ID]``: server-sent events, ``snapshot`` first, then ``call`` (a changed
  call's row), ``evicted`` and ``health``; with ``call``, only that call's events.
- ``GET /healthz``, ``GET /readyz``: liveness; ready once every topic was read to its end.

Pages are static files (``static/``: HTML, CSS, vanilla JS modules) that render the JSON APIs;
every response forbids other origins (``Content-Security-Policy``), so a page makes no external
request. The app only reads the store on the event loop's thread; ``push_changes`` and
``push_health`` are called by the server to feed the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from pipeline.clock import Clock
from pipeline.monitor.health import HealthSnapshot
from pipeline.monitor.store import MAX_PAGE_SIZE, CallQuery, MonitorStore
from pipeline.qa.summary import CallStatus

__all__ = [
    "STATIC_DIR",
    "MonitorContext",
    "MonitorStatus",
    "StreamHub",
    "create_app",
    "push_changes",
    "push_health",
    "sse_message",
]

STATIC_DIR = Path(__file__).resolve().parent / "static"
HEARTBEAT_S = 15.0
SUBSCRIBER_MAX_BEHIND = 512
"""Publishes (five flushes a second, a health push every few seconds) a stream may leave
untaken before it is closed: about 100 s."""
DEFAULT_PAGE_SIZE = 25

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True, slots=True)
class MonitorStatus:
    """The monitor's own state: caught up with the topics, records read and rejected."""

    ready: bool
    records: int
    rejected: int


def sse_message(event: str, data: bytes) -> bytes:
    """One server-sent event; ``data`` is compact JSON (one line)."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


@dataclass(eq=False, slots=True)
class _Subscriber:
    """One open event stream and its unsent messages, coalesced: the newest message per call
    (a ``call`` row or ``evicted``, first-changed first) and the newest ``health``. However many
    calls change and however slowly the page reads, it holds at most one message per call."""

    call_id: str | None
    calls: dict[str, bytes] = field(default_factory=dict)
    health: bytes | None = None
    behind: int = 0
    """Publishes that reached this stream since it last took its messages."""
    closed: bool = False
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> list[bytes]:
        """The unsent messages, in the order to send them; the stream is then caught up."""
        messages = list(self.calls.values())
        if self.health is not None:
            messages.append(self.health)
        self.calls = {}
        self.health = None
        self.behind = 0
        self.wakeup.clear()
        return messages


class StreamHub:
    """The connected event streams. Publishing never blocks and costs a stream at most one
    unsent message per call: a newer message of a call replaces the unsent one. A stream that
    has not taken its messages for ``SUBSCRIBER_MAX_BEHIND`` publishes is closed (its page
    reconnects and gets a snapshot)."""

    def __init__(self) -> None:
        self._subscribers: set[_Subscriber] = set()

    def __len__(self) -> int:
        return len(self._subscribers)

    def subscribe(self, call_id: str | None) -> _Subscriber:
        subscriber = _Subscriber(call_id)
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def publish_calls(self, messages: Mapping[str, bytes]) -> None:
        """One flush: call id → its message; every stream gets them all, a call's stream (one
        opened with ``call``) only its call's."""
        if not messages:
            return
        for subscriber in list(self._subscribers):
            if subscriber.call_id is None:
                subscriber.calls.update(messages)
            elif subscriber.call_id in messages:
                subscriber.calls[subscriber.call_id] = messages[subscriber.call_id]
            else:
                continue
            self._offered(subscriber)

    def publish_health(self, message: bytes) -> None:
        """The health strip, to every stream but the calls' ones."""
        for subscriber in list(self._subscribers):
            if subscriber.call_id is None:
                subscriber.health = message
                self._offered(subscriber)

    def close(self) -> None:
        for subscriber in list(self._subscribers):
            self._close(subscriber)

    def _offered(self, subscriber: _Subscriber) -> None:
        subscriber.behind += 1
        if subscriber.behind > SUBSCRIBER_MAX_BEHIND:
            self._close(subscriber)
        else:
            subscriber.wakeup.set()

    def _close(self, subscriber: _Subscriber) -> None:
        self._subscribers.discard(subscriber)
        subscriber.take()
        subscriber.closed = True
        subscriber.wakeup.set()


@dataclass(frozen=True, slots=True)
class MonitorContext:
    """What the handlers read: the store, the stream hub, the health strip and the status."""

    store: MonitorStore
    hub: StreamHub
    clock: Clock
    health: Callable[[], HealthSnapshot]
    status: Callable[[], MonitorStatus]
    static_dir: Path = STATIC_DIR


_CONTEXT = web.AppKey("context", MonitorContext)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _live_payload(context: MonitorContext) -> dict[str, Any]:
    return {
        "now_ms": context.clock.now_ms(),
        "ended_linger_ms": context.store.limits.ended_linger_ms,
        "calls": context.store.live_calls(),
    }


def push_changes(context: MonitorContext) -> int:
    """Send every call changed or evicted since the last push (one message per call, however
    many records touched it); returns how many messages."""
    changes = context.store.drain_changes()
    messages: dict[str, bytes] = {}
    for call_id in changes.changed:
        row = context.store.row(call_id)
        if row is not None:
            messages[call_id] = sse_message("call", orjson.dumps(row))
    for call_id in changes.evicted:
        messages[call_id] = sse_message("evicted", orjson.dumps({"call_id": call_id}))
    context.hub.publish_calls(messages)
    return len(messages)


def push_health(context: MonitorContext) -> None:
    context.hub.publish_health(sse_message("health", orjson.dumps(context.health())))


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(
        text=orjson.dumps({"error": message}).decode(), content_type="application/json"
    )


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise _bad_request(f"{name} must be an integer, got {raw!r}") from None


def query_of(request: web.Request) -> CallQuery:
    """The ``CallQuery`` of ``GET /api/calls``; ``HTTPBadRequest`` for a malformed parameter."""
    status_text = request.query.get("status", "").strip()
    page = _int_param(request, "page")
    page_size = _int_param(request, "page_size")
    try:
        return CallQuery(
            call_id=request.query.get("call", ""),
            tenant=request.query.get("tenant", ""),
            from_ms=_int_param(request, "from"),
            to_ms=_int_param(request, "to"),
            text=request.query.get("q", ""),
            status=CallStatus(status_text) if status_text else None,
            page=1 if page is None else page,
            page_size=DEFAULT_PAGE_SIZE if page_size is None else page_size,
        )
    except ValueError:
        raise _bad_request(
            f"status must be live or ended, page >= 1 and page_size 1..{MAX_PAGE_SIZE}"
        ) from None


async def _calls(request: web.Request) -> web.Response:
    context = request.app[_CONTEXT]
    return _json(context.store.search(query_of(request)))


async def _live(request: web.Request) -> web.Response:
    return _json(_live_payload(request.app[_CONTEXT]))


async def _call(request: web.Request) -> web.Response:
    detail = request.app[_CONTEXT].store.detail(request.match_info["call_id"])
    if detail is None:
        return _error(404, "unknown call (never seen, or older than the monitor's window)")
    return _json(detail)


async def _health(request: web.Request) -> web.Response:
    context = request.app[_CONTEXT]
    return _json({"health": context.health(), "monitor": context.status()})


async def _healthz(request: web.Request) -> web.Response:
    return _json({"ok": True})


async def _readyz(request: web.Request) -> web.Response:
    status = request.app[_CONTEXT].status()
    return _json({"ready": status.ready}, 200 if status.ready else 503)


async def _stream(request: web.Request) -> web.StreamResponse:
    context = request.app[_CONTEXT]
    call_id = request.query.get("call") or None
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **SECURITY_HEADERS,
        }
    )
    await response.prepare(request)
    subscriber = context.hub.subscribe(call_id)
    try:
        if call_id is None:
            snapshot = {**_live_payload(context), "health": context.health()}
        else:
            snapshot = {"now_ms": context.clock.now_ms(), "call": context.store.row(call_id)}
        await response.write(sse_message("snapshot", orjson.dumps(snapshot)))
        while True:
            try:
                await asyncio.wait_for(subscriber.wakeup.wait(), HEARTBEAT_S)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if subscriber.closed:
                break
            messages = subscriber.take()
            if messages:
                await response.write(b"".join(messages))
        await response.write_eof()
    except ConnectionResetError:
        pass  # the page went away
    finally:
        context.hub.unsubscribe(subscriber)
    return response


def _page(name: str) -> Callable[[web.Request], Awaitable[web.FileResponse]]:
    async def handler(request: web.Request) -> web.FileResponse:
        return web.FileResponse(request.app[_CONTEXT].static_dir / name)

    return handler


@web.middleware
async def _security_headers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as error:
        error.headers.update(SECURITY_HEADERS)
        raise
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
    return response


def create_app(context: MonitorContext) -> web.Application:
    """The web application over ``context`` (pages, APIs, stream, static files)."""
    app = web.Application(middlewares=[_security_headers])
    app[_CONTEXT] = context

    async def close_streams(app: web.Application) -> None:
        app[_CONTEXT].hub.close()

    app.on_shutdown.append(close_streams)
    app.router.add_get("/", _page("live.html"))
    app.router.add_get("/recent", _page("recent.html"))
    app.router.add_get("/calls/{call_id:.+}", _page("call.html"))
    app.router.add_get("/api/live", _live)
    app.router.add_get("/api/calls", _calls)
    app.router.add_get("/api/calls/{call_id:.+}", _call)
    app.router.add_get("/api/health", _health)
    app.router.add_get("/api/stream", _stream)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_static("/static/", context.static_dir)
    return app
