"""``status`` and ``forget`` against running URL workers, as an operator uses them.

- The operator's round trip, on the default topic names: ``status --json`` says seen; ``forget``;
  ``status`` says not seen; the URL written to the frontier again comes out of new-urls once more,
  and the URLs not forgotten do not.
- ``status`` with two workers finds each shard's owner; with none running, one clear error.
- A forget by host, then one by prefix, while the worker is SIGKILLed during each (every forget
  scanned in parts): afterwards exactly the forgotten URLs come out again, each once (read with
  read_committed). ``make reliability`` runs it over 10^6 URLs.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streams.runtime.kafka_io import KafkaConfig
from streams.topics import Topics
from testing import harness as h
from testing.cli import PROJECT_ROOT
from testing.operated import Worker, worker_env

STAGE = "url-dedup"


def _worker(kafka: KafkaConfig, prefix: str, app: str, name: str, state: Path, *extra: str,
            env: dict[str, str] | None = None) -> Worker:
    return Worker([STAGE, "--topic-prefix", prefix, "--app-id", app, "--worker-id", name, "--state-dir",
                   str(state), "--shards", "4", *extra], env or worker_env(kafka.bootstrap_servers))


CACHE = tempfile.mkdtemp(prefix="status-cache-")  # the owners status finds: not the user's cache


def _cli(kafka: KafkaConfig, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "CRAWL_DEDUP_CACHE_DIR": CACHE}
    return subprocess.run([sys.executable, "-m", "streams", *args], capture_output=True, timeout=300, env=env,
                          cwd=PROJECT_ROOT, check=False)


def _status(kafka: KafkaConfig, prefix: str, app: str, *urls: str) -> list[dict[str, object]]:
    found = _cli(kafka, "status", *urls, "--json", "--topic-prefix", prefix, "--app-id", app)
    return [orjson.loads(line) for line in found.stdout.splitlines()]


def _new_urls(kafka: KafkaConfig, prefix: str, wanted: set[str] | None = None) -> Counter[str]:
    counts = h.read_all(kafka, Topics(prefix).new_urls, idle_s=1.0,
                        value_of=lambda _k, v: orjson.loads(v or b"{}")["url"].encode())
    found = Counter({url.decode(): n for url, n in counts.items()})
    return found if wanted is None else Counter({url: n for url, n in found.items() if url in wanted})


def _decided(kafka: KafkaConfig, prefix: str, app: str, timeout_s: float = 300) -> None:
    """Wait until the stage's group has committed past everything in its frontier and shard topic."""
    topics, group = Topics(prefix), Topics(prefix).group(app, STAGE)
    h.wait_for(lambda: h.caught_up(kafka, group, topics.frontier)
               and h.caught_up(kafka, group, topics.shards(app, STAGE)), timeout_s)


def test_an_operator_forgets_a_url_and_it_comes_out_again(kafka: KafkaConfig, tmp_path: Path) -> None:
    prefix, app = "crawl.", f"app{uuid.uuid4().hex[:8]}"  # the default topic names
    topics = Topics(prefix)
    run = uuid.uuid4().hex[:8]
    urls = [f"http://op{run}.example/page/{n}" for n in range(12)]
    h.create_topics(kafka, [topics.frontier], 4, exist_ok=True)
    worker = _worker(kafka, prefix, app, "w0", tmp_path)
    try:
        worker.wait_ready()
        h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": url})) for url in urls))
        h.wait_for(lambda: len(_new_urls(kafka, prefix, set(urls))) == len(urls), 120)
        [before] = _status(kafka, prefix, app, urls[0])
        assert before["seen"] is True and before["first_seen_at"], before
        assert before["canonical"] == urls[0] and before["worker"] == "w0"
        forgot = _cli(kafka, "forget", urls[0], "--topic-prefix", prefix, "--app-id", app)
        assert forgot.returncode == 0, forgot.stderr.decode()
        assert forgot.stdout.decode().startswith("forgot 1 URLs"), forgot.stdout.decode()
        [after] = _status(kafka, prefix, app, urls[0])
        assert after["seen"] is False, after
        h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": url})) for url in urls))
        _decided(kafka, prefix, app)
        expected = Counter({url: 2 if url == urls[0] else 1 for url in urls})
        assert _new_urls(kafka, prefix, set(urls)) == expected
        [again] = _status(kafka, prefix, app, urls[0])
        assert again["seen"] is True
    finally:
        assert worker.stop() == 0, worker.log()


