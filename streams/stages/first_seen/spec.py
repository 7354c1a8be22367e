"""The declaration of the runtime's minimal processor (:mod:`streams.stages.first_seen.stage`).

Its topics are named on the command line (``--input``, ``--output``); its input is keyed already
and is its shard topic, so it has a shard per input partition and no internal topic.
"""

from __future__ import annotations

import argparse
from typing import Any

from streams.config import RuntimeSettings
from streams.runtime.api import Stage
from streams.spec import StageSpec


def _build(settings: Any, runtime: RuntimeSettings) -> Stage:
    from streams.stages.first_seen.stage import FirstSeenStage

    return FirstSeenStage()


def _topic_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--input", required=True, help="keyed input topic (also the shard topic)")
    command.add_argument("--output", required=True)


def _topic_names(args: argparse.Namespace) -> dict[str, str]:
    return {"input": args.input, "output": args.output}


SPEC = StageSpec(
    "first-seen", "a minimal stateful processor (benchmarks)", inputs=("input",), outputs=("output",),
    build=_build, metrics_port=9413, internal=(), keyed_input=True, topic_options=_topic_options,
    topic_names=_topic_names, offline=False, pipeline=False,
    description="The runtime's minimal stateful processor: the first record of each key, once "
                "(benchmarks and crash tests).")
