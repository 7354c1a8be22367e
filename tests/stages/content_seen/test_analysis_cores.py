"""The default number of analysis processes, sized from the cores a worker may use
(streams/stages/content_seen/cores.py, streams/runtime/cores.py): table-driven, no machine's own
cores assumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import config
from streams.errors import ConfigError
from streams.runtime import cores as machine
from streams.stages.content_seen import cores
from streams.stages.content_seen.stage import ContentSeenSettings, ContentSeenStage


@pytest.mark.parametrize(("affinity", "cpu_count", "quota", "usable", "processes"), [
    (1, 1, None, 1, 0),          # one core: analysed in the worker
    (2, 2, None, 2, 2),          # this machine: a child per core
    (4, 4, None, 4, 4),
    (16, 16, None, 16, 16),
    (2, 64, None, 2, 2),         # taskset / cpuset: the affinity, not the machine
    (None, 8, None, 8, 8),       # no sched_getaffinity (macOS): the machine's count
    (None, None, None, 1, 0),    # nothing known: one core
    (8, 8, 1.0, 1, 0),           # a container limited to 1 CPU: in the worker
    (8, 8, 1.5, 1, 0),           # 1.5 CPUs: rounded down
    (8, 8, 0.5, 1, 0),           # under one CPU: still one core
    (8, 8, 2.0, 2, 2),
    (8, 8, 3.9, 3, 3),
    (2, 2, 4.0, 2, 2),           # a quota above the affinity: the affinity
])
def test_processes_from_cores_affinity_and_quota(affinity: int | None, cpu_count: int | None,
                                                 quota: float | None, usable: int, processes: int) -> None:
    assert machine.usable_cores(affinity, cpu_count, quota) == usable
    assert cores.auto_processes(usable) == processes


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "max 100000\n"}, None),                             # cgroup v2, no limit
    ({"cpu.max": "100000 100000\n"}, 1.0),                           # docker --cpus 1
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "50000 100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
    ({"cpu.max": "garbage"}, None),                                  # unreadable: no limit
    ({}, None),                                                      # no cgroup file system
])
def test_cgroup_quota(tmp_path: Path, files: dict[str, str], quota: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert machine.cgroup_cpu_quota(tmp_path) == quota


def test_auto_sizes_from_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for usable, processes in [(1, 0), (2, 2), (6, 6)]:
        monkeypatch.setattr(cores, "this_process_cores", lambda usable=usable: usable)
        assert cores.analysis_processes("auto") == processes
        assert ContentSeenStage(ContentSeenSettings())._intake.processes == processes


@pytest.mark.parametrize("explicit", [0, 1, 3])
def test_an_explicit_count_is_taken_as_it_is(monkeypatch: pytest.MonkeyPatch, explicit: int) -> None:
    monkeypatch.setattr(cores, "this_process_cores", lambda: 8)
    assert cores.analysis_processes(explicit) == explicit
    assert ContentSeenStage(ContentSeenSettings(analysis_processes=explicit))._intake.processes == explicit


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="analysis_processes"):
        ContentSeenStage(ContentSeenSettings(analysis_processes=-1))


@pytest.mark.parametrize(("raw", "read"), [("auto", "auto"), ("0", 0), ("4", 4)])
def test_the_setting_reads_auto_or_a_count(raw: str, read: int | str) -> None:
    settings = config.load(ContentSeenSettings, "content_seen",
                           environ={"STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES": raw})
    assert settings.analysis_processes == read
    assert ContentSeenSettings().analysis_processes == "auto"


def test_a_setting_neither_auto_nor_a_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="ANALYSIS_PROCESSES: cannot read 'many' as int or 'auto'"):
        config.load(ContentSeenSettings, "content_seen",
                    environ={"STREAMS_CONTENT_SEEN_ANALYSIS_PROCESSES": "many"})