def test_status_finds_each_shards_owner_among_two_workers(kafka: KafkaConfig, prefix: str,
                                                          tmp_path: Path) -> None:
    topics, app = Topics(prefix), "app"
    urls = [f"http://two.example/{n}" for n in range(40)]
    h.create_topics(kafka, [topics.frontier], 4)
    h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": url})) for url in urls))
    workers = [_worker(kafka, prefix, app, f"w{n}", tmp_path / f"w{n}") for n in range(2)]
    try:
        for worker in workers:
            worker.wait_ready()
        _decided(kafka, prefix, app)
        h.wait_for(lambda: {s["worker"] for s in _status(kafka, prefix, app, *urls[:8])} == {"w0", "w1"}, 60)
        found = _status(kafka, prefix, app, *urls, "http://two.example/never")
        assert [s["seen"] for s in found] == [True] * len(urls) + [False]
        owners = {(s["shard"], s["worker"]) for s in found}
        assert len(owners) == len({shard for shard, _ in owners}) == 4  # one owner a shard
        assert {worker for _, worker in owners} == {"w0", "w1"}
    finally:
        for worker in workers:
            assert worker.stop() == 0, worker.log()
    # Until their sessions time out, the stopped workers (static members) still own their shards.
    stopped = _cli(kafka, "status", urls[0], "--topic-prefix", prefix, "--app-id", app, "--timeout-s", "1")
    assert stopped.returncode == 1 and "does not answer" in stopped.stdout.decode(), stopped.stdout.decode()

    def gone() -> bool:
        found = _cli(kafka, "status", urls[0], "--topic-prefix", prefix, "--app-id", app, "--timeout-s", "1")
        return "no worker of the url-dedup stage is running" in found.stdout.decode()

    h.wait_for(gone, 120, poll_s=5)


def _forget_while_killing(kafka: KafkaConfig, prefix: str, app: str, command: list[str], state: Path,
                          log: Path, kills: int, rng: random.Random, env: dict[str, str]) -> tuple[str, int]:
    """Run ``forget`` while the worker is SIGKILLed ``kills`` times and restarted; (its output, kills
    that landed while it was still waiting)."""
    worker_command = [sys.executable, "-m", "streams", STAGE, "--topic-prefix", prefix, "--app-id", app,
                      "--worker-id", "w0", "--state-dir", str(state), "--shards", "4"]

    def spawn() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:  # the child keeps its own descriptor
            return subprocess.Popen(worker_command, env=env, cwd=PROJECT_ROOT, start_new_session=True,
                                    stdout=out, stderr=subprocess.STDOUT)

    worker = spawn()
    forget = subprocess.Popen([sys.executable, "-m", "streams", "forget", *command, "--topic-prefix", prefix,
                               "--app-id", app], env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    landed = 0
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.5, 3.0))
            landed += forget.poll() is None
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
            worker = spawn()
        out, err = forget.communicate(timeout=900)
        assert forget.returncode == 0, err.decode()
        return out.decode(), landed
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(120)


@pytest.mark.parametrize(("hosts", "per_host", "kills"), [
    (20, 1_000, 2), pytest.param(100, 10_000, 4, marks=pytest.mark.slow, id="10^6 URLs")])
