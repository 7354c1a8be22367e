"""How many analysis processes a page worker runs by default: sized from the cores it may use.

About 70 % of a page's time is resiliparse's parsing and main-text extraction, which holds the
GIL; the rest of the analysis (tokens, SimHash, sketch, digests) is Python. One worker process
therefore uses one core, and pages analysed in child processes (``analysis_processes``,
:mod:`streams.stages.content_seen.intake`) are what lets it use more.

``analysis_processes = "auto"`` (the default) is :func:`auto_processes` of the cores the process
may use (:mod:`streams.runtime.cores`: affinity, capped by the cgroup's CPU quota):

- one core: 0, analysed in the worker (a child would only add the pipes' cost to the same core);
  two or more: as many children as cores. The worker itself mostly waits while they analyse (it
  routes the previous batch's pages, a fraction of their analysis), so a child per core keeps
  every core busy; ``cores - 1`` left one idle while the worker waited. Measured on a 2-core
  machine (docs/content-seen.md, "Analysis processes"): offline on the shared corpus's real HTML,
  2 children gave the highest rate, 1 child less than 2 and 0 the least.

An explicit integer is taken as it is (0: in the worker).
"""

from __future__ import annotations

from typing import Final, Literal

from streams.runtime.extras import this_process_cores

AUTO: Final = "auto"


def auto_processes(cores: int) -> int:
    """Analysis processes for ``cores`` usable cores: none on one core, one per core beyond that."""
    return cores if cores >= 2 else 0


def analysis_processes(setting: int | Literal["auto"]) -> int:
    """The processes a worker runs for the ``analysis_processes`` setting."""
    if setting == AUTO:
        return auto_processes(this_process_cores())
    if isinstance(setting, int) and setting >= 0:
        return setting
    from streams.errors import ConfigError

    raise ConfigError(f"setting analysis_processes: {setting!r} is neither {AUTO!r} nor a count >= 0")
