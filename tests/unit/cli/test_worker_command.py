"""``streamscribe worker`` wiring, without a model or a broker."""

from __future__ import annotations

import types
from typing import Any

import pytest

from pipeline.cli import main
from tests.unit.cli.errors import NO_BROKER


@pytest.mark.usefixtures("_worker_leaves_signals_alone")
def test_the_engine_and_the_worker_share_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCRIBE_METRICS_PORT", "0")
    clocks: dict[str, Any] = {}

    def build_engine(asr: Any, clock: Any = None, biases: Any = None) -> Any:
        clocks["engine"] = clock
        engine = types.SimpleNamespace(model_id="m")
        return types.SimpleNamespace(engine=engine, model_id="m", device="cpu", dtype="float32")

    class _Worker:
        def __init__(self, settings: Any, engine: Any, **options: Any) -> None:
            clocks["worker"] = options.get("clock")

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> None:
            pass

    monkeypatch.setattr("pipeline.asr.factory.build_engine", build_engine)
    monkeypatch.setattr("pipeline.worker.loop.AsrWorker", _Worker)
    assert main([*NO_BROKER, "worker"]) == 0
    assert clocks["engine"] is not None
    assert clocks["engine"] is clocks["worker"]


@pytest.mark.usefixtures("_worker_leaves_signals_alone")
@pytest.mark.parametrize(("worker_id", "warned"), [(None, True), ("asr-0", False)])
def test_static_membership_without_a_worker_id_is_warned_about(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    worker_id: str | None,
    warned: bool,
) -> None:
    # Test-honesty review: the id defaults to host-pid, so outside a container every restart
    # joined as a new static member, and a stopped one never left the group.
    monkeypatch.setenv("STREAMSCRIBE_METRICS_PORT", "0")
    monkeypatch.setenv("STREAMSCRIBE_STATIC_MEMBERSHIP", "true")
    monkeypatch.setattr(
        "pipeline.asr.factory.build_engine",
        lambda *_, **__: types.SimpleNamespace(
            engine=types.SimpleNamespace(model_id="m"), model_id="m", device="cpu", dtype="x"
        ),
    )

    class _Worker:
        def __init__(self, settings: Any, engine: Any, **options: Any) -> None:
            pass

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> None:
            pass

    monkeypatch.setattr("pipeline.worker.loop.AsrWorker", _Worker)
    argv = [*NO_BROKER, "worker", *([] if worker_id is None else ["--worker-id", worker_id])]
    assert main(argv) == 0
    assert ("STATIC_MEMBERSHIP without STREAMSCRIBE_WORKER_ID" in capsys.readouterr().err) is warned
