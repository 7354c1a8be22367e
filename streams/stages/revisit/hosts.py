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
is Gamma with that mean and a shape chosen per host (below; ``alpha`` pseudo-changes over ``alpha / mean``
pseudo-seconds; :func:`streams.stages.revisit.estimators.posterior_rate`). A shard holds a sample of
each host's pages (the stage is sharded by URL), so the shards' priors agree up to sampling noise.

A change counts once per fetch interval in which one was seen (several changes in one interval are
one), so the mean is a lower bound for hosts whose pages change faster than they are fetched; as a
prior it only needs the order of magnitude, which is what makes quiet pages of busy and of quiet
sites differ.

**How much a host's pages agree** sets how hard each page is pulled to the host's mean: the prior's
shape. Pages of a documentation site change at rates within a factor of a few of each other, and a
strong prior (shape 0.5) lets a page fetched twice borrow its site's pace. A host whose pages
mix every rate (a news site's front pages and archive, Cho and Garcia-Molina's model of rates
spread over orders of magnitude) needs a weak one (0.125 to 0.25): pulled to the host's mean, a
page that changes hourly looks as if it changed every few days, worth following, and a page that
never changes as if it changed weekly. The spread cannot be read off the changes counted (a page
changing hourly shows at most one change a fetch, so fast and slow pages look alike), so the host
lets its pages' own next fetches choose: for each shape of :data:`PRIOR_SHAPES`, before a re-fetch
joins the host, the page's rate estimated with that shape predicts whether the fetch finds a
change (``p = 1 - exp(-lambda t)``), and the shape's score gains the log of the probability it
gave to what happened (decayed as the changes are). The prior takes the best-scoring shape, the
default :data:`DEFAULT_SHAPE` until one scores better. No shape stronger than the default is offered:
on the real histories' documentation sites a shape of 1 won the scores by a few nats and lost
freshness on some sites as often as it gained on others (docs/benchmarks.md, "Revisit"); the
default was measured on those sites. This is empirical Bayes by prequential
(predictive) likelihood: A. P. Dawid, "Present position and potential developments: some
personal views. Statistical theory: the prequential approach", JRSS A 147(2), 1984; the marginal
likelihood of a shape is the product of its one-step predictions.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Final

from streams.errors import StateError
from streams.stages.revisit.estimators import Prior, estimate_rate
from streams.stages.revisit.history import FetchHistory, Observation

HOST_PREFIX: Final = b"p"
PRIOR_SHAPES: Final = (0.125, 0.25, 0.5)
DEFAULT_SHAPE: Final = 0.5
MEMORY_S: Final = 180 * 86_400.0
LEAST_PREDICTED: Final = 1e-6   # a probability given to what happened is scored as at least this
_VERSION: Final = 2
_STATE: Final = struct.Struct(f">Bddd{len(PRIOR_SHAPES)}d")
_STATE_1: Final = struct.Struct(">Bddd")   # version 1: no scores (every shape scored 0)


@dataclass
class HostChanges:
    """Changes seen and seconds watched over a host's pages (decayed to ``clock_s``)."""

    changes: float = 0.0
    watched_s: float = 0.0
    clock_s: float = math.nan
    scores: list[float] = field(default_factory=lambda: [0.0] * len(PRIOR_SHAPES))

    def observe(self, observation: Observation, now_s: float, page: FetchHistory | None,
                initial_interval_s: float) -> None:
        """One re-fetch of one of the host's pages, compared with the fetch before; ``page``, the page's
        history before it, scores the shapes by how well each predicted it (module docstring), the
        host's mean before any change being one per ``initial_interval_s``."""
        self.decay(now_s)
        if page is not None and page.observations:
            self._score(page, observation, initial_interval_s)
        self.changes += observation.changed
        self.watched_s += observation.interval_s

    def _score(self, page: FetchHistory, observation: Observation, initial_interval_s: float) -> None:
        mean_per_s = self.mean_rate_per_s(initial_interval_s)
        for i, shape in enumerate(PRIOR_SHAPES):
            rate_per_s = estimate_rate(page, Prior.with_mean(mean_per_s, shape))
            assert rate_per_s is not None  # the page has observations
            expected = rate_per_s * observation.interval_s
            if observation.changed:
                self.scores[i] += math.log(max(-math.expm1(-expected), LEAST_PREDICTED))
            else:
                self.scores[i] -= min(expected, -math.log(LEAST_PREDICTED))

    def shape(self) -> float:
        """The prior's shape: the best-scoring of :data:`PRIOR_SHAPES`, :data:`DEFAULT_SHAPE` on a tie."""
        best = max(range(len(PRIOR_SHAPES)),
                   key=lambda i: (self.scores[i], PRIOR_SHAPES[i] == DEFAULT_SHAPE))
        return PRIOR_SHAPES[best]

    def decay(self, now_s: float) -> None:
        if not math.isnan(self.clock_s) and now_s > self.clock_s:
            weight = math.exp(-(now_s - self.clock_s) / MEMORY_S)
            self.changes *= weight
            self.watched_s *= weight
            self.scores = [score * weight for score in self.scores]
        if math.isnan(self.clock_s) or now_s > self.clock_s:
            self.clock_s = now_s

    def mean_rate_per_s(self, initial_interval_s: float) -> float:
        """The host's mean change rate, one change per ``initial_interval_s`` before any is seen."""
        return (self.changes + 1.0) / (self.watched_s + initial_interval_s)

    def prior(self, initial_interval_s: float) -> Prior:
        return Prior.with_mean(self.mean_rate_per_s(initial_interval_s), self.shape())

    def encode(self) -> bytes:
        return _STATE.pack(_VERSION, self.changes, self.watched_s, self.clock_s, *self.scores)

    @classmethod
    def decode(cls, raw: bytes | None) -> HostChanges:
        """Version 2, or version 1 (written before the shapes were scored: every score 0)."""
        if raw is None:
            return cls()
        if len(raw) == _STATE_1.size and raw[0] == 1:
            _, changes, watched_s, clock_s = _STATE_1.unpack(raw)
            return cls(changes, watched_s, clock_s)
        if len(raw) != _STATE.size or raw[0] != _VERSION:
            raise StateError(f"revisit host state of format {raw[0] if raw else 'empty'}, {len(raw)} bytes")
        _, changes, watched_s, clock_s, *scores = _STATE.unpack(raw)
        return cls(changes, watched_s, clock_s, list(scores))


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
        merged.scores = [a + b for a, b in zip(merged.scores, state.scores, strict=True)]
    merged.changes /= parts
    merged.watched_s /= parts
    merged.scores = [score / parts for score in merged.scores]
    return merged
