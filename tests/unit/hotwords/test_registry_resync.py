"""The registry's listening loop against a fake pub/sub and store (no Redis): resyncs."""

from __future__ import annotations

from typing import Any

from pipeline.hotwords.catalog import HotwordCatalog, HotwordList
from pipeline.hotwords.model import ChangeAction, ChangeNotice, Hotword, ListRef
from pipeline.hotwords.registry import HotwordRegistry, RegistryConfig
from tests.unit.hotwords.fakes import PieceTokenizer


class _Store:
    """Redis at version 3 after three call lists were added; counts full reloads."""

    def __init__(self) -> None:
        self.reloads = 0

    def version(self) -> int:
        return 3

    def read(self, ref: ListRef) -> HotwordList:
        return HotwordList(ref, (Hotword(f"Name{ref.call_id}"),), 10**15)

    def read_all(self) -> tuple[int, list[HotwordList]]:
        self.reloads += 1
        return 3, [self.read(ListRef("acme", f"c{n}")) for n in (1, 2, 3)]


class _PubSub:
    """Three notices queued at once; once they are served, the registry is stopped."""

    def __init__(self, registry: HotwordRegistry) -> None:
        self.registry = registry
        self.queue = [
            {"type": "message", "data": ChangeNotice(ListRef("acme", f"c{n}"), action, n).to_json()}
            for n, action in ((1, ChangeAction.ADD), (2, ChangeAction.ADD), (3, ChangeAction.ADD))
        ]

    def get_message(self, timeout: float) -> dict[str, Any] | None:
        if self.queue:
            return self.queue.pop(0)
        self.registry._stop.set()
        return None


def test_a_resync_serves_the_queued_notices_before_it_compares_versions() -> None:
    # Review finding: one notice per loop turn, then the resync: with notices still queued,
    # Redis's version was ahead and every list was reloaded for nothing (seconds at scale).
    store = _Store()
    catalog = HotwordCatalog(PieceTokenizer())
    registry = HotwordRegistry(
        store,  # type: ignore[arg-type]
        catalog,
        RegistryConfig(resync_interval_s=1e-9),  # due at every turn
    )
    registry._listen(_PubSub(registry))
    assert store.reloads == 0
    assert registry._version == 3
    assert all(catalog.bias_for("acme", f"c{n}") is not None for n in (1, 2, 3))
