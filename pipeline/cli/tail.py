"""``streamscribe tail``: a live view of partials and finals.

Reads ``asr.partials`` and ``asr.finals`` with one ``read_committed`` consumer (partials are not
transactional, so they show at once; finals show when their transaction commits, never twice and
never when aborted). Partitions are assigned by hand under a throwaway group id with
``enable.auto.commit=false``: tailing joins no group and commits nothing.

``TailView`` is the pure formatting core (no Kafka): on a terminal the newest partial of every
(call, channel) is redrawn in place below the finals (``\\r`` + ANSI line clears); otherwise
every record is a plain line; ``--json`` prints one JSON object per line with a ``type``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import orjson

from pipeline.cli.options import add_env_option, settings_from_args
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.runtime.kafka import new_consumer
from pipeline.settings import Settings
from pipeline.text import format_span_ms
from pipeline.topics import TopicRole, topic_name

__all__ = ["TailView", "register"]

METADATA_TIMEOUT_S = 15.0
LIVE_PARTIAL_MAX_AGE_S = 30.0
"""A live partial not updated for this long is dropped from the redraw: its utterance ended
without a final (a suppressed or empty one), and partials come every hop (0.5 s) while one is
open."""
MAX_REMEMBERED_CHANNELS = 10_000
"""Channels whose newest final index is remembered (to drop late partials); the oldest go first."""
ERASE_LINE = "\r\x1b[2K"
CURSOR_UP = "\x1b[1A"
DIM, RESET = "\x1b[2m", "\x1b[0m"


def _int(record: Mapping[str, Any], name: str) -> int:
    value = record.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class TailView:
    """Renders partial and final records (parsed JSON objects) to ``stream``.

    ``tty``: redraw the live partials in place (lines cut to ``width`` so the redraw can count
    them; at most ``height - 1`` of them, the newest, so the cursor can go back over all; none
    older than ``LIVE_PARTIAL_MAX_AGE_S`` by ``now``); otherwise one plain line per record.
    ``as_json``: one JSON object per line with ``type`` = ``partial`` / ``final`` followed by
    the record's own fields.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        as_json: bool = False,
        tty: bool = False,
        width: int = 120,
        height: int = 40,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._json = as_json
        self._tty = tty and not as_json
        self._width = max(20, width)
        self._max_live = max(1, height - 1)
        self._now = now
        # (call, channel) → its newest partial and when it came; in arrival order.
        self._live: OrderedDict[tuple[str, str], tuple[Mapping[str, Any], float]] = OrderedDict()
        self._finalized: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._drawn = 0

    def partial(self, record: Mapping[str, Any]) -> None:
        if self._json:
            self._write_json("partial", record)
            return
        if not self._tty:
            self._stream.write(self._partial_line(record) + "\n")
            self._stream.flush()
            return
        key = (str(record.get("call_id")), str(record.get("channel")))
        index = _int(record, "utterance_index")
        if index <= self._finalized.get(key, -1):
            return  # a late partial of an utterance already final
        self._live.pop(key, None)
        self._live[key] = (record, self._now())
        self._redraw([])

    def final(self, record: Mapping[str, Any]) -> None:
        if self._json:
            self._write_json("final", record)
            return
        line = self._final_line(record)
        if not self._tty:
            self._stream.write(line + "\n")
            self._stream.flush()
            return
        key = (str(record.get("call_id")), str(record.get("channel")))
        index = _int(record, "utterance_index")
        self._finalized[key] = max(index, self._finalized.pop(key, -1))
        while len(self._finalized) > MAX_REMEMBERED_CHANNELS:
            self._finalized.popitem(last=False)
        live = self._live.get(key)
        if live is not None and _int(live[0], "utterance_index") <= index:
            del self._live[key]
        self._redraw([line])

    def close(self) -> None:
        """End the view: the cursor goes below the live partials."""
        if self._drawn:
            self._stream.write("\n")
            self._drawn = 0
        self._stream.flush()

    def _redraw(self, finals: list[str]) -> None:
        out = []
        if self._drawn:
            out.append(ERASE_LINE + (CURSOR_UP + ERASE_LINE) * (self._drawn - 1))
        out.extend(line + "\n" for line in finals)
        now = self._now()
        for key in [
            k for k, (_, seen) in self._live.items() if now - seen > LIVE_PARTIAL_MAX_AGE_S
        ]:
            del self._live[key]
        newest = list(self._live.values())[-self._max_live :]
        live = [self._partial_line(record) for record, _ in newest]
        out.append("\n".join(live))
        self._drawn = len(live)
        self._stream.write("".join(out))
        self._stream.flush()

    def _write_json(self, kind: str, record: Mapping[str, Any]) -> None:
        self._stream.write(orjson.dumps({"type": kind, **record}).decode() + "\n")
        self._stream.flush()

    def _head(self, record: Mapping[str, Any], mark: str) -> str:
        return (
            f"{mark} {_shown(record.get('call_id'))} {_shown(record.get('channel')):<8} "
            f"#{_int(record, 'utterance_index'):<3}"
        )

    def _partial_line(self, record: Mapping[str, Any]) -> str:
        committed = _shown(record.get("committed_text") or "")
        tentative = _shown(record.get("tentative_text") or "")
        head = self._head(record, "…")
        if not self._tty:
            return f"{head} {committed} [{tentative}]"
        text = f"{head} {committed}"
        room = self._width - 1 - len(text)
        if room <= 1:
            return text[: self._width - 1]
        return f"{text} {DIM}{tentative[: room - 1]}{RESET}"

    def _final_line(self, record: Mapping[str, Any]) -> str:
        start_ms, end_ms = _int(record, "start_ms"), _int(record, "end_ms")
        span = f"{format_span_ms(start_ms)}–{format_span_ms(end_ms)}"
        return (
            f"{self._head(record, '✔')} {span} ({_shown(record.get('endpoint_reason'))}) "
            f"{_shown(record.get('text', ''))}"
        )


