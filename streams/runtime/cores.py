"""The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

What sizes the work a worker spreads over processes (content-seen's page analysis, a restore from an
empty state directory, :mod:`streams.runtime.restore`):

- the cores the process may use: its CPU affinity (``os.sched_getaffinity``, which taskset,
  cpusets and Kubernetes' static CPU manager narrow), else ``os.cpu_count()``;
- capped by the cgroup's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` /
  ``cpu.cfs_period_us``), rounded down: a container limited to 1.5 CPUs has 1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Final

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


def this_process_cores() -> int:
    """:func:`usable_cores` of this process."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        affinity = None
    return usable_cores(affinity, os.cpu_count(), cgroup_cpu_quota())
