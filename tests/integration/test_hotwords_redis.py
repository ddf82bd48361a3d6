"""Hotword lists on a real Redis: the CLI, live updates in the registry, isolation, outages.

Every test works under its own key prefix, so tests never see each other's lists. Waiting is
done by polling a condition (with a generous deadline for a shared, busy machine), never by
sleeping a fixed time; the update latency itself is measured by ``bench/hotwords.py``.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from pipeline.asr.whisper.model import bundled_model_dir
from pipeline.asr.whisper.tokenizer import WhisperTokenizer, load_tokenizer
from pipeline.cli import main
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.hotwords import (
    MAX_ENTRIES_PER_LIST,
    Hotword,
    HotwordCatalog,
    HotwordKeys,
    HotwordRegistry,
    HotwordStore,
    ListRef,
    RegistryConfig,
    connect,
)
from pipeline.hotwords.registry import read_catalog
from pipeline.settings import load_settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 10.0
FAST = RegistryConfig(
    poll_interval_s=0.05, resync_interval_s=0.3, reconnect_initial_s=0.05, reconnect_max_s=0.5
)


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def tokenizer() -> WhisperTokenizer:
    return load_tokenizer(bundled_model_dir(), multilingual=False)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}:hw"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def store(redis_url: str, prefix: str) -> Iterator[HotwordStore]:
    client = connect(redis_url)
    yield HotwordStore(client, HotwordKeys(prefix))
    client.close()


@pytest.fixture
def cli(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    monkeypatch.setenv("STREAMSCRIBE_HOTWORDS_KEY_PREFIX", prefix)
    monkeypatch.delenv("STREAMSCRIBE_TENANT", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["hotwords", *argv, "--redis-url", redis_url])
        out, err = capsys.readouterr()
        return code, out, err

    return run


class Recorder:
    """Collects registry callbacks (called on the registry's thread)."""

    def __init__(self) -> None:
        self.states: list[bool] = []
        self.updates: list[ListRef] = []
        self._lock = threading.Lock()

    def dependency(self, up: bool, detail: str) -> None:
        with self._lock:
            self.states.append(up)

    def update(self, ref: ListRef, version: int) -> None:
        with self._lock:
            self.updates.append(ref)


def start_registry(
    store: HotwordStore, tokenizer: WhisperTokenizer, recorder: Recorder | None = None
) -> HotwordRegistry:
    recorder = recorder or Recorder()
    registry = HotwordRegistry(
        store,
        HotwordCatalog(tokenizer),
        FAST,
        on_dependency=recorder.dependency,
        on_update=recorder.update,
    )
    registry.start()
    return registry


def phrases(registry: HotwordRegistry, tenant: str, call_id: str | None = None) -> list[str]:
    return [entry.phrase for entry in registry.entries_for(tenant, call_id)]


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_edits_lists_atomically_and_announces_every_change(
    cli: Callable[..., tuple[int, str, str]], redis_url: str, prefix: str
) -> None:
    listener = redis.Redis.from_url(redis_url, decode_responses=True)
    pubsub = listener.pubsub()
    pubsub.subscribe(f"{prefix}:changes")
    confirmed = pubsub.get_message(timeout=DEADLINE_S)
    assert confirmed is not None
    assert confirmed["type"] == "subscribe"

    code, out, _ = cli("add", "--tenant", "acme", "Niamh", "Saoirse   Okonkwo", "--boost", "1.5")
    assert code == 0
    assert "tenant acme: added or updated 2, list has 2" in out
    assert cli("add", "--tenant", "acme", "--call", "c-1", "Zyrtec")[0] == 0
    code, out, _ = cli("list", "--tenant", "acme", "--json")
    listed = json.loads(out)
    assert listed["entries"] == [
        {"phrase": "Niamh", "boost": 1.5},
        {"phrase": "Saoirse Okonkwo", "boost": 1.5},
    ]
    assert listed["ttl_s"] is None
    code, out, _ = cli("list", "--tenant", "acme", "--call", "c-1", "--json")
    assert 0 < json.loads(out)["ttl_s"] <= 86400
    code, out, _ = cli("list", "--tenant", "acme", "--call", "c-1", "--effective")
    head, *rows = out.splitlines()
    assert head.startswith("tenant acme call c-1 (merged with the tenant's): 3 entries, expires")
    assert rows == ["  Niamh            1.5", "  Saoirse Okonkwo  1.5", "  Zyrtec           1"]
    code, out, _ = cli("remove", "--tenant", "acme", "Niamh", "Nobody")
    assert "removed 1, list has 1" in out
    assert "1 phrase(s) were not in the list" in out
    assert cli("clear", "--tenant", "acme", "--call", "c-1")[0] == 0
    code, out, _ = cli("list", "--tenant", "acme")
    assert out.splitlines() == ["tenant acme: 1 entries", "  Saoirse Okonkwo  1.5"]

    notices = []
    end = time.monotonic() + DEADLINE_S
    while len(notices) < 4 and time.monotonic() < end:
        message = pubsub.get_message(timeout=0.1)
        if message:
            notices.append(json.loads(message["data"]))
    pubsub.close()
    listener.close()
    assert [(n["tenant"], n["call_id"], n["action"]) for n in notices] == [
        ("acme", None, "add"),
        ("acme", "c-1", "add"),
        ("acme", None, "remove"),
        ("acme", "c-1", "clear"),
    ]
    versions = [n["version"] for n in notices]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4


def test_cli_refuses_bad_input_with_exit_2_and_changes_nothing(
    cli: Callable[..., tuple[int, str, str]], store: HotwordStore
) -> None:
    for argv in (
        ("add", "--tenant", "acme", "ok", ""),
        ("add", "--tenant", "acme", "ok", "--boost", "2.5"),
        ("add", "--tenant", "acme", "--call", "bad id", "ok"),
        ("add", "--tenant", "acme", "a b c d e f g h i"),
    ):
        code, _, err = cli(*argv)
        assert code == 2, argv
        assert err.startswith("streamscribe: error: ")
    assert store.read(ListRef("acme")).entries == ()
    assert store.version() == 0


def test_cli_runs_as_a_command(redis_url: str, prefix: str) -> None:
    env = {"STREAMSCRIBE_HOTWORDS_KEY_PREFIX": prefix, "STREAMSCRIBE_REDIS_URL": redis_url}
    run = subprocess.run(
        [sys.executable, "-m", "pipeline", "hotwords", "add", "--tenant", "acme", "Keycloak"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "tenant acme: added or updated 1" in run.stdout


def test_a_list_is_capped_at_the_maximum_entries(store: HotwordStore) -> None:
    ref = ListRef("acme")
    store.add(ref, [f"term{i}" for i in range(MAX_ENTRIES_PER_LIST)])
    version = store.version()
    with pytest.raises(ConfigError, match="exceed 1000"):
        store.add(ref, ["one more", "term1"])
    assert store.version() == version
    assert len(store.read(ref).entries) == MAX_ENTRIES_PER_LIST
    store.add(ref, ["term1"], boost=2.0)  # updating an existing entry still works when full
    assert len(store.read(ref).entries) == MAX_ENTRIES_PER_LIST


# -- registry ----------------------------------------------------------------------------------


def test_registry_loads_on_start_and_applies_live_changes(
    store: HotwordStore,
    tokenizer: WhisperTokenizer,
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    store.add(ListRef("acme"), ["Niamh", "Nguyen"])
    store.add(ListRef("acme", "call-1"), ["Zyrtec"])
    recorder = Recorder()
    registry = start_registry(store, tokenizer, recorder)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        assert recorder.states == [True]
        assert phrases(registry, "acme") == ["Nguyen", "Niamh"]
        assert phrases(registry, "acme", "call-1") == ["Nguyen", "Niamh", "Zyrtec"]
        before = registry.bias_for("acme", "call-1")
        assert before is not None

        assert cli("add", "--tenant", "acme", "--call", "call-1", "Ozempic")[0] == 0
        wait_for(lambda: "Ozempic" in phrases(registry, "acme", "call-1"), "the call update")
        assert registry.bias_for("acme", "call-1") is not before
        assert "Ozempic" not in phrases(registry, "acme", "call-2")

        assert cli("remove", "--tenant", "acme", "Nguyen")[0] == 0
        wait_for(lambda: phrases(registry, "acme") == ["Niamh"], "the tenant update")
        assert phrases(registry, "acme", "call-1") == ["Niamh", "Ozempic", "Zyrtec"]
        assert cli("clear", "--tenant", "acme")[0] == 0
        wait_for(lambda: registry.bias_for("acme", "call-2") is None, "the clear")
        wait_for(lambda: registry.version == store.version(), "the version of the clear")
    finally:
        registry.stop()
    assert set(recorder.updates) >= {ListRef("acme"), ListRef("acme", "call-1")}


def test_registry_from_settings_uses_the_configured_redis_and_prefix(
    redis_url: str, prefix: str, store: HotwordStore, tokenizer: WhisperTokenizer
) -> None:
    settings = load_settings(
        env={"STREAMSCRIBE_REDIS_URL": redis_url, "STREAMSCRIBE_HOTWORDS_KEY_PREFIX": prefix}
    )
    store.add(ListRef("acme"), ["Zendesk"])
    states: list[bool] = []
    registry = HotwordRegistry.from_settings(
        settings, tokenizer, on_dependency=lambda up, _: states.append(up)
    )
    with registry:
        assert registry.wait_loaded(DEADLINE_S)
        assert phrases(registry, "acme") == ["Zendesk"]
        assert states == [True]


def test_tenants_never_see_each_others_lists(
    store: HotwordStore, tokenizer: WhisperTokenizer
) -> None:
    store.add(ListRef("acme"), ["Niamh"])
    store.add(ListRef("acme", "shared-id"), ["Zyrtec"])
    store.add(ListRef("globex"), ["Xfinity"])
    registry = start_registry(store, tokenizer)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        assert phrases(registry, "globex", "shared-id") == ["Xfinity"]
        assert phrases(registry, "acme", "shared-id") == ["Niamh", "Zyrtec"]
        assert registry.bias_for("initech", "shared-id") is None
        acme, globex = registry.bias_for("acme", "x"), registry.bias_for("globex", "x")
        assert acme is not None
        assert globex is not None
        niamh = tokenizer.encode(" Niamh")[0]
        assert niamh in acme([])
        assert niamh not in globex([])
    finally:
        registry.stop()


def test_missed_notices_are_caught_by_the_version_check(
    store: HotwordStore, tokenizer: WhisperTokenizer
) -> None:
    registry = start_registry(store, tokenizer)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        # A hand edit that publishes nothing, but bumps the version as every writer must.
        store.client.hset(store.keys.key(ListRef("acme")), "Kubernetes", "1.0")
        store.client.incr(store.keys.version)
        wait_for(lambda: phrases(registry, "acme") == ["Kubernetes"], "the resync")
    finally:
        registry.stop()


def test_call_lists_expire_with_their_ttl(
    redis_url: str, prefix: str, tokenizer: WhisperTokenizer
) -> None:
    client = connect(redis_url)
    store = HotwordStore(client, HotwordKeys(prefix), call_ttl_s=2)
    registry = start_registry(store, tokenizer)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        store.add(ListRef("acme", "short-call"), ["Zyrtec"])
        wait_for(lambda: registry.bias_for("acme", "short-call") is not None, "the call list")
        wait_for(lambda: registry.bias_for("acme", "short-call") is None, "the TTL expiry")
        assert store.read(ListRef("acme", "short-call")).entries == ()
    finally:
        registry.stop()
        client.close()


def test_every_change_to_a_call_list_restarts_its_ttl(redis_url: str, prefix: str) -> None:
    client = connect(redis_url)
    store = HotwordStore(client, HotwordKeys(prefix), call_ttl_s=600)
    ref = ListRef("acme", "long-call")
    key = store.keys.key(ref)
    try:
        store.add(ref, ["Zyrtec", "Xarelto"])
        client.expire(key, 5)  # most of its life has passed
        result = store.remove(ref, ["Zyrtec"])
        assert result.affected == 1
        assert 5 < int(client.ttl(key)) <= 600
        store.remove(ref, ["Xarelto"])  # the last entry: the list is gone, nothing to expire
        assert not client.exists(key)
        tenant = ListRef("acme")
        store.add(tenant, ["Kubernetes", "Keycloak"])
        store.remove(tenant, ["Keycloak"])
        assert int(client.ttl(store.keys.key(tenant))) == -1  # tenant lists never expire
    finally:
        client.close()


# -- data broken by hand edits ---------------------------------------------------------------


@pytest.fixture
def hand(redis_url: str) -> Iterator[redis.Redis]:
    """A client that writes raw bytes, as ``redis-cli`` would."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def break_by_hand(hand: redis.Redis, prefix: str) -> None:
    """Next to good lists: a list key of the wrong type, a key name and fields that are not
    UTF-8 (in a tenant and in a call list), a phrase not in stored form, and a version that is
    not an integer."""
    hand.set(f"{prefix}:tenant:junk", "foo")
    hand.hset(f"{prefix}:tenant:".encode() + b"caf\xe9", "Niamh", "1")  # not a list key
    hand.hset(f"{prefix}:tenant:mixed", mapping={b"caf\xe9": b"1", b"Keycloak": b"1"})
    hand.hset(f"{prefix}:call:acme:c1", mapping={b"Zyrtec": b"\xff", b"Ozempic": b"1"})
    hand.hset(f"{prefix}:tenant:acme", mapping={b" Niamh": b"2", b"Niamh  Nguyen": b"2"})
    hand.set(f"{prefix}:version", "abc")


def test_bad_data_is_skipped_field_by_field_and_the_good_lists_still_load(
    redis_url: str,
    prefix: str,
    store: HotwordStore,
    hand: redis.Redis,
    tokenizer: WhisperTokenizer,
) -> None:
    store.add(ListRef("acme"), ["Niamh", "Saoirse"])
    store.add(ListRef("acme", "c1"), ["Ozempic"])
    break_by_hand(hand, prefix)
    problems: list[str] = []
    reader = HotwordStore(store.client, store.keys, on_problem=problems.append)
    version, lists = reader.read_all()
    assert version is None
    assert {item.ref: [e.phrase for e in item.entries] for item in lists} == {
        ListRef("acme"): ["Niamh", "Saoirse"],
        ListRef("acme", "c1"): ["Ozempic"],
        ListRef("mixed"): ["Keycloak"],
    }
    assert len(problems) == 6
    assert any("tenant junk" in line and "WRONGTYPE" in line for line in problems)
    assert any("b'caf\\xe9': phrase is not UTF-8" in line for line in problems)
    assert any("'Zyrtec': boost is not UTF-8" in line for line in problems)
    assert any("' Niamh': not in stored form 'Niamh'" in line for line in problems)
    assert any("'abc'" in line and "unknown" in line for line in problems)
    assert reader.read(ListRef("junk")).entries == ()

    settings = load_settings(
        env={"STREAMSCRIBE_REDIS_URL": redis_url, "STREAMSCRIBE_HOTWORDS_KEY_PREFIX": prefix}
    )
    replayed = read_catalog(settings, tokenizer)  # what ``replay --hotwords`` decodes with
    assert (replayed.version, replayed.lists) == (None, 3)
    assert replayed.catalog.entries_for("acme", "c1") == (
        Hotword("Niamh"),
        Hotword("Ozempic"),
        Hotword("Saoirse"),
    )


def test_the_registry_serves_the_good_lists_next_to_bad_data_and_stays_up(
    store: HotwordStore,
    tokenizer: WhisperTokenizer,
    hand: redis.Redis,
    prefix: str,
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    store.add(ListRef("acme"), ["Niamh"])
    store.add(ListRef("acme", "c1"), ["Ozempic"])
    break_by_hand(hand, prefix)
    recorder = Recorder()
    registry = start_registry(store, tokenizer, recorder)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        assert phrases(registry, "acme", "c1") == ["Niamh", "Ozempic"]
        assert phrases(registry, "mixed") == ["Keycloak"]
        bias = registry.bias_for("acme", "c1")
        assert bias is not None
        assert tokenizer.encode(" Ozempic")[0] in bias([])
        # With the version unknown, every resync reloads: a hand edit that publishes nothing
        # (and cannot bump the counter) still arrives.
        hand.hset(f"{prefix}:tenant:acme", "Kubernetes", "1")
        wait_for(lambda: "Kubernetes" in phrases(registry, "acme"), "a reload at the resync")

        # Changes through the CLI name what a hand edit broke, in one line, and change nothing.
        code, _, err = cli("add", "--tenant", "acme", "Zendesk")
        assert code == 1
        assert err.count("\n") == 1
        assert f"version counter '{prefix}:version' is not an integer" in err
        hand.set(f"{prefix}:version", "100")
        code, _, err = cli("add", "--tenant", "junk", "Zendesk")
        assert code == 1
        assert err == (
            f"streamscribe: error: tenant junk: Redis key '{prefix}:tenant:junk' is not a "
            "hotword list (a hash); inspect it, then delete it with redis-cli DEL to start the "
            "list afresh\n"
        )
        assert cli("add", "--tenant", "mixed", "Zendesk")[0] == 0
        wait_for(lambda: phrases(registry, "mixed") == ["Keycloak", "Zendesk"], "a live change")
        assert registry.version == 101
        assert recorder.states == [True]  # bad data is no outage
    finally:
        registry.stop()


def test_the_cli_lists_what_it_can_and_names_what_it_skipped(
    store: HotwordStore, hand: redis.Redis, prefix: str, cli: Callable[..., tuple[int, str, str]]
) -> None:
    store.add(ListRef("acme"), ["Niamh"])
    break_by_hand(hand, prefix)
    code, out, err = cli("list", "--tenant", "mixed")
    assert code == 0
    assert out.splitlines() == ["tenant mixed: 1 entries", "  Keycloak  1"]
    assert err == (
        f"streamscribe: warning: tenant mixed (key '{prefix}:tenant:mixed'): skipped field "
        "b'caf\\xe9': phrase is not UTF-8\n"
    )
    code, out, err = cli("list", "--tenant", "junk", "--json")
    assert code == 0
    assert json.loads(out)["entries"] == []
    assert json.loads(out)["version"] is None
    assert [line.split(":")[1] for line in err.splitlines()] == [" warning"] * 2
    assert "is not a hotword list, skipped: WRONGTYPE" in err
    code, out, err = cli("list", "--tenant", "acme", "--call", "c1", "--effective")
    assert code == 0
    assert [row.split()[0] for row in out.splitlines()[1:]] == ["Niamh", "Ozempic"]
    assert "' Niamh': not in stored form 'Niamh'" in err


def test_an_undecodable_change_message_does_not_stop_live_updates(
    store: HotwordStore,
    tokenizer: WhisperTokenizer,
    hand: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    registry = start_registry(store, tokenizer, recorder)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        hand.publish(store.keys.channel, b"\xff\xfe not text")
        store.add(ListRef("acme"), ["Niamh"])
        wait_for(lambda: phrases(registry, "acme") == ["Niamh"], "the change after the bad one")
        store.add(ListRef("acme"), ["Nguyen"])
        wait_for(lambda: phrases(registry, "acme") == ["Nguyen", "Niamh"], "a later notice")
        assert recorder.states == [True]
        assert [r.levelno for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert any("undecodable message" in r.getMessage() for r in caplog.records)
    finally:
        registry.stop()


def test_an_empty_call_id_never_clears_the_tenant_list(
    store: HotwordStore, cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add(ListRef("acme"), ["Niamh"])
    code, _, err = cli("clear", "--tenant", "acme", "--call", "")  # --call "$CALL", CALL unset
    assert code == 2
    assert "--call (or STREAMSCRIBE_HOTWORDS_CALL) is empty" in err
    monkeypatch.setenv("STREAMSCRIBE_HOTWORDS_CALL", "")
    assert cli("remove", "--tenant", "acme", "Niamh")[0] == 2
    assert [e.phrase for e in store.read(ListRef("acme")).entries] == ["Niamh"]


def test_a_full_list_is_refused_by_the_cli_with_exit_2(
    store: HotwordStore, cli: Callable[..., tuple[int, str, str]]
) -> None:
    store.add(ListRef("acme"), [f"term{i}" for i in range(MAX_ENTRIES_PER_LIST)])
    version = store.version()
    code, _, err = cli("add", "--tenant", "acme", "one more")
    assert code == 2
    assert err.startswith("streamscribe: error: tenant acme: list has 1000 entries")
    assert store.version() == version


# -- Redis outage ------------------------------------------------------------------------------


class OwnRedis:
    """A redis-server of this test's own, on a free port, that can be stopped and restarted
    with its data (saved to disk on shutdown)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                *("redis-server", "--bind", "127.0.0.1", "--port", str(self.port)),
                *("--dir", str(self.folder), "--save", "", "--appendonly", "no"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        end = time.monotonic() + DEADLINE_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > end:
                    pytest.fail("own redis-server did not start")
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        """Shut down, saving the data set first (so a restart brings the lists back)."""
        if self.process is None:
            return
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "save"],
            capture_output=True,
            check=False,
        )
        try:
            self.process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def test_registry_keeps_its_lists_while_redis_is_down_and_recovers(
    own_redis: OwnRedis, tokenizer: WhisperTokenizer
) -> None:
    client = connect(own_redis.url, timeout_s=0.5)
    store = HotwordStore(client)
    store.add(ListRef("acme"), ["Niamh"])
    store.add(ListRef("acme", "c1"), ["Zyrtec"])
    recorder = Recorder()
    worker_client = connect(own_redis.url, timeout_s=0.5)
    registry = start_registry(HotwordStore(worker_client), tokenizer, recorder)
    try:
        assert registry.wait_loaded(DEADLINE_S)
        bias = registry.bias_for("acme", "c1")
        assert bias is not None

        own_redis.stop()
        # The callback runs just after ``redis_up`` flips: wait for the callback.
        wait_for(lambda: recorder.states[-1:] == [False], "the outage to be reported")
        assert registry.redis_up is False
        assert recorder.states == [True, False]
        assert registry.bias_for("acme", "c1") is bias
        assert phrases(registry, "acme", "c1") == ["Niamh", "Zyrtec"]
        with pytest.raises(InfrastructureError, match="Redis"):
            store.add(ListRef("acme"), ["Ozempic"])

        own_redis.start()
        wait_for(lambda: recorder.states[-1:] == [True], "the reconnect to be reported")
        assert registry.redis_up is True
        assert recorder.states == [True, False, True]
        assert phrases(registry, "acme", "c1") == ["Niamh", "Zyrtec"]
        store.add(ListRef("acme"), ["Ozempic"])
        wait_for(lambda: "Ozempic" in phrases(registry, "acme"), "an update after recovery")
    finally:
        registry.stop()
        client.close()
        worker_client.close()


def test_registry_started_while_redis_is_down_waits_and_then_loads(
    own_redis: OwnRedis, tokenizer: WhisperTokenizer
) -> None:
    store = HotwordStore(connect(own_redis.url, timeout_s=0.5))
    store.add(ListRef("acme"), ["Niamh"])
    own_redis.stop()
    recorder = Recorder()
    worker_store = HotwordStore(connect(own_redis.url, timeout_s=0.5))
    registry = start_registry(worker_store, tokenizer, recorder)
    try:
        wait_for(lambda: registry.redis_up is False, "the first failed attempt")
        assert not registry.wait_loaded(0.0)
        assert registry.bias_for("acme", "c1") is None
        own_redis.start()
        assert registry.wait_loaded(DEADLINE_S)
        assert phrases(registry, "acme") == ["Niamh"]
        wait_for(lambda: recorder.states == [False, True], "the recovery to be reported")
    finally:
        registry.stop()
        store.client.close()
        worker_store.client.close()