def _shown(value: object) -> str:
    """``value`` as text for the terminal, its control and format characters (an escape
    sequence, a line break) replaced by U+FFFD: a record's text never drives the terminal."""
    return "".join(
        "\ufffd" if unicodedata.category(char) in ("Cc", "Cf") else char for char in str(value)
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tail",
        help="live view of partials and finals",
        description="Follow asr.partials and asr.finals (read_committed, no consumer group "
        "commits). On a terminal the newest partial of each call/channel updates in place.",
    )
    add_env_option(
        parser, "--call", env="STREAMSCRIBE_TAIL_CALL", help="only this call id", metavar="ID"
    )
    add_env_option(
        parser,
        "--json",
        env="STREAMSCRIBE_TAIL_JSON",
        action="store_true",
        help="one JSON object per line with a 'type' field",
    )
    add_env_option(
        parser,
        "--from-beginning",
        env="STREAMSCRIBE_TAIL_FROM_BEGINNING",
        action="store_true",
        help="start at the oldest retained records instead of now",
    )
    add_env_option(
        parser,
        "--max-records",
        env="STREAMSCRIBE_TAIL_MAX_RECORDS",
        type=int,
        help="exit after showing this many records",
        metavar="N",
    )
    add_env_option(
        parser,
        "--idle-exit-s",
        env="STREAMSCRIBE_TAIL_IDLE_EXIT_S",
        type=float,
        help="exit after this many seconds without a record",
        metavar="S",
    )
    parser.set_defaults(handler=_tail)


def _tail_consumer_config(settings: Settings, from_beginning: bool) -> dict[str, object]:
    kafka = settings.kafka
    return {
        **kafka.client,
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": f"streamscribe-tail-{uuid.uuid4().hex[:12]}",
        "client.id": "streamscribe-tail",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "isolation.level": "read_committed",
    }


def _tail(args: argparse.Namespace) -> int:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    if args.max_records is not None and args.max_records < 1:
        raise ConfigError("--max-records must be at least 1")
    if args.idle_exit_s is not None and not (0 < args.idle_exit_s < math.inf):
        raise ConfigError("--idle-exit-s must be a positive number of seconds")
    settings = settings_from_args(args)
    prefix = settings.kafka.topic_prefix
    partials_topic = topic_name(TopicRole.PARTIALS, prefix)
    finals_topic = topic_name(TopicRole.FINALS, prefix)
    wanted_key = _call_key(args.call) if args.call else None
    consumer = new_consumer(_tail_consumer_config(settings, args.from_beginning))
    stdout = sys.stdout
    tty = stdout.isatty()
    size = shutil.get_terminal_size()
    view = TailView(stdout, as_json=args.json, tty=tty, width=size.columns, height=size.lines)
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    shown = 0
    try:
        try:
            metadata = consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise InfrastructureError(f"cannot read topic metadata: {error.args[0]}") from None
        assignment = []
        for topic in (partials_topic, finals_topic):
            described = metadata.topics.get(topic)
            if described is None or not described.partitions:
                raise ConfigError(f"topic {topic} does not exist (wrong --topic-prefix?)")
            assignment += [TopicPartition(topic, p, start) for p in sorted(described.partitions)]
        consumer.assign(assignment)
        last_record = time.monotonic()
        while True:
            records = consumer.consume(num_messages=500, timeout=0.2)
            for record in records:
                fault = record.error()
                if fault is not None:
                    if fault.code() != KafkaError._PARTITION_EOF:
                        print(f"tail: {fault}", file=sys.stderr)
                    continue
                if wanted_key is not None and record.key() not in (wanted_key, None):
                    continue
                try:
                    data = orjson.loads(record.value() or b"")
                except orjson.JSONDecodeError:
                    print(f"tail: skipping a non-JSON record on {record.topic()}", file=sys.stderr)
                    continue
                if not isinstance(data, dict):
                    continue
                if args.call and data.get("call_id") != args.call:
                    continue
                last_record = time.monotonic()  # --idle-exit-s: a record of what is shown
                if record.topic() == finals_topic:
                    view.final(data)
                else:
                    view.partial(data)
                shown += 1
                if args.max_records is not None and shown >= args.max_records:
                    return 0
            if args.idle_exit_s is not None and time.monotonic() - last_record >= args.idle_exit_s:
                return 0
    finally:
        view.close()
        consumer.close()


def _call_key(call_id: str) -> bytes:
    """The record key of ``--call``; ConfigError for text that is no UTF-8 (a byte the shell
    passed undecoded), which no call id can be."""
    try:
        return call_id.encode()
    except UnicodeEncodeError:
        raise ConfigError(f"--call {call_id!r} is not valid UTF-8 text") from None
