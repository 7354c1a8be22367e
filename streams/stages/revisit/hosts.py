"""What a host's pages have shown of change: the prior of each of its pages' change rates.

Pages of one site change alike (a documentation site's pages every few months, a blog's posts
almost never, a news site's front pages hourly), and a page's own history is short: one fetched a
few times with no change seen says little about itself, much about nothing else. So each page's
rate is estimated against its host's (empirical Bayes: the prior is estimated from the pages that
share it; B. Efron and C. Morris, "Data analysis using Stein's estimator and its generalizations",
JASA 70, 1975; for Poisson rates with a Gamma prior, the posterior mean shrinks a page's
``changes / time`` towards the host's mean, the more the less the page has been watched).

:class:`HostChanges` keeps, per host and shard, the changes seen and the time watched over all the
host's pages in the shard, each weighted ``exp(-age / MEMORY_S)`` so the prior follows a site whose
pace changes. Its mean rate is ``(changes + 1) / (watched + initial_interval)``: before anything is
seen, one change per initial interval, the rate the policies assume of a new page. The page's prior
is Gamma with that mean and shape :data:`PRIOR_SHAPE` (``alpha`` pseudo-changes over ``alpha / mean``
pseudo-seconds; :func:`streams.stages.revisit.estimators.posterior_rate`). A shard holds a sample of
each host's pages (the stage is sharded by URL), so the shards' priors agree up to sampling noise.

A change counts once per fetch interval in which one was seen (several changes in one interval are
one), so the mean is a lower bound for hosts whose pages change faster than they are fetched; as a
prior it only needs the order of magnitude, which is what makes quiet pages of busy and of quiet
sites differ.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Final

from streams.errors import StateError
from streams.stages.revisit.estimators import Prior
from streams.stages.revisit.history import Observation

HOST_PREFIX: Final = b"p"
PRIOR_SHAPE: Final = 0.5
MEMORY_S: Final = 180 * 86_400.0
_VERSION: Final = 1
_STATE: Final = struct.Struct(">Bddd")


@dataclass
class HostChanges:
    """Changes seen and seconds watched over a host's pages (decayed to ``clock_s``)."""

    changes: float = 0.0
    watched_s: float = 0.0
    clock_s: float = math.nan

    def observe(self, observation: Observation, now_s: float) -> None:
        """One re-fetch of one of the host's pages, compared with the fetch before."""
        self.decay(now_s)
        self.changes += observation.changed
        self.watched_s += observation.interval_s

    def decay(self, now_s: float) -> None:
        if not math.isnan(self.clock_s) and now_s > self.clock_s:
            weight = math.exp(-(now_s - self.clock_s) / MEMORY_S)
            self.changes *= weight
            self.watched_s *= weight
        if math.isnan(self.clock_s) or now_s > self.clock_s:
            self.clock_s = now_s

    def mean_rate_per_s(self, initial_interval_s: float) -> float:
        """The host's mean change rate, one change per ``initial_interval_s`` before any is seen."""
        return (self.changes + 1.0) / (self.watched_s + initial_interval_s)

    def prior(self, initial_interval_s: float) -> Prior:
        return Prior.with_mean(self.mean_rate_per_s(initial_interval_s), PRIOR_SHAPE)

    def encode(self) -> bytes:
        return _STATE.pack(_VERSION, self.changes, self.watched_s, self.clock_s)

    @classmethod
    def decode(cls, raw: bytes | None) -> HostChanges:
        if raw is None:
            return cls()
        if len(raw) != _STATE.size or raw[0] != _VERSION:
            raise StateError(f"revisit host state of format {raw[0] if raw else 'empty'}, {len(raw)} bytes")
        _, changes, watched_s, clock_s = _STATE.unpack(raw)
        return cls(changes, watched_s, clock_s)


def host_key(host: str) -> bytes:
    """The state key of a host's changes (the host is at most 253 bytes: RFC 1035 section 2.3.4)."""
    return HOST_PREFIX + host.encode("utf-8", "surrogatepass")


def merge_hosts(states: list[HostChanges], parts: int) -> HostChanges:
    """One host's states from several shards, decayed to the latest clock, added, and split in
    ``parts`` (a reshard: each new shard holds ``1 / parts`` of the host's pages)."""
    clocks = [s.clock_s for s in states if not math.isnan(s.clock_s)]
    merged = HostChanges(clock_s=max(clocks) if clocks else math.nan)
    for state in states:
        if not math.isnan(merged.clock_s):
            state.decay(merged.clock_s)
        merged.changes += state.changes
        merged.watched_s += state.watched_s
    merged.changes /= parts
    merged.watched_s /= parts
    return merged
