"""A short nemesis run (``bench/chaos.py``, which ``make bench`` runs for 3 x 10 minutes): three
real workers on a broker of the test's own, frozen past the session timeout, killed, stopped,
restarted with fault points armed, and the broker restarted, while calls stream in real time.
Every final comes exactly once, with the fault-free decode's text and number."""

from __future__ import annotations

import pytest

from bench import chaos

pytestmark = pytest.mark.integration

PORT = 19392  # apart from the session's broker (19092), the restart test's (19192), the bench's


def test_a_short_nemesis_loses_duplicates_and_renumbers_no_final() -> None:
    result = chaos.run(chaos.QUICK_MINUTES, seed=3, port=PORT)
    story = f"{result['actions']} exits {result['worker_exits']}; logs in {chaos.LOG_DIR}"
    assert result["all_sessions_ended"], story
    assert sum(result["actions"].values()) >= 3, story
    assert result["lost"] == [], story
    assert result["duplicated"] == [], story
    assert result["renumbered"] == [], story
    assert result["text_differs"] == [], story
    assert result["published"] == result["expected"] > 0
