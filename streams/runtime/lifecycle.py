"""What a worker is doing, told once per step of its life: for the operator's log, for ``/healthz``
and ``/readyz``, and for the gauges that follow recovery.

The lines, each one ``info`` line (``warning``/``critical`` for a stop after an error), with their
facts also as ``fields`` for the JSON log format (:mod:`streams.ops.logs`):

- ``start``: stage, version, compiled or pure, worker id, app id, shards, brokers;
- ``assignment``: the shards and input partitions owned now, those gained and those lost;
- ``recovery``: per shard being rebuilt from its changelog, every ``recovery_log_interval_s``
  while it runs: changelog offsets replayed of those to replay, percent, rate, time left;
- ``ready``: state caught up with the changelog, consuming; how long since start or assignment;
- ``stop``: clean or not, and the last offsets this worker committed per input partition.

Why one object: the engine's thread writes these facts and two other threads read them (the HTTP
endpoint answering probes, the metrics scrape). Every field is a plain value rebound as a whole,
so a reader sees an old or a new value, never half of one. Nothing here runs per record: the
engine calls :meth:`Lifecycle.turned` once per loop turn and :meth:`Lifecycle.committed` once per
committed transaction; recovery calls :meth:`Lifecycle.recovering` once per consumed chunk.

Recovery progress is counted in changelog offsets, because the end offset is all that is known in
advance (a compacted changelog has fewer records than offsets, and transaction markers take an
offset each): the percent and the time left are exact in offsets, the record count an upper bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

log: Final = logging.getLogger("streams.lifecycle")

Partition = tuple[str, int]
STALLED_LINE_INTERVALS: Final = 6  # a shard that does not advance is told every sixth interval


@dataclass(frozen=True, slots=True)
class ShardRecovery:
    """One shard's recovery: changelog offsets ``start`` to ``end`` (exclusive), ``reached`` so far."""

    start: int
    end: int
    reached: int
    began: float  # time.monotonic()

    @property
    def total(self) -> int:
        return self.end - self.start

    @property
    def done(self) -> int:
        return min(self.reached, self.end) - self.start

    @property
    def remaining(self) -> int:
        return self.total - self.done

    @property
    def ratio(self) -> float:
        return 1.0 if self.total <= 0 else self.done / self.total


@dataclass(frozen=True, slots=True)
class LifecycleSnapshot:
    """The lifecycle facts at one moment (:meth:`Lifecycle.snapshot`): what the probes and the
    lifecycle gauges read, from their own threads. ``recovery`` and ``standbys`` are the lifecycle's
    own maps, which it rebinds whole and never changes in place."""

    phase: str
    ready: bool
    assigned: bool
    last_turn: float  # time.monotonic()
    last_commit_time: float  # time.time()
    owned: frozenset[Partition]
    shard_topics: frozenset[str]
    recovery: Mapping[int, ShardRecovery]
    standbys: Mapping[int, int]
    standbys_warm: bool


def _ready(phase: str, standbys_warm: bool) -> bool:
    return phase == "running" and standbys_warm


def _shards(shards: Iterable[int]) -> str:
    listed = sorted(shards)
    return "none" if not listed else ", ".join(map(str, listed))


