"""A worker's lifecycle without a broker: the lines it logs, the two log formats, and what
``/healthz`` and ``/readyz`` answer in each phase (the same over HTTP)."""

from __future__ import annotations

import io
import json
import logging
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from streams.ops import logs
from streams.ops.health import Endpoint, liveness, readiness, serve
from streams.ops.metrics import WorkerMetrics
from streams.runtime.lifecycle import Lifecycle

SHARDS = "app.url-dedup.shards"


def _lifecycle() -> Lifecycle:
    return Lifecycle("url-dedup", [SHARDS], recovery_log_interval_s=0.0)


def _recover(lifecycle: Lifecycle) -> None:
    """Shard 0 replays offsets 0..1000 in two chunks; shard 1 is current."""
    lifecycle.assigned_now([(SHARDS, 0), (SHARDS, 1), ("frontier", 2)])
    lifecycle.recovering({0: (0, 0, 1000)})
    lifecycle.recovering({0: (0, 400, 1000)})
    lifecycle.recovering({0: (0, 1000, 1000)})
    lifecycle.recovered(1000, 0.5)


def test_the_lines_of_a_life(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "streams.lifecycle")
    lifecycle = _lifecycle()
    lifecycle.started({"version": "1.2", "worker_id": "w0"})
    lifecycle.joining()
    _recover(lifecycle)
    lifecycle.turned()
    lifecycle.committed([("frontier", 2, 77)])
    lifecycle.revoked([(SHARDS, 0), ("frontier", 2)])
    lifecycle.assigned_now([(SHARDS, 1), ("frontier", 3)])
    lifecycle.stopped(None)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "start: url-dedup: version 1.2, worker_id w0"
    assert lines[1].startswith("assignment: owns shards 0, 1 and input partitions frontier[2]; gained ")
    assert lines[2].startswith("recovery: rebuilding shards 0 from the changelog: 1000 records to replay")
    assert "shard 0: 400 of 1000 changelog records replayed (40%)" in lines[3]
    assert lines[4].startswith("ready: state caught up with the changelog (1000 records replayed in 0.5 s)")
    assert lines[5] == ("assignment: owns shards 1 and input partitions frontier[3]; gained frontier[3]; "
                        f"lost {SHARDS}[0]; frontier[2]")
    assert lines[6].startswith("stop: clean") and lines[6].endswith("by this run: frontier 2:77")
    assert all(record.levelno == logging.INFO for record in caplog.records)
    assert [getattr(record, "fields", {}).get("event") for record in caplog.records] == [
        "start", "assignment", "recovery_start", "recovery", "ready", "assignment", "stop"]


def test_a_stop_after_an_error_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "streams.lifecycle")
    _lifecycle().stopped(RuntimeError("fenced"))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("stop: not clean (RuntimeError: fenced)")


def test_json_lines_carry_the_worker_and_the_fields() -> None:
    stream = io.StringIO()
    logs.setup("info", "json", stream)
    try:
        logs.bind(stage="url-dedup", worker_id="w7")
        _recover(_lifecycle())
        logging.getLogger("streams.other").debug("not at info")
    finally:
        logs.setup("warning", "text")
        logs.bind(stage="", worker_id="")
    documents = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [document["fields"]["event"] for document in documents] == ["assignment", "recovery_start",
                                                                       "recovery"]
    progress = documents[2]
    assert (progress["stage"], progress["worker_id"], progress["level"]) == ("url-dedup", "w7", "info")
    assert progress["fields"]["percent"] == 40.0 and progress["fields"]["to_replay"] == 1000
    assert progress["message"].startswith("recovery: shard 0: 400 of 1000")


