"""Racing copies: copies found through Kafka whatever order the pages arrive in, beside offline mode.

    python -m bench.race_bench [--orders crawl,reversed,shuffled,live] [--workers 1,2]
                               [--partitions 8] [--live-rate 150]

The pages: the shared corpus's HTML pages (``../shared/corpus``, the originals of
testing/neardup_set.py: long enough and not natural copies of each other), fetched on day 0 in a
random crawl order, and planted copies of them on other hosts: exact mirrors fetched a day later
(byte-identical, or with CRLF line endings), URL variants of the page fetched minutes later
(``http://``, a tracking parameter), and near copies fetched a day later (a few words or numbers of
the article changed, testing/neardup_transforms.py). Every page is keyed by its URL, so a copy
usually goes through another partition than its original.

The reference is offline mode (the same stage code, no Kafka) on the pages sorted by their order
key (``fetched_at``). Each Kafka run writes the pages to a fresh ``--partitions`` topic in one
order, then runs ``--workers`` content-seen workers (``--shards`` = partitions) until every page
has its verdict:

- ``crawl``: sorted by ``fetched_at``, written before the workers start (a backlog: after an
  outage, or a WARC replayed);
- ``reversed``: the same backlog, newest first (every copy arrives before its original);
- ``shuffled``: the same backlog in a random order;
- ``live``: in crawl order, written while the workers run, at ``--live-rate`` pages/s.

For each run: duplicates found / offline's duplicates; false duplicates (called duplicate where
offline says unique); duplicates pointed at another original than offline's (see
docs/content-seen.md: an exact copy may name another earlier copy of the same text); verdicts
lost or doubled; clusters without a unique member; pages/s, from the moment the workers' group is
first stable (a worker has its partitions; with two, the rebalance when the second joins is timed)
to the last verdict (not for ``live``, which runs at the producer's pace); and each page's wait for
its verdict, from its input record's timestamp to its verdict's (for a backlog, that includes the
workers' start).

Writes ``bench/results/race.json`` and ``.md``; exits non-zero when a run finds fewer than
``--min-found`` (0.995) of offline's duplicates, calls a duplicate offline does not, or loses or
doubles a verdict.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from streams import records, registry
from streams.runtime.kafka_io import KafkaConfig, produce_all, read_to_end
from streams.runtime.offline import run_offline
from streams.runtime.store import MemoryStore
from streams.stages.content_seen.stage import ContentSeenStage
from streams.topics import Topics
from testing import harness as h
from testing.neardup_set import CORPUS, Source, load_sources
from testing.neardup_transforms import UNIT, change_numbers, change_words

RESULTS = h.PROJECT_ROOT / "bench" / "results"
ORDERS = ("crawl", "reversed", "shuffled", "live")
MIN_FOUND = 0.995
SEED = 18
MAX_BODY_BYTES = 600_000  # base64 grows a body by a third: under the broker's default 1 MB records
START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RacePage:
    """One fetched page of the workload: its record, and what it was planted as."""

    url: str
    fetched_at: datetime
    kind: str  # original, mirror, variant, near
    original: str  # the original's URL (its own for an original)
    value: bytes

    @property
    def key(self) -> bytes:
        return self.url.encode()


def _record(url: str, body: bytes, fetched_at: datetime) -> bytes:
    return orjson.dumps({"url": url, "status": 200, "content_type": "text/html; charset=utf-8",
                         "body_base64": base64.b64encode(body).decode("ascii"),
                         "fetched_at": records.rfc3339(fetched_at)})


def build_pages(sources: list[Source], seed: int = SEED) -> list[RacePage]:
    """Originals in a random crawl order on day 0, and their planted copies (module docstring)."""
    rng = random.Random(seed)
    small = [source for source in sources
             if len(source.html.encode("utf-8", "surrogatepass")) < MAX_BODY_BYTES]
    crawl = rng.sample(small, len(small))
    vocabulary = [unit for source in crawl for unit in UNIT.findall(source.main)[:200]]
    pages: list[RacePage] = []
    later = 0
    for index, source in enumerate(crawl):
        at = START + timedelta(seconds=10 * index)
        body = source.html.encode("utf-8", "surrogatepass")
        pages.append(RacePage(source.url, at, "original", source.url, _record(source.url, body, at)))
        path = source.url.split("/", 3)[3] if source.url.count("/") >= 3 else ""
        if rng.random() < 0.7:
            mirrored = body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") if rng.random() < 0.5 else body
            url, later = f"https://mirror{index}.example.net/{path}", later + 1
            copy_at = START + timedelta(days=1, seconds=10 * later)
            pages.append(RacePage(url, copy_at, "mirror", source.url, _record(url, mirrored, copy_at)))
        if rng.random() < 0.3:
            url = source.url.replace("https://", "http://", 1) + "&utm_source=feed"
            copy_at = at + timedelta(minutes=5, milliseconds=index)
            pages.append(RacePage(url, copy_at, "variant", source.url, _record(url, body, copy_at)))
        if rng.random() < 0.4:
            edit = change_words(source.html, rng, vocabulary) if rng.random() < 0.5 else change_numbers(
                source.html, rng)
            url, later = f"https://near{index}.example.org/{path}", later + 1
            copy_at = START + timedelta(days=1, seconds=10 * later)
            pages.append(RacePage(url, copy_at, "near", source.url,
                                  _record(url, edit.encode("utf-8", "surrogatepass"), copy_at)))
    return sorted(pages, key=lambda page: page.fetched_at)


def arrange(pages: list[RacePage], order: str, seed: int = SEED) -> list[RacePage]:
    """The pages in the order they are written to the topic."""
    if order == "reversed":
        return pages[::-1]
    if order == "shuffled":
        return random.Random(seed).sample(pages, len(pages))
    return list(pages)


def offline_reference(pages: list[RacePage]) -> dict[str, dict[str, Any]]:
    """Offline mode's verdicts on the pages sorted by order key, by URL."""
    topology = registry.spec("content-seen").topology(Topics("offline."), "race")
    with tempfile.TemporaryFile() as sink:
        run_offline(topology, ContentSeenStage(), MemoryStore(), (page.value for page in pages), out=sink)
        sink.seek(0)
        verdicts = [orjson.loads(line) for line in sink.read().splitlines()]
    return {verdict["url"]: verdict for verdict in verdicts}