def test_forgets_by_host_and_prefix_survive_sigkills(kafka: KafkaConfig, prefix: str, tmp_path: Path,
                                                     hosts: int, per_host: int, kills: int) -> None:
    topics, app, rng = Topics(prefix), "app", random.Random(3)
    urls = [f"http://h{host}.example/{'blog' if n % 3 == 0 else 'shop'}/{n}"
            for host in range(hosts) for n in range(per_host)]
    h.create_topics(kafka, [topics.frontier], 4)
    frontier = [orjson.dumps({"url": url}) for url in urls]
    h.produce(kafka, topics.frontier, ((None, value) for value in frontier))
    state, log = tmp_path / "state", tmp_path / "worker.log"
    # Small parts: each forget is scanned in several transactions, killed between and inside them.
    part_marks = str(max(1_000, len(urls) // 40))
    env = worker_env(kafka.bootstrap_servers, STREAMS_URL_DEDUP_FORGET_PART_MARKS=part_marks)
    first = _worker(kafka, prefix, app, "w0", state, "--idle-exit-s", "3", env=env)
    assert first.wait(900) == 0, first.log()
    assert sum(_new_urls(kafka, prefix).values()) == len(urls)
    by_host, landed_host = _forget_while_killing(kafka, prefix, app, ["--host", "h1.example"], state, log,
                                                 kills, rng, env)
    by_prefix, landed_prefix = _forget_while_killing(
        kafka, prefix, app, ["--prefix", "http://h2"], state, log, kills, rng, env)
    # The prefix takes h2 and, over 10^6 URLs, h20 to h29: 11 % of them.
    forgotten = {url for url in urls if url.startswith(("http://h1.example/", "http://h2"))}
    assert by_host.startswith(f"forgot {per_host} URLs"), by_host
    assert by_prefix.startswith(f"forgot {len(forgotten) - per_host} URLs"), by_prefix
    assert landed_host + landed_prefix >= 1  # at least one kill while a forget was being applied
    h.produce(kafka, topics.frontier, ((None, value) for value in frontier))
    last = _worker(kafka, prefix, app, "w0", state, "--idle-exit-s", "3", env=env)
    assert last.wait(900) == 0, last.log()
    counts = _new_urls(kafka, prefix)
    again = {url for url, n in counts.items() if n > 1}
    print(f"{len(urls)} URLs; {by_host.strip()} / {by_prefix.strip()}; kills while a forget waited: "
          f"{landed_host} + {landed_prefix} of {2 * kills}; new URLs read: {sum(counts.values())}, "
          f"twice: {len(again)}, forgotten: {len(forgotten)}")
    assert (again == forgotten, max(counts.values()), sum(counts.values())) == (
        True, 2, len(urls) + len(forgotten)), sorted(again ^ forgotten)[:10]


def test_status_tells_what_every_stage_keeps_of_a_url(kafka: KafkaConfig, prefix: str,
                                                       tmp_path: Path) -> None:
    """The URL stage's mark, the revisit stage's history and the page stage's last verdict, each
    from its owner, with two workers of the page stage (its verdicts kept at other workers' shards)."""
    topics, app = Topics(prefix), "app"
    h.create_topics(kafka, [topics.frontier, topics.fetched_pages], 4)
    text = " ".join(f"word{n} of a page long enough to be its main text" for n in range(60))
    original, copy = "http://orig.example/story", "http://copy.example/story"
    pages = [{"url": url, "status": 200, "content_type": "text/html", "fetched_at": at,
              "body": f"<html><body><article><p>{text}</p></article></body></html>"}
             for url, at in ((original, "2026-11-26T09:00:00.000Z"), (copy, "2026-11-26T10:00:00.000Z"))]
    env = worker_env(kafka.bootstrap_servers, STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES="0")
    workers = [_worker(kafka, prefix, app, "u0", tmp_path / "u0", env=env)]
    workers += [Worker([stage, "--topic-prefix", prefix, "--app-id", app, "--worker-id", f"{stage}{n}",
                        "--state-dir", str(tmp_path / f"{stage}{n}"), "--shards", "4"], env)
                for stage, count in (("revisit", 1), ("content-seen", 2)) for n in range(count)]
    try:
        for worker in workers:
            worker.wait_ready(180)
        h.produce(kafka, topics.frontier, ((None, orjson.dumps({"url": url})) for url in (original, copy)))
        h.produce(kafka, topics.fetched_pages, ((None, orjson.dumps(page)) for page in pages[:1]))
        h.wait_for(lambda: (_status(kafka, prefix, app, original)[0].get("content") or {}).get("verdict")
                   == "unique", 180)
        h.produce(kafka, topics.fetched_pages, ((None, orjson.dumps(page)) for page in pages[1:]))
        h.wait_for(lambda: _status(kafka, prefix, app, copy)[0].get("content") is not None, 180)
        [found] = _status(kafka, prefix, app, copy)
    finally:
        for worker in workers:
            worker.stop(120)
    assert found["seen"] is True and "unavailable" not in found, found
    assert found["content"] == {"verdict": "duplicate", "kind": "exact", "duplicate_of": original,
                                "distance": 0, "fetched_at": "2026-11-26T10:00:00.000Z"}
    history = found["revisit"]
    assert isinstance(history, dict) and history["fetches"] == 1, found
    assert history["last_fetch_at"] == "2026-11-26T10:00:00.000Z"
    assert history["next_fetch_at"] > history["last_fetch_at"]