@pytest.mark.parametrize(("value", "ok"), [("json", True), ("JSON", True), ("yaml", False)])
def test_the_format_comes_from_the_environment(value: str, ok: bool) -> None:
    environ = {logs.LOG_FORMAT_ENV: value}
    if ok:
        assert logs.env_choice(environ, logs.LOG_FORMAT_ENV, "text", logs.LOG_FORMATS) == "json"
    else:
        with pytest.raises(ValueError, match="STREAMS_LOG_FORMAT='yaml' is not one of text, json"):
            logs.env_choice(environ, logs.LOG_FORMAT_ENV, "text", logs.LOG_FORMATS)


def test_probes_through_the_phases() -> None:
    lifecycle = _lifecycle()
    t0 = lifecycle.last_turn
    starting = lifecycle.snapshot()
    assert liveness(starting, 10, t0 + 5)[0] and not readiness(starting, 10, t0 + 5)[0]
    lifecycle.assigned_now([(SHARDS, 0)])
    lifecycle.recovering({0: (0, 100, 1000)})
    ready, facts = readiness(lifecycle.snapshot(), 10)
    assert not ready and facts["phase"] == "recovering"
    assert facts["recovering"] == {"0": {"replayed": 100, "to_replay": 1000, "percent": 10.0}}
    lifecycle.recovering({0: (0, 1000, 1000)})
    lifecycle.recovered(1000, 1.0)
    assert not readiness(lifecycle.snapshot(), 10)[0]  # recovered, but the loop has not consumed yet
    lifecycle.turned()
    assert readiness(lifecycle.snapshot(), 10)[0]
    stalled_at = lifecycle.last_turn + 11
    alive, facts = liveness(lifecycle.snapshot(), 10, stalled_at)
    assert not alive and facts["status"] == "stalled"
    assert not readiness(lifecycle.snapshot(), 10, stalled_at)[0]
    lifecycle.stopping()
    assert not readiness(lifecycle.snapshot(), 10)[0]


@pytest.mark.parametrize(("quiet_s", "alive"), [(10.0004, True), (10.0006, False), (11.0, False)])
def test_a_stalled_answer_reports_an_age_past_the_limit(quiet_s: float, alive: bool) -> None:
    """Within the reported precision of the limit the loop counts as alive: a stalled answer never
    says its age is the limit itself."""
    lifecycle = _lifecycle()
    answer, facts = liveness(lifecycle.snapshot(), 10, lifecycle.last_turn + quiet_s)
    assert answer is alive and facts["status"] == ("ok" if alive else "stalled")
    assert (facts["seconds_since_loop_turned"] > 10) is not alive


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_probes_over_http_and_the_recovery_gauges() -> None:
    lifecycle = _lifecycle()
    metrics = WorkerMetrics("url-dedup")
    metrics.lifecycle.source = lifecycle.snapshot
    port = serve(Endpoint(metrics.registry, lifecycle.snapshot, stall_after_s=0.2), "127.0.0.1", 0)
    lifecycle.assigned_now([(SHARDS, 0), (SHARDS, 1)])
    lifecycle.recovering({0: (10, 260, 1010)})
    assert _get(port, "/readyz")[0] == 503
    registry: CollectorRegistry = metrics.registry
    assert registry.get_sample_value("crawl_dedup_recovery_remaining_records",
                                     {"stage": "url-dedup", "shard": "0"}) == 750
    assert registry.get_sample_value("crawl_dedup_recovery_progress_ratio",
                                     {"stage": "url-dedup", "shard": "1"}) == 1.0
    assert registry.get_sample_value("crawl_dedup_ready", {"stage": "url-dedup"}) == 0
    lifecycle.recovered(1000, 0.1)
    lifecycle.turned()
    status, facts = _get(port, "/readyz")
    assert (status, facts["ready"], facts["shards"]) == (200, True, [0, 1])
    assert _get(port, "/healthz")[0] == 200
    assert registry.get_sample_value("crawl_dedup_ready", {"stage": "url-dedup"}) == 1
    lifecycle.last_turn -= 1.0  # the loop has not turned for a second, five times the bound
    status, facts = _get(port, "/healthz")
    assert (status, facts["status"]) == (503, "stalled")
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=5)