def _worker(kafka: KafkaConfig, topics: Topics, work: Path, worker: int, partitions: int) -> list[str]:
    return ["env", f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}", sys.executable, "-m", "streams",
            "content-seen", "--topic-prefix", topics.prefix, "--app-id", "race", "--worker-id",
            f"w{worker}", "--state-dir", str(work / f"state-w{worker}"), "--shards", str(partitions)]


def _produce_paced(kafka: KafkaConfig, topic: str, pages: list[RacePage], rate: float) -> None:
    step = 10
    began = time.monotonic()
    for start in range(0, len(pages), step):
        produce_all(kafka, topic, ((page.key, page.value) for page in pages[start:start + step]))
        ahead = began + (start + step) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def _group_stable(admin: AdminClient, group: str) -> bool:
    """Whether ``group`` has settled with a member: the first worker has its partitions."""
    try:
        found = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except KafkaException:  # the group is not there yet
        return False
    return found.state == ConsumerGroupState.STABLE and len(found.members) > 0


class _Verdicts:
    """Verdicts read as they are committed (read_committed), with their record timestamps."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        self._consumer = Consumer(kafka.consumer(h.fresh_name("race-verdicts")))
        self._consumer.subscribe([topic])
        self.found: list[tuple[int, dict[str, Any]]] = []

    def poll(self, seconds: float) -> int:
        for message in self._consumer.consume(10_000, timeout=seconds):
            if message.error() is None:
                self.found.append((message.timestamp()[1], orjson.loads(message.value() or b"{}")))
        return len(self.found)

    def close(self) -> None:
        self._consumer.close()


def _waits_s(kafka: KafkaConfig, topic: str, verdicts: list[tuple[int, dict[str, Any]]]) -> list[float]:
    """Each page's wait: its verdict's timestamp less its input record's (both set when produced)."""
    written = {m.key(): m.timestamp()[1] for m in read_to_end(kafka, topic)}
    return sorted((at - written[v["url"].encode()]) / 1000 for at, v in verdicts
                  if v["url"].encode() in written)


