#!/usr/bin/env python
"""faust-streaming implementation of the "first seen" de-duplication stage.

Emit each key the first time it is seen:

    for every input record (key, value):
        if key not in table:
            table[key] = b"1"
            send (key, value) to the output topic

CLI contract (used by the benchmark / kill harness)::

    python faust_first_seen.py --bootstrap 127.0.0.1:19092 \
        --input IN_TOPIC --output OUT_TOPIC --app-id APP_ID \
        --state-dir DIR [--partitions N]

The worker runs until it is killed (SIGKILL) or asked to stop (SIGTERM /
SIGINT).  It prints one line ``READY`` on stdout (flushed) once partitions
are assigned and table recovery has finished, i.e. right before the input
partitions are resumed.  Everything else (logs) goes to stderr at WARNING.

Design notes (see FAUST_NOTES.md next to this file for the evidence):

* processing_guarantee="exactly_once": faust uses one aiokafka transactional
  producer per assigned input partition, commits consumed offsets and the
  table changelog inside that transaction, and the worker consumer reads
  with read_committed.  CAVEAT (measured, see FAUST_NOTES.md): with the
  idiomatic ``await out_topic.send()`` the *output* record is NOT in that
  transaction (faust sends it on its plain producer), and the RocksDB
  write happens before the transaction commits, so a SIGKILL can lose
  output keys.  FAUST_FS_OUTPUT=txn puts the output in the transaction,
  which makes the loss window larger, not smaller.
* The table is RocksDB-backed (store="rocksdb://") and changelogged
  (``<app-id>-seen-changelog``, N partitions, declared by faust itself).
* Per-event processing is used on purpose: faust-streaming refuses table
  writes inside ``stream.take()`` batches (current_event() is None in the
  agent task there -- faust-streaming issue #497).
* Agent concurrency is 1: with concurrency > 1 faust's offset tracking can
  commit past events that are still in flight (#606).
* Only tuning that does not change what is committed together with what:
  bigger stream buffer / poll batch, 5 ms producer linger, 1 s commit
  interval, and no terminal spinner (which forces the root logger to
  DEBUG).  Measured ~6-7k input msgs/s on the 2-core test box; faust's
  bare consume loop (no table, no send) tops out at ~14k/s there.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

# Keep faust/mode quiet and deterministic before they are imported.
os.environ.setdefault("PYTHONUNBUFFERED", "1")

import faust  # noqa: E402
from faust.worker import Worker  # noqa: E402

#: Transaction commit cadence.  faust commits (send_offsets_to_transaction +
#: commit_transaction, one per input partition) every ``COMMIT_INTERVAL``
#: seconds or after ``COMMIT_EVERY`` acked events, whichever comes first.
#: May be overridden from the environment for experiments; the harness does
#: not need to.
COMMIT_INTERVAL = float(os.environ.get("FAUST_FS_COMMIT_INTERVAL", "1.0"))
COMMIT_EVERY = int(os.environ.get("FAUST_FS_COMMIT_EVERY", "10000"))
LINGER_MS = int(os.environ.get("FAUST_FS_LINGER_MS", "5"))
SESSION_TIMEOUT = float(os.environ.get("FAUST_FS_SESSION_TIMEOUT", "10"))
#: Optional static group membership (KIP-345); empty = dynamic membership.
GROUP_INSTANCE_ID = os.environ.get("FAUST_FS_GROUP_INSTANCE_ID", "")

#: How the output record is produced.
#:
#: ``topic`` (default): idiomatic faust, ``await out_topic.send(...)``.  NOTE:
#:   under exactly_once faust routes this through
#:   ``TransactionManager.send``, which looks the destination topic up in
#:   the *consumer's* metadata; a topic the app does not consume is unknown
#:   there, so the partition is ``None`` and the record goes out on the
#:   plain, non-transactional producer (transport/consumer.py
#:   TransactionManager.send, transport/drivers/aiokafka.py
#:   Consumer.key_partition).  The output is therefore NOT part of the
#:   Kafka transaction that commits the input offsets.
#: ``txn``: work-around -- send through faust's own producer with the
#:   transactional id of the *source* partition
#:   (``<app-id>-<group>-<partition>``), i.e. the same aiokafka
#:   transactional producer that later commits that partition's offsets.
OUTPUT_MODE = os.environ.get("FAUST_FS_OUTPUT", "topic")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="faust-streaming 'emit each key the first time it is seen'"
    )
    p.add_argument("--bootstrap", required=True, help="host:port[,host:port]")
    p.add_argument("--input", required=True, help="input topic (must exist)")
    p.add_argument("--output", required=True, help="output topic (must exist)")
    p.add_argument("--app-id", required=True, help="faust app id / group id")
    p.add_argument("--state-dir", required=True, help="faust datadir (RocksDB)")
    p.add_argument("--partitions", type=int, default=4)
    return p.parse_args(argv)


def build_app(args: argparse.Namespace) -> faust.App:
    brokers = ";".join(
        f"kafka://{hp.strip()}" for hp in args.bootstrap.split(",") if hp.strip()
    )
    n = args.partitions
    os.makedirs(args.state_dir, exist_ok=True)
    web_port = _free_port()  # web server is disabled; port only names us

    app = faust.App(
        args.app_id,
        broker=brokers,
        store="rocksdb://",
        datadir=args.state_dir,
        processing_guarantee="exactly_once",
        topic_partitions=n,
        topic_replication_factor=1,
        key_serializer="raw",
        value_serializer="raw",
        # --- quiet / self-contained -----------------------------------
        web_enabled=False,
        web_host="127.0.0.1",
        web_bind="127.0.0.1",
        web_port=web_port,
        # The canonical URL is this worker's identity in faust's assignor
        # metadata (default http://<host>:<web_port>).  With static
        # membership the restarted worker is handed its previous assignment,
        # and faust asserts that the URL in it is its own
        # (assignor/partition_assignor.py on_assignment), so it must then be
        # stable across restarts.
        canonical_url=(
            f"http://127.0.0.1:6066/{GROUP_INSTANCE_ID}"
            if GROUP_INSTANCE_ID
            else f"http://127.0.0.1:{web_port}"
        ),
        worker_redirect_stdouts=False,
        autodiscover=False,
        # --- throughput knobs (no effect on what is committed with what) --
        stream_buffer_maxsize=16384,
        broker_commit_interval=COMMIT_INTERVAL,
        broker_commit_every=COMMIT_EVERY,
        broker_max_poll_records=2000,
        producer_linger_ms=LINGER_MS,
        producer_max_batch_size=256 * 1024,
        producer_compression_type=None,
        consumer_auto_offset_reset="earliest",
        # --- restart speed after SIGKILL --------------------------------
        # The killed member stays in the consumer group until its session
        # expires; the restarted worker's JoinGroup waits for that.  faust's
        # default is 60 s; 10 s is the smallest comfortable value above
        # the broker's group.min.session.timeout.ms (6 s).
        broker_session_timeout=SESSION_TIMEOUT,
        broker_heartbeat_interval=min(3.0, SESSION_TIMEOUT / 3.0),
        broker_rebalance_timeout=SESSION_TIMEOUT,
        consumer_group_instance_id=GROUP_INSTANCE_ID or None,
    )

    in_topic = app.topic(
        args.input,
        partitions=n,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    out_topic = app.topic(
        args.output,
        partitions=n,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        internal=False,  # never declared/created by faust
    )
    seen = app.Table(
        "seen",
        default=None,
        partitions=n,
        # bytes key/value types make faust use the "raw" codec for the
        # table store and its changelog (tables/base.py _serializer_from_type)
        key_type=bytes,
        value_type=bytes,
    )

    ready = {"printed": False}

    @app.on_rebalance_complete.connect
    async def _on_ready(sender: object = None, **kwargs: object) -> None:
        # Fired by table recovery right before input partitions resume.
        if not ready["printed"]:
            ready["printed"] = True
            sys.stdout.write("READY\n")
            sys.stdout.flush()

    out_name = args.output
    app_id = args.app_id
    tids: dict[tuple[str, int], str] = {}

    def _tid_for(event: faust.EventT) -> str:
        msg = event.message
        k = (msg.topic, msg.partition)
        tid = tids.get(k)
        if tid is None:
            group = app.assignor.group_for_topic(msg.topic)
            tid = tids[k] = f"{app_id}-{group}-{msg.partition}"
        return tid

    if OUTPUT_MODE == "txn":

        async def emit(event: faust.EventT, key: bytes) -> None:
            await app.producer.send(
                out_name, key, event.value, None, None, None,
                transactional_id=_tid_for(event),
            )

    elif OUTPUT_MODE == "topic":

        async def emit(event: faust.EventT, key: bytes) -> None:
            await out_topic.send(key=key, value=event.value)

    else:
        raise SystemExit(f"unknown FAUST_FS_OUTPUT={OUTPUT_MODE!r}")

    @app.agent(in_topic, concurrency=1)
    async def first_seen(stream: faust.StreamT) -> None:
        # Per-event processing: table writes need the current event
        # (partition of the RocksDB db / changelog partition).
        async for event in stream.events():
            key = event.key
            if key is None:
                continue
            if key not in seen:
                seen[key] = b"1"
                await emit(event, key)

    assert first_seen is not None  # registered on the app by the decorator
    return app


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    loglevel = os.environ.get("FAUST_FS_LOGLEVEL", "WARNING").upper()
    logging.basicConfig(stream=sys.stderr, level=loglevel)
    app = build_app(args)
    worker = Worker(
        app,
        loglevel=loglevel,
        logfile=sys.stderr,
        quiet=True,
        stdout=sys.stderr,  # faust banner/"say" output must not pollute stdout
        stderr=sys.stderr,
        redirect_stdouts=False,
        console_port=_free_port(),
    )
    # faust's Worker installs a terminal "spinner" log handler whenever the
    # log level is >= WARN and then sets the *root* logger to DEBUG
    # (faust/worker.py _setup_spinner_handler).  That makes every
    # logger.debug() call in the hot path build a LogRecord (~10% CPU) and
    # writes terminal escape codes.  No spinner -> root stays at WARNING.
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
