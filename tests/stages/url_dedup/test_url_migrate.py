"""The URL stage's migration as a store rewrite (streams/stages/url_dedup/migrate.py): each mark
under the fingerprint the new rules give it, its time kept; URLs made one merged; refused ones
kept; a Bloom-only state refused; and the reshard choosing the rewrite only for a state of another
identity (streams/runtime/reshard.py). No broker: tests/kafka/test_stage_kafka.py runs the command."""

from __future__ import annotations

import pytest

from streams.errors import ReshardRefused
from streams.runtime.partitioner import partition_for
from streams.runtime.reshard import _rewrite_for
from streams.stages.url_dedup import marks
from streams.stages.url_dedup.forgetting import FORGETTING_KEY
from streams.stages.url_dedup.migrate import Refingerprint
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.stages.url_dedup.stage import VERSION_KEY, UrlDedupStage
from streams.urls.canonical import canonicalize, fingerprint, scoped

SHARDS = 4
AT_MS = 1_800_000_000_000
AGGRESSIVE = UrlDedupSettings(profile="aggressive")


def _mark(url: str, crawl: str = "") -> tuple[bytes, bytes]:
    """A mark as a safe-profile worker stored it: key and value."""
    canonical = canonicalize(url)
    return fingerprint(canonical, crawl), marks.mark(scoped(canonical, crawl), AT_MS)


@pytest.mark.parametrize("crawl", ["", "june"])
def test_a_mark_moves_to_its_new_fingerprint_and_shard_with_its_time(crawl: str) -> None:
    move = Refingerprint(AGGRESSIVE, SHARDS, SHARDS)
    key, value = _mark("http://www.shop.example/item?utm_source=a&id=1", crawl)
    [(shard, new_key, new_value)] = move.place(0, key, value)
    new_url = canonicalize("http://www.shop.example/item?utm_source=a&id=1", AGGRESSIVE.canonical())
    assert new_key == fingerprint(new_url, crawl) != key
    assert shard == partition_for(new_key, SHARDS)
    assert (marks.scoped_url(new_value), marks.seen_at_ms(new_value)) == (scoped(new_url, crawl), AT_MS)
    assert (move.report.urls, move.report.moved) == (1, 1)


def test_urls_the_new_rules_make_one_are_one_mark_and_unchanged_ones_stay() -> None:
    move = Refingerprint(AGGRESSIVE, SHARDS, SHARDS)
    placed = [entry for url in ("http://www.shop.example/item?id=1&utm_medium=b",
                                "http://shop.example/item?id=1", "http://other.example/")
              for entry in move.place(0, *_mark(url))]
    assert len(placed) == 2 and move.report.merged == 1
    unchanged_key, unchanged_value = _mark("http://other.example/")
    assert placed[-1] == (partition_for(unchanged_key, SHARDS), unchanged_key, unchanged_value)
    assert "re-fingerprinted 3 URLs: 1 moved, 1 merged, 0 refused" in move.summary()


def test_a_mark_without_its_url_is_kept_under_its_old_fingerprint() -> None:
    move = Refingerprint(AGGRESSIVE, SHARDS, SHARDS)
    key = fingerprint("http://x.example/")
    assert list(move.place(0, key, b"\x02")) == [(partition_for(key, SHARDS), key, b"\x02")]
    assert move.report.rejected == 1


def test_a_bloom_only_state_and_a_forget_under_way_are_refused() -> None:
    move = Refingerprint(AGGRESSIVE, SHARDS, SHARDS)
    with pytest.raises(ReshardRefused, match="Bloom-only"):
        move.place(0, fingerprint("http://x.example/"), b"")
    with pytest.raises(ReshardRefused, match="forget"):
        move.place(0, FORGETTING_KEY, b"{}")


@pytest.mark.parametrize(("stored", "rewrites"), [
    (b"2:safe", False),        # this build's state: moved, not rewritten
    (b"2:aggressive", True),   # another profile's: re-fingerprinted
    (None, False),             # a partition without the identity entry (an empty shard): as this build's
])
def test_the_reshard_rewrites_only_a_state_of_another_identity(stored: bytes | None, rewrites: bool) -> None:
    store = UrlDedupStage(UrlDedupSettings()).store()
    version = store.identity.entries[VERSION_KEY]
    first = {} if stored is None else {VERSION_KEY: stored.replace(b"2", version.split(b":")[0])}
    assert (_rewrite_for(store, first, "t[0]", SHARDS, SHARDS) is not None) == rewrites