def _partitions(partitions: Iterable[Partition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return "none" if not by_topic else "; ".join(
        f"{topic}[{','.join(map(str, parts))}]" for topic, parts in by_topic.items())


def _offsets(offsets: Mapping[Partition, int]) -> str:
    by_topic: dict[str, list[str]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(f"{partition}:{offset}")
    listed = [f"{topic} {' '.join(parts)}" for topic, parts in by_topic.items()]
    return "; ".join(listed) or "none"


class Lifecycle:
    """The lifecycle facts of one engine, and the lines that tell them (see the module docstring)."""

    def __init__(self, stage: str, shard_topics: Iterable[str], recovery_log_interval_s: float) -> None:
        self.stage = stage
        self.shard_topics = frozenset(shard_topics)  # partition i of each is shard i
        self.recovery_log_interval_s = recovery_log_interval_s
        self.phase = "starting"  # starting, warming, joining, recovering, running, stopping, stopped
        self.began = time.monotonic()
        self.last_turn = self.began  # time.monotonic() of the main loop's last sign of life
        self.last_commit_time = time.time()  # wall clock: a gauge, compared with Prometheus's time()
        self.assigned = False
        self.owned: frozenset[Partition] = frozenset()
        self.recovery: dict[int, ShardRecovery] = {}
        self.committed_offsets: dict[Partition, int] = {}
        self._assigned_at = self.began
        self._recovery_s = 0.0
        self._recovered_records = 0
        self._last_progress_log = 0.0
        self._logged: dict[int, tuple[int, float]] = {}  # shard -> (done, when) of its last line
        self._ready_pending = False
        # Standby copies kept here (streams/runtime/standby.py): shard -> changelog offsets not yet
        # applied; and whether each has reached its changelog's end once since it was placed.
        self.standbys: dict[int, int] = {}
        self.standbys_warm = True

    # -- start and the loop ---------------------------------------------------------------

    def started(self, facts: Mapping[str, Any]) -> None:
        """The start line; ``facts``: version, build, worker id, app id, shards, brokers..."""
        text = ", ".join(f"{name} {value}" for name, value in facts.items())
        log.info("start: %s: %s", self.stage, text, extra={"fields": {"event": "start", **facts}})

    def warming(self) -> None:
        """Catching up on the shards it will own, before joining the group (:mod:`streams.runtime.warmth`)."""
        self.phase = "warming"
        self.last_turn = time.monotonic()

    def joining(self) -> None:
        self.phase = "joining"
        self.last_turn = time.monotonic()

    def turned(self) -> None:
        """The main loop turned (once per loop turn, and per part of a long batch)."""
        self.last_turn = time.monotonic()
        if self._ready_pending:
            self._ready()

    def committed(self, offsets: Iterable[tuple[str, int, int]]) -> None:
        """A transaction committed these next offsets (topic, partition, offset): once per commit."""
        for topic, partition, offset in offsets:
            self.committed_offsets[(topic, partition)] = offset
        self.last_commit_time = time.time()

    # -- assignment and recovery ------------------------------------------------------------

    def assigned_now(self, owned: Iterable[Partition]) -> None:
        """The group's assignment arrived: log what is owned, gained and lost since the last one."""
        now = frozenset(owned)
        before, self.owned = self.owned, now
        shards = {p for t, p in now if t in self.shard_topics}
        inputs = {item for item in now if item[0] not in self.shard_topics}
        lost = before - now
        gained = now - before
        self.assigned = True
        self._assigned_at = time.monotonic()
        self.last_turn = self._assigned_at
        self._ready_pending = True
        # Every owned shard has a recovery entry (a current one: nothing to replay), so its gauges
        # exist from the assignment on; recovery overwrites those it replays.
        self.recovery = {shard: self.recovery.get(shard) or ShardRecovery(0, 0, 0, self._assigned_at)
                         for shard in shards}
        self.phase = "assigned"
        log.info("assignment: owns shards %s and input partitions %s; gained %s; lost %s",
                 _shards(shards), _partitions(inputs), _partitions(gained), _partitions(lost),
                 extra={"fields": {"event": "assignment", "shards": sorted(shards),
                                   "inputs": [f"{t}[{p}]" for t, p in sorted(inputs)],
                                   "gained": [f"{t}[{p}]" for t, p in sorted(gained)],
                                   "lost": [f"{t}[{p}]" for t, p in sorted(lost)]}})

    def revoked(self, partitions: Iterable[Partition]) -> None:
        gone = {p for t, p in partitions if t in self.shard_topics}
        self.recovery = {shard: job for shard, job in self.recovery.items() if shard not in gone}

    def recovery_pending(self) -> bool:
        return any(job.remaining > 0 for job in self.recovery.values())

    def recovering(self, positions: Mapping[int, tuple[int, int, int]]) -> None:
        """Recovery's progress: shard -> (start, reached, end) offsets of its changelog partition.

        Called by recovery once per consumed chunk; logs one line per shard still replaying every
        ``recovery_log_interval_s``."""
        now = time.monotonic()
        self.last_turn = now
        updated = dict(self.recovery)
        for shard, (start, reached, end) in positions.items():
            before = updated.get(shard)
            same = before is not None and (before.start, before.end) == (start, end)
            updated[shard] = ShardRecovery(start, end, reached, before.began if same and before else now)
        self.recovery = updated
        if self.recovery_pending():
            self.phase = "recovering"
        if not self._last_progress_log:
            self._log_recovery_start()
            self._last_progress_log = now
        elif now - self._last_progress_log >= self.recovery_log_interval_s:
            for shard, job in sorted(self.recovery.items()):
                if job.remaining > 0 and self._worth_a_line(shard, job, now):
                    self._log_progress(shard, job, now)
            self._last_progress_log = now

    def _worth_a_line(self, shard: int, job: ShardRecovery, now: float) -> bool:
        """A shard that advanced gets its line; one that did not, a line every few intervals (a
        stuck recovery must show, a shard waiting for its last transaction marker need not repeat)."""
        done, when = self._logged.get(shard, (-1, 0.0))
        if job.done == done and now - when < STALLED_LINE_INTERVALS * self.recovery_log_interval_s:
            return False
        self._logged[shard] = (job.done, now)
        return True

    def _log_recovery_start(self) -> None:
        jobs = {shard: job.total for shard, job in sorted(self.recovery.items()) if job.total > 0}
        if jobs:
            log.info("recovery: rebuilding shards %s from the changelog: %d records to replay (%s)",
                     _shards(jobs), sum(jobs.values()),
                     ", ".join(f"shard {shard}: {total}" for shard, total in jobs.items()),
                     extra={"fields": {"event": "recovery_start", "to_replay": sum(jobs.values()),
                                       "shards": {str(shard): total for shard, total in jobs.items()}}})

    def _log_progress(self, shard: int, job: ShardRecovery, now: float) -> None:
        elapsed_s = max(now - job.began, 1e-6)
        rate = job.done / elapsed_s
        left_s = job.remaining / rate if rate > 0 else None
        left = ("time left unknown" if left_s is None
                else f"about {left_s:.1f} s left" if left_s < 10 else f"about {left_s:.0f} s left")
        log.info("recovery: shard %d: %d of %d changelog records replayed (%.0f%%), %.0f records/s, "
                 "%s", shard, job.done, job.total, 100 * job.ratio, rate, left,
                 extra={"fields": {"event": "recovery", "shard": shard, "replayed": job.done,
                                   "to_replay": job.total, "percent": round(100 * job.ratio, 1),
                                   "records_per_s": round(rate), "seconds_left": left_s}})

    def recovered(self, records: int, seconds: float) -> None:
        """Recovery of the shards just assigned finished (zero records when they were current); the
        ``ready`` line counts every recovery since the last one (a warm-up's before joining too)."""
        self._recovered_records += records
        self._recovery_s += seconds
        self._logged = {}
        self.recovery = {shard: ShardRecovery(job.start, job.end, job.end, job.began)
                         for shard, job in self.recovery.items()}
        self._last_progress_log = 0.0

    def _ready(self) -> None:
        self._ready_pending = False
        self.phase = "running"
        now = time.monotonic()
        log.info("ready: state caught up with the changelog (%d records replayed in %.1f s), consuming; "
                 "%.1f s after the assignment, %.1f s after start", self._recovered_records,
                 self._recovery_s, now - self._assigned_at, now - self.began,
                 extra={"fields": {"event": "ready", "replayed": self._recovered_records,
                                   "recovery_s": round(self._recovery_s, 3),
                                   "since_assignment_s": round(now - self._assigned_at, 3),
                                   "since_start_s": round(now - self.began, 3)}})
        self._recovered_records, self._recovery_s = 0, 0.0

    def standby(self, lags: Mapping[int, int], warm: bool) -> None:
        """The standby copies' lag (shard -> offsets), about once a second; ``warm``: each has
        caught up with its changelog once. Tells when they first all are."""
        if warm and not self.standbys_warm and lags:
            log.info("standby: shards %s caught up with their changelogs", _shards(lags),
                     extra={"fields": {"event": "standby_warm", "shards": sorted(lags)}})
        self.standbys, self.standbys_warm = dict(lags), warm

    @property
    def ready(self) -> bool:
        """Running, and every standby copy here has caught up once: a worker added in a rolling
        restart is ready to stand in for the next one to go, not only to work."""
        return _ready(self.phase, self.standbys_warm)

    def snapshot(self) -> LifecycleSnapshot:
        """The facts now, each field read once (another thread may ask: see the module docstring)."""
        phase, warm = self.phase, self.standbys_warm
        return LifecycleSnapshot(phase, _ready(phase, warm), self.assigned, self.last_turn,
                                 self.last_commit_time, self.owned, self.shard_topics, self.recovery,
                                 self.standbys, warm)

    # -- stop ------------------------------------------------------------------------------

    def stopping(self) -> None:
        if self.phase != "stopped":
            self.phase = "stopping"

    def stopped(self, error: BaseException | None) -> None:
        """The stop line: clean, or after ``error``; the last offsets this worker committed."""
        self.phase = "stopped"
        offsets = _offsets(self.committed_offsets)
        fields = {"event": "stop", "clean": error is None,
                  "committed": {f"{t}[{p}]": o for (t, p), o in sorted(self.committed_offsets.items())}}
        if error is None:
            log.info("stop: clean, after %.1f s; last offsets committed by this run: %s",
                     time.monotonic() - self.began, offsets, extra={"fields": fields})
        else:
            fields["error"] = type(error).__name__
            log.warning("stop: not clean (%s: %s); last offsets committed by this run: %s",
                        type(error).__name__, error, offsets, extra={"fields": fields})