def run_kafka(kafka: KafkaConfig, pages: list[RacePage], order: str, workers: int, partitions: int,
              work: Path, live_rate: float, timeout_s: float = 900.0) -> dict[str, Any]:
    """One run: the pages through ``workers`` workers; their verdicts, the rate and the waits."""
    topics = Topics(f"{h.fresh_name('race')}.")
    h.create_topics(kafka, [topics.fetched_pages, topics.page_verdicts], partitions)
    arranged = arrange(pages, order)
    if order != "live":
        produce_all(kafka, topics.fetched_pages, ((page.key, page.value) for page in arranged))
    group = topics.group("race", "content-seen")
    verdicts = _Verdicts(kafka, topics.page_verdicts)
    logs = [open(work / f"{order}-{workers}-w{n}.log", "wb") for n in range(workers)]  # noqa: SIM115
    processes = [subprocess.Popen(_worker(kafka, topics, work / f"{order}-{workers}", n, partitions),
                                  stdout=log, stderr=subprocess.STDOUT, cwd=h.PROJECT_ROOT)
                 for n, log in enumerate(logs)]
    began = time.monotonic()
    producer = threading.Thread(target=_produce_paced, daemon=True,
                                args=(kafka, topics.fetched_pages, arranged, live_rate))
    if order == "live":
        producer.start()
    admin = AdminClient(kafka.admin())
    ready: float | None = None
    try:
        while verdicts.poll(0.2) < len(pages):
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"{len(verdicts.found)} of {len(pages)} verdicts in {timeout_s} s")
            if ready is None and _group_stable(admin, group):
                ready = time.monotonic()
            if any(process.poll() is not None for process in processes):
                raise RuntimeError(f"a worker exited; see {work}")
        finished = time.monotonic()
        verdicts.poll(2.0)  # anything doubled after the last page's verdict
    finally:
        verdicts.close()
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
    seconds = finished - (ready or began)
    waits = _waits_s(kafka, topics.fetched_pages, verdicts.found)
    return {"order": order, "workers": workers, "verdicts": [v for _, v in verdicts.found],
            "seconds": round(seconds, 1),
            # live: the pages come at the producer's rate, so only the waits say how the stage kept up
            "pages_per_s": None if order == "live" else round(len(pages) / seconds),
            "wait_s_median": round(waits[len(waits) // 2], 2) if waits else None,
            "wait_s_max": round(waits[-1], 2) if waits else None}


def score(pages: list[RacePage], reference: dict[str, dict[str, Any]],
          verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's verdicts against offline's: duplicates found, false duplicates, lost, doubled."""
    counts = Counter(verdict["url"] for verdict in verdicts)
    found = {verdict["url"]: verdict for verdict in verdicts}
    expected = {url for url, verdict in reference.items() if verdict["verdict"] == "duplicate"}
    called = {url for url, verdict in found.items() if verdict["verdict"] == "duplicate"}
    unique = {url for url, verdict in found.items() if verdict["verdict"] == "unique"}
    clusters: dict[str, set[str]] = {}
    for page in pages:
        clusters.setdefault(page.original, set()).add(page.url)
    other_original = sum(1 for url in called & expected
                         if found[url]["duplicate_of"] != reference[url]["duplicate_of"])
    return {
        "pages": len(pages),
        "offline_duplicates": len(expected),
        "duplicates_found": len(called & expected),
        "found_share": round(len(called & expected) / max(1, len(expected)), 4),
        "false_duplicates": len(called - expected),
        "other_original": other_original,
        "lost": len({page.url for page in pages} - counts.keys()),
        "doubled": sum(1 for n in counts.values() if n > 1),
        "clusters_without_unique": sum(1 for members in clusters.values()
                                       if not members & unique and any(reference[u]["verdict"] == "unique"
                                                                       for u in members)),
    }


def _markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [f"Command: `{meta['command']}` ({meta['date']}); {meta['pages']:,} pages "
             f"({meta['kinds']}), {meta['partitions']} partitions and shards. Offline mode on the "
             f"pages sorted by order key calls {meta['offline_duplicates']} of them duplicates.", "",
             "| order | workers | found / offline's | share | false duplicates | other original | lost "
             "| doubled | clusters without unique | pages/s | wait s, median | wait s, max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in results["runs"]:
        lines.append(f"| {run['order']} | {run['workers']} | {run['duplicates_found']} / "
                     f"{run['offline_duplicates']} | {run['found_share']:.3f} | {run['false_duplicates']} | "
                     f"{run['other_original']} | {run['lost']} | {run['doubled']} | "
                     f"{run['clusters_without_unique']} | {run['pages_per_s'] or '-'} | "
                     f"{run['wait_s_median']} | {run['wait_s_max']} |")
    return "\n".join(lines) + "\n"


def _checks(results: dict[str, Any], min_found: float) -> list[str]:
    failed = []
    for run in results["runs"]:
        name = f"{run['order']}, {run['workers']} worker(s)"
        if run["found_share"] < min_found:
            failed.append(f"{name}: {run['found_share']:.3f} of offline's duplicates, under {min_found}")
        if run["false_duplicates"] or run["lost"] or run["doubled"] or run["clusters_without_unique"]:
            failed.append(f"{name}: {run}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", default=",".join(ORDERS))
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--live-rate", type=float, default=150.0, help="pages/s written in the live order")
    parser.add_argument("--min-found", type=float, default=MIN_FOUND)
    args = parser.parse_args(argv)
    if not CORPUS.exists():
        print(f"the shared corpus is not at {CORPUS}: nothing to measure", file=sys.stderr)
        return 0
    kafka = h.broker()
    pages = build_pages(load_sources())
    reference = offline_reference(pages)
    work = Path(tempfile.mkdtemp(prefix="race-bench-"))
    runs = []
    for order in args.orders.split(","):
        for workers in (int(n) for n in args.workers.split(",")):
            run = run_kafka(kafka, pages, order, workers, args.partitions, work, args.live_rate)
            scored = score(pages, reference, run.pop("verdicts"))
            runs.append({**run, **scored})
            print(json.dumps(runs[-1]), flush=True)
    results = {"meta": {"command": "python -m bench.race_bench " + " ".join(argv or sys.argv[1:]),
                        "date": time.strftime("%Y-%m-%d"), "pages": len(pages),
                        "kinds": ", ".join(f"{n} {k}" for k, n in Counter(p.kind for p in pages).items()),
                        "partitions": args.partitions,
                        "offline_duplicates": sum(1 for v in reference.values()
                                                  if v["verdict"] == "duplicate")},
               "runs": runs}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "race.json").write_text(json.dumps(results, indent=2))
    table = _markdown(results)
    (RESULTS / "race.md").write_text(table)
    print(table)
    failed = _checks(results, args.min_found)
    for failure in failed:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
