"""Re-fingerprinting the URL seen-set for a new canonicalization: the store's rewrite.

A URL stage refuses to run on state built with another canonicalization version or profile (see
:mod:`streams.stages.url_dedup.stage`). ``python -m streams url-dedup-migrate`` moves the state over,
in Kafka, where it lives: it is a reshard to the same shard count (:mod:`streams.runtime.reshard`,
with its checks that the workers are stopped and the shard topic drained, a new generation of the
state, and the switch to it as the one commit point), whose copy finds the state built with
another canonicalization and hands each entry to :class:`Refingerprint` (the store's
``rewrite``):

- each seen fingerprint's mark keeps its canonical URL (and the name of its crawl, for a URL of a
  named crawl: :func:`~streams.urls.canonical.scoped`) and the time it was marked seen
  (:mod:`streams.stages.url_dedup.marks`): the URL is canonicalized anew and goes, with its time,
  under its new fingerprint, to the shard the new fingerprint routes to;
- two URLs the new rules make one are one mark (the first met);
- a URL the new rules refuse keeps its old fingerprint;
- the new version key goes to every shard (the runtime writes a store's identity).

Workers then start with the new settings and rebuild their local stores from the new generation's
changelog, as after any reshard. URLs are re-canonicalized from their stored canonical form, so a
move to a stricter profile or a newer version is exact; a move that needs information a canonical
form dropped (aggressive back to safe) cannot restore it. Bloom-only state keeps no URLs and cannot
be migrated: start it afresh under a new ``app_id``. (Until 2026-12-07 the command rewrote the
changelog in place with clients of its own, in one transaction, reading the first generation's
changelog even after a reshard.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streams.errors import RecordRejected, ReshardRefused
from streams.runtime.extras import Placed
from streams.stages.url_dedup import marks
from streams.stages.url_dedup.forgetting import UrlDedupMove
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.urls import canonical

FINGERPRINT_BYTES = 16


@dataclass
class MigrationReport:
    urls: int = 0
    moved: int = 0
    merged: int = 0      # distinct old fingerprints that became one new fingerprint
    rejected: int = 0    # stored URLs the new rules refuse (kept under their old fingerprint)

    def summary(self) -> str:
        return (f"re-fingerprinted {self.urls} URLs: {self.moved} moved, {self.merged} merged, "
                f"{self.rejected} refused by the new rules (kept)")


def _moved(value: bytes, scoped: str) -> bytes:
    """The mark of a URL under its new fingerprint: its time kept (a mark of format 1 has none)."""
    at = marks.seen_at_ms(value)
    return scoped.encode() if at is None else marks.mark(scoped, at)


class Refingerprint(UrlDedupMove):
    """The URL stage's rewrite (module docstring): marks under their new fingerprints, the rest of
    the state moved as a reshard moves it."""

    def __init__(self, settings: UrlDedupSettings, old_shards: int, shards: int) -> None:
        super().__init__(old_shards, shards)
        self._rules = settings.canonical()
        self._written: set[bytes] = set()
        self.report = MigrationReport()

    def place(self, old_shard: int, key: bytes, value: bytes) -> Iterable[Placed]:
        if len(key) != FINGERPRINT_BYTES:
            return super().place(old_shard, key, value)
        self.report.urls += 1
        if not value:
            raise ReshardRefused("this state keeps no URLs (Bloom-only mode) and cannot be "
                                 "re-fingerprinted: start it afresh under a new app_id")
        try:
            scoped = marks.scoped_url(value)
            if scoped is None:
                raise RecordRejected("invalid_url", "a mark without its URL")
            crawl, url = canonical.unscoped(scoped)
            new_url = canonical.canonicalize(url, self._rules)
        except RecordRejected:
            self.report.rejected += 1
            return self._keep(key, value)
        new_key = canonical.fingerprint(new_url, crawl)
        if new_key in self._written:
            self.report.merged += 1
            return ()
        if new_key != key:
            self.report.moved += 1
            value = _moved(value, canonical.scoped(new_url, crawl))
        return self._keep(new_key, value)

    def _keep(self, key: bytes, value: bytes) -> Iterable[Placed]:
        self._written.add(key)
        return ((self.shard_of(key), key, value),)

    def summary(self) -> str:
        return self.report.summary()
