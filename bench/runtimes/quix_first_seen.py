"""The runtime benchmark's processor on quixstreams: emit ``(key, value)`` the first time ``key`` is
seen, with quixstreams' RocksDB state, changelog topics and ``processing_guarantee="exactly-once"``.

Standalone on purpose: quixstreams 3.28.1 requires confluent-kafka < 2.13 and this project pins a
newer one, so it runs in a virtualenv of its own (``bench/runtimes/quix-requirements.txt``, made by
``make bench-runtime``) and imports nothing of ``streams``. Everything is quixstreams' defaults but
what the comparison needs: exactly-once, reading from the earliest offset, the bench's state dir.

    .venv-quix/bin/python bench/runtimes/quix_first_seen.py --input IN --output OUT --group G \
        --state-dir DIR [--bootstrap B]
"""

from __future__ import annotations

import argparse
from typing import Any

from quixstreams import Application, State


def first_sighting(value: Any, state: State) -> bool:
    """State is kept per message key: a key's first record passes, the later ones do not."""
    if state.get("seen", False):
        return False
    state.set("seen", True)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    app = Application(broker_address=args.bootstrap, consumer_group=args.group,
                      processing_guarantee="exactly-once", auto_offset_reset="earliest",
                      state_dir=args.state_dir)
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    frame = app.dataframe(source)
    frame = frame.filter(first_sighting, stateful=True)
    frame.to_topic(sink)
    app.run()  # stops on SIGTERM and SIGINT, committing what it processed


if __name__ == "__main__":
    main()
