"""How many analysis processes a page worker runs by default: sized from the cores it may use.

About 70 % of a page's time is resiliparse's parsing and main-text extraction, which holds the
GIL; the rest of the analysis (tokens, SimHash, sketch, digests) is Python. One worker process
therefore uses one core, and pages analysed in child processes (``analysis_processes``,
:mod:`streams.stages.content_seen.intake`) are what lets it use more.

``analysis_processes = "auto"`` (the default) is :func:`auto_processes` of :func:`usable_cores`:

- the cores the process may use: its CPU affinity (``os.sched_getaffinity``, which taskset,
  cpusets and Kubernetes' static CPU manager narrow), else ``os.cpu_count()``; capped by the
  cgroup's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``),
  rounded down: a container limited to 1.5 CPUs has 1;
- one core: 0, analysed in the worker (a child would only add the pipes' cost to the same core);
  two or more: as many children as cores. The worker itself mostly waits while they analyse (it
  routes the previous batch's pages, a fraction of their analysis), so a child per core keeps
  every core busy; ``cores - 1`` left one idle while the worker waited. Measured on a 2-core
  machine (docs/content-seen.md, "Analysis processes"): offline on the shared corpus's real HTML,
  2 children gave the highest rate, 1 child less than 2 and 0 the least.

An explicit integer is taken as it is (0: in the worker).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Final, Literal

AUTO: Final = "auto"
CGROUP: Final = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = CGROUP) -> float | None:
    """The CPUs the cgroup's quota allows (quota / period), or None when there is no limit or it
    cannot be read. Only the cgroup mounted at ``root`` is read (a container's own, from inside it)."""
    try:
        quota, _, period = (root / "cpu.max").read_text().partition(" ")  # cgroup v2: "max 100000"
        if quota.strip() == "max":
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1: quota -1 is no limit
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cores(affinity: int | None, cpu_count: int | None, quota: float | None) -> int:
    """Cores the process may use: its affinity (else the machine's), capped by the CPU quota rounded
    down; at least 1."""
    cores = affinity or cpu_count or 1
    if quota is not None:
        cores = min(cores, math.floor(quota))
    return max(cores, 1)


def auto_processes(cores: int) -> int:
    """Analysis processes for ``cores`` usable cores: none on one core, one per core beyond that."""
    return cores if cores >= 2 else 0


def this_process_cores() -> int:
    """:func:`usable_cores` of this process."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        affinity = None
    return usable_cores(affinity, os.cpu_count(), cgroup_cpu_quota())


def analysis_processes(setting: int | Literal["auto"]) -> int:
    """The processes a worker runs for the ``analysis_processes`` setting."""
    if setting == AUTO:
        return auto_processes(this_process_cores())
    if isinstance(setting, int) and setting >= 0:
        return setting
    from streams.errors import ConfigError

    raise ConfigError(f"setting analysis_processes: {setting!r} is neither {AUTO!r} nor a count >= 0")
