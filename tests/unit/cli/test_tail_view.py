"""``TailView``: the pure formatting core of ``streamscribe tail``."""

from __future__ import annotations

import io

import orjson

from pipeline.cli.tail import CURSOR_UP, ERASE_LINE, TailView


def _partial(call: str, index: int, committed: str, tentative: str, channel: str = "agent") -> dict:
    return {
        "schema": "partial/1",
        "call_id": call,
        "channel": channel,
        "utterance_index": index,
        "revision": 0,
        "committed_text": committed,
        "tentative_text": tentative,
        "start_ms": 0,
        "end_ms": 1000,
    }


def _final(call: str, index: int, text: str, channel: str = "agent") -> dict:
    return {
        "schema": "final/1",
        "call_id": call,
        "channel": channel,
        "utterance_index": index,
        "text": text,
        "start_ms": 1250,
        "end_ms": 63_480,
        "endpoint_reason": "silence",
    }


def test_json_lines_carry_a_type_and_the_record() -> None:
    out = io.StringIO()
    view = TailView(out, as_json=True, tty=True)
    view.partial(_partial("c1", 0, "hello", "there"))
    view.final(_final("c1", 0, "Hello there."))
    view.close()
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == ["partial", "final"]
    assert lines[1]["text"] == "Hello there."
    assert lines[1]["schema"] == "final/1"
    assert "\x1b" not in out.getvalue()


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    view = TailView(out, tty=False)
    view.partial(_partial("c1", 0, "hello", "there"))
    view.partial(_partial("c1", 0, "hello there", ""))
    view.final(_final("c1", 0, "Hello there."))
    view.close()
    assert out.getvalue().splitlines() == [
        "… c1 agent    #0   hello [there]",
        "… c1 agent    #0   hello there []",
        "✔ c1 agent    #0   00:01.25–01:03.48 (silence) Hello there.",
    ]


def test_on_a_terminal_partials_update_in_place_and_finals_stay() -> None:
    out = io.StringIO()
    view = TailView(out, tty=True, width=80)
    view.partial(_partial("c1", 0, "hello", "there"))
    first = out.getvalue()
    assert first == "… c1 agent    #0   hello \x1b[2mthere\x1b[0m"
    view.partial(_partial("c1", 0, "hello there", "how"))
    second = out.getvalue()[len(first) :]
    assert second.startswith(ERASE_LINE)
    assert CURSOR_UP not in second
    assert second.endswith("hello there \x1b[2mhow\x1b[0m")
    # A second stream: two live lines.
    view.partial(_partial("c1", 0, "hi", "", channel="customer"))
    third = out.getvalue()[len(first) + len(second) :]
    assert third.count("\n") == 1
    # The final replaces its stream's partial; the other partial is redrawn below it.
    view.final(_final("c1", 0, "Hello there, how are you?"))
    fourth = out.getvalue()[len(first) + len(second) + len(third) :]
    assert fourth.startswith(ERASE_LINE + CURSOR_UP + ERASE_LINE)
    assert "✔ c1 agent    #0   00:01.25–01:03.48 (silence) Hello there, how are you?\n" in fourth
    assert fourth.endswith("… c1 customer #0   hi \x1b[2m\x1b[0m")
    # A late partial of a finalized utterance is not drawn again.
    before = out.getvalue()
    view.partial(_partial("c1", 0, "hello there how", ""))
    assert out.getvalue() == before
    view.close()
    assert out.getvalue().endswith("\n")


def test_long_partials_are_cut_to_the_terminal_width() -> None:
    out = io.StringIO()
    view = TailView(out, tty=True, width=40)
    view.partial(_partial("c1", 0, "committed " * 2, "tentative " * 10))
    visible = out.getvalue().replace("\x1b[2m", "").replace("\x1b[0m", "")
    assert len(visible) <= 39


def test_a_partial_left_without_a_final_leaves_the_redraw_after_a_while() -> None:
    # Its utterance ended with a suppressed (or empty) final: no final will ever replace it.
    out, clock = io.StringIO(), [0.0]
    view = TailView(out, tty=True, width=80, now=lambda: clock[0])
    view.partial(_partial("c1", 0, "thank you for", "watching"))
    clock[0] = 31.0
    view.partial(_partial("c2", 0, "hello", ""))
    last = out.getvalue().rsplit(ERASE_LINE, 1)[-1]
    assert "c2" in last
    assert "thank you for" not in last


def test_no_more_live_lines_than_the_terminal_has_rows() -> None:
    # The cursor cannot go above the screen's top: more lines would pile up in scrollback.
    out = io.StringIO()
    view = TailView(out, tty=True, width=80, height=4)
    for n in range(6):
        view.partial(_partial(f"c{n}", 0, "hello", ""))
    last = out.getvalue().rsplit(ERASE_LINE, 1)[-1]
    assert [line.split()[1] for line in last.split("\n")] == ["c3", "c4", "c5"]


def test_control_characters_in_a_record_never_reach_the_terminal() -> None:
    # Security review: a transcript with an escape sequence (a window title, a screen clear)
    # or a line break was written to the terminal raw, and broke the redraw's line count.
    hostile = "hi \x1b]0;pwned\x07\x1b[2J\r\nFAKE\u202e"
    for tty in (True, False):
        out = io.StringIO()
        view = TailView(out, tty=tty, width=200)
        view.partial(_partial("c1", 0, hostile, hostile))
        view.final(_final("c1", 0, hostile, channel="agent\x1b[31m"))
        view.close()
        written = out.getvalue()
        assert "pwned" in written  # the text is shown...
        # ...its controls are not (the view's own cursor moves aside)
        for control in ("\x1b]0;", "\x07", "\x1b[2J", "\r\nFAKE", "\u202e", "\x1b[31m"):
            assert control not in written
        assert "\ufffd" in written
