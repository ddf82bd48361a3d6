"""``streamscribe hotwords add|remove|list|clear``: edit the hotword lists in Redis.

Every change is atomic and announced to the workers, which apply it within a second
(``docs/hotwords.md``). Invalid input (phrase, boost, tenant or call id, an empty ``--call``)
prints one line and exits 2 before Redis is touched; an ``add`` that would overfill a list is
refused by the change's own atomic script (nothing changed, exit 2); Redis unreachable, or a key
a hand edit broke, exits 1. Entries that reads leave out (hand edits) are named on stderr, one
``streamscribe: warning: …`` line each.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from pipeline.cli.options import add_env_option, not_empty, settings_from_args
from pipeline.clock import WallClock
from pipeline.errors import ConfigError
from pipeline.hotwords.catalog import HotwordList
from pipeline.hotwords.model import (
    DEFAULT_BOOST,
    MAX_BOOST,
    MAX_ENTRIES_PER_LIST,
    MAX_PHRASE_CHARS,
    MAX_PHRASE_WORDS,
    MIN_BOOST,
    HotwordKeys,
    ListRef,
    merge_entries,
    normalize_phrase,
    parse_boost,
)
from pipeline.hotwords.store import ChangeResult, HotwordStore, connect

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hotwords",
        help="edit per-tenant / per-call hotword lists (Redis), applied live by workers",
        description=(
            f"Phrases: at most {MAX_PHRASE_CHARS} characters and {MAX_PHRASE_WORDS} words; a "
            f"list holds at most {MAX_ENTRIES_PER_LIST}. Tenant and call ids: [A-Za-z0-9._-]."
        ),
    )
    actions = parser.add_subparsers(dest="hotwords_command", required=True, metavar="ACTION")
    for name, help_text, handler, takes_phrases in (
        ("add", "add phrases (or change their boost)", _add, True),
        ("remove", "remove phrases", _remove, True),
        ("list", "show a list", _list, False),
        ("clear", "delete a whole list", _clear, False),
    ):
        action = actions.add_parser(name, help=help_text)
        _add_list_options(action)
        if takes_phrases:
            action.add_argument("phrases", nargs="+", metavar="PHRASE", help="quote multi-word")
        if name == "add":
            add_env_option(
                action,
                "--boost",
                env="STREAMSCRIBE_HOTWORDS_BOOST",
                help=f"bias multiplier, {MIN_BOOST}..{MAX_BOOST} (0 = listed, not biased)",
                default=str(DEFAULT_BOOST),
                metavar="X",
            )
        if name == "list":
            add_env_option(
                action,
                "--json",
                env="STREAMSCRIBE_HOTWORDS_JSON",
                help="print JSON",
                action="store_true",
            )
            add_env_option(
                action,
                "--effective",
                env="STREAMSCRIBE_HOTWORDS_EFFECTIVE",
                help="with --call: the list the call decodes with (tenant's merged with call's)",
                action="store_true",
            )
        action.set_defaults(handler=handler)


def _add_list_options(parser: argparse.ArgumentParser) -> None:
    add_env_option(parser, "--tenant", env="STREAMSCRIBE_TENANT", help="tenant id", metavar="T")
    add_env_option(
        parser,
        "--call",
        env="STREAMSCRIBE_HOTWORDS_CALL",
        help="call id: the call's own list (merged over the tenant's) instead of the tenant's; "
        "given but empty is an error, never the tenant's list",
        metavar="ID",
    )
    add_env_option(
        parser, "--redis-url", env="STREAMSCRIBE_REDIS_URL", help="Redis URL", metavar="URL"
    )


def _target(args: argparse.Namespace) -> tuple[HotwordStore, ListRef]:
    if not args.tenant:
        raise ConfigError("--tenant is required (or STREAMSCRIBE_TENANT)")
    if args.call is not None and not args.call:
        # An unset shell variable (--call "$CALL") must not silently target the tenant's list.
        raise ConfigError(
            "--call (or STREAMSCRIBE_HOTWORDS_CALL) is empty; give a call id, or leave it out "
            "for the tenant's list"
        )
    ref = ListRef(args.tenant, args.call).validated()
    settings = settings_from_args(args)
    section = settings.hotwords
    client = connect(
        not_empty(args.redis_url, "--redis-url", "STREAMSCRIBE_REDIS_URL") or settings.redis.url
    )
    store = HotwordStore(
        client,
        HotwordKeys(section.key_prefix),
        call_ttl_s=section.call_ttl_s,
        on_problem=_warn,
    )
    return store, ref


def _warn(line: str) -> None:
    print(f"streamscribe: warning: {line}", file=sys.stderr)


def _add(args: argparse.Namespace) -> int:
    boost = parse_boost(args.boost)
    store, ref = _target(args)
    result = store.add(ref, args.phrases, boost)
    _report(ref, "added or updated", result)
    return 0


def _remove(args: argparse.Namespace) -> int:
    store, ref = _target(args)
    result = store.remove(ref, args.phrases)
    _report(ref, "removed", result)
    requested = len({normalize_phrase(p) for p in args.phrases})
    if result.affected < requested:
        print(f"{requested - result.affected} phrase(s) were not in the list")
    return 0


def _clear(args: argparse.Namespace) -> int:
    store, ref = _target(args)
    _report(ref, "cleared", store.clear(ref))
    return 0


def _list(args: argparse.Namespace) -> int:
    store, ref = _target(args)
    hotword_list = store.read(ref)
    if args.effective and ref.call_id is not None:
        tenant_list = store.read(ListRef(ref.tenant))
        merged = merge_entries(tenant_list.entries, hotword_list.entries)
        hotword_list = HotwordList(ref, merged, hotword_list.expires_at_ms)
    ttl_s = (
        None
        if hotword_list.expires_at_ms is None
        else max(0, (hotword_list.expires_at_ms - WallClock().now_ms()) // 1000)
    )
    if args.json:
        print(
            orjson.dumps(
                {
                    "tenant": ref.tenant,
                    "call_id": ref.call_id,
                    "ttl_s": ttl_s,
                    "version": store.version(),
                    "entries": [
                        {"phrase": e.phrase, "boost": e.boost} for e in hotword_list.entries
                    ],
                }
            ).decode()
        )
        return 0
    expiry = "" if ttl_s is None else f", expires in {ttl_s} s"
    merged_note = " (merged with the tenant's)" if args.effective and ref.call_id else ""
    print(f"{ref.describe()}{merged_note}: {len(hotword_list.entries)} entries{expiry}")
    width = max((len(e.phrase) for e in hotword_list.entries), default=0)
    for entry in hotword_list.entries:
        print(f"  {entry.phrase:<{width}}  {entry.boost:g}")
    return 0


def _report(ref: ListRef, verb: str, result: ChangeResult) -> None:
    version = "no change" if result.version is None else f"version {result.version}"
    print(f"{ref.describe()}: {verb} {result.affected}, list has {result.size} ({version})")
