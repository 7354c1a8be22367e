"""Hostile cluster events under a running worker (issue 37): its SASL credential stops working, a
topic ACL it needs is revoked, its changelog is deleted. Each time: the worker stops with one line
that names the cause and where the recovery is documented (docs/reliability.md, "Hostile cluster
events"); what it committed before is whole (read_committed: nothing doubled, every decision the
offline one); and after the documented recovery the stage's output is complete.

A broker of this module's own, with a SCRAM listener and KRaft's StandardAuthorizer
(``STREAMS_TEST_HOSTILE_PORT``, default 19880, and the two ports above; the local broker's
``--scram-port``): the workers connect through SCRAM as user ``crawl``, the test's own clients
through the PLAINTEXT listener as a super user, as an operator's tools would. The URL stage, one
worker, 4 shards, a few thousand frontier records fed in paced steps while the event strikes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from streams import config
from streams.broker import kafka_local
from streams.runtime.kafka_io import KafkaConfig, read_to_end
from testing import reliability as r

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STAGE = "url-dedup"
EXIT_S = 240.0  # the worker stops within its transaction timeout (30 s) and a diagnosis, or the grace


@pytest.fixture(scope="module")
def broker() -> Iterator[kafka_local.LocalBroker]:
    if config.bootstrap_servers():
        pytest.skip("an external cluster is configured; these tests change the local broker's users "
                    "and ACLs")
    port = int(os.environ.get("STREAMS_TEST_HOSTILE_PORT", "19880"))
    found = kafka_local.LocalBroker(port=port, controller_port=port + 1, scram_port=port + 2, heap_mb=512)
    kafka_local.stop(found)
    kafka_local.wipe(found)
    kafka_local.start(found)
    yield found
    kafka_local.stop(found)
    kafka_local.wipe(found)


def _admin(broker: kafka_local.LocalBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _set_password(broker: kafka_local.LocalBroker, password: str) -> None:
    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(broker.scram_user, credential, password.encode())
    admin = _admin(broker)  # kept: a client collected before its futures resolve cancels them
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result()


def _deny_write(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:crawl", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)


def _deployment(broker: kafka_local.LocalBroker, prefix: str, tmp_path: Path) -> r.Deployment:
    scram = {f"STREAMS_KAFKA_{name.upper().replace('.', '_')}": value
             for name, value in broker.scram_client_settings().items()}
    work = r.workload(seed=71, articles=4, urls=1500, repeats=2, phases_per_half=2)
    deployment = r.Deployment(KafkaConfig(broker.bootstrap), prefix, tmp_path, work, stages=(STAGE,),
                              env={**scram, "STREAMS_METRICS_ENABLED": "false"},
                              worker_bootstrap=broker.scram_bootstrap, batch_max_messages=100)
    deployment.create_inputs()
    return deployment


def _stopped_by(worker: r.Worker, pattern: str) -> str:
    """The worker's run ended with status 2 and one ``error:`` line matching ``pattern``."""
    code = worker.wait(EXIT_S)
    lines = [line for line in worker.runs()[-1].splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1, f"exit {code}, {lines}: {worker.tail()}"
    assert re.search(pattern, lines[0]) and "docs/reliability.md" in lines[0], lines[0]
    return lines[0]


def _whole_so_far(deployment: r.Deployment) -> dict[str, Any]:
    """What the worker committed before it stopped: nothing doubled, each decision offline's."""
    so_far = deployment.verify()[STAGE]
    assert so_far["doubled"] == 0 and so_far["differing"] == 0, so_far
    assert 0 < so_far["committed"] <= so_far["expected"], so_far
    return so_far


def _strike(deployment: r.Deployment, event: Callable[[], None], pattern: str) -> tuple[r.Worker, str]:
    """Start the worker and the feed; strike with ``event`` once a third is produced and some output
    is committed; the worker's last words (it must stop); the feed finishes meanwhile."""
    worker = deployment.worker(STAGE, "w0").start()
    deployment.wait_assigned([worker])
    feeder = deployment.feeder(steps_per_phase=4, pause_s=1.0)
    feeder.start()
    try:
        feeder.wait_for(0.3)
        deployment.wait_until(lambda: r.count(deployment.kafka, deployment.topics.new_urls) > 0, 120)
        struck = time.monotonic()
        event()
        line = _stopped_by(worker, pattern)
        print(f"\nstopped {time.monotonic() - struck:.0f} s after the event: {line}")
        feeder.finish()
    finally:
        if feeder.ident is not None:
            feeder.join(5)
    return worker, line


def _finish(deployment: r.Deployment, worker: r.Worker) -> dict[str, Any]:
    worker.start()
    deployment.settle(timeout_s=300)
    deployment.stop_all()
    report = deployment.verify()
    print(f"after the recovery: {report}")
    assert report == r.clean(report)
    return report


def test_credential_stops_working(broker: kafka_local.LocalBroker, prefix: str, tmp_path: Path) -> None:
    """The worker's SCRAM password changed on the cluster: with the broker's re-authentication
    interval (10 s here) its sessions end; it stops, and, given its password back, finishes."""
    deployment = _deployment(broker, prefix, tmp_path)
    try:
        worker, _ = _strike(deployment, lambda: _set_password(broker, "rotated"),
                            r"refuses this worker's credentials .*SASL authentication")
        print(f"committed before: {_whole_so_far(deployment)}")
        _set_password(broker, broker.scram_password)
        _finish(deployment, worker)
    finally:
        _set_password(broker, broker.scram_password)
        deployment.kill_all()


def test_topic_acl_revoked(broker: kafka_local.LocalBroker, prefix: str, tmp_path: Path) -> None:
    """WRITE on the output topic denied to the worker's user; then the ACL removed."""
    deployment = _deployment(broker, prefix, tmp_path)
    denial = _deny_write(deployment.topics.new_urls)

    admin = _admin(broker)

    def deny() -> None:
        for future in admin.create_acls([denial]).values():
            future.result()

    try:
        pattern = rf"denies this worker WRITE on topic {re.escape(deployment.topics.new_urls)}"
        worker, _ = _strike(deployment, deny, pattern)
        print(f"committed before: {_whole_so_far(deployment)}")
        for future in admin.delete_acls([AclBindingFilter(*_acl_fields(denial))]).values():
            future.result()
        _finish(deployment, worker)
    finally:
        deployment.kill_all()


def _acl_fields(binding: AclBinding) -> tuple[Any, ...]:
    return (binding.restype, binding.name, binding.resource_pattern_type, binding.principal, binding.host,
            binding.operation, binding.permission_type)


def test_changelog_deleted(broker: kafka_local.LocalBroker, prefix: str, tmp_path: Path) -> None:
    """The stage's changelog deleted under the worker: it stops; started again it refuses the
    recreated, empty changelog rather than run on without its state; the documented recovery
    (internal topics and state directories deleted, the group's input offsets reset to the
    beginning) rebuilds the state from the input, and the decisions made after it are complete."""
    deployment = _deployment(broker, prefix, tmp_path)
    changelog = deployment.topics.changelog(r.APP, STAGE)

    admin = _admin(broker)

    def delete() -> None:
        for future in admin.delete_topics([changelog]).values():
            future.result()

    try:
        worker, _ = _strike(deployment, delete, rf"topic {re.escape(changelog)} was deleted")
        print(f"committed before: {_whole_so_far(deployment)}")
        worker.start()
        _stopped_by(worker, r"the changelog was deleted and recreated")
        mark = _ends(deployment.kafka, deployment.topics.new_urls)
        _rebuild_from_input(broker, deployment)
        worker.start()
        deployment.settle(timeout_s=300)
        deployment.stop_all()
        after = [orjson.loads(m.value() or b"{}")
                 for m in read_to_end(deployment.kafka, deployment.topics.new_urls)
                 if (m.offset() or 0) >= mark.get(m.partition() or 0, 0)]
        rebuilt = r.compare(STAGE, deployment.expected(STAGE), after)
        print(f"decided again after the recovery: {rebuilt}")
        assert (rebuilt["lost"], rebuilt["doubled"], rebuilt["differing"]) == (0, 0, 0), rebuilt
    finally:
        deployment.kill_all()


def _ends(kafka: KafkaConfig, topic: str) -> dict[int, int]:
    consumer = Consumer(kafka.consumer(f"ends-{time.monotonic_ns()}"))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        consumer.close()


def _reset(admin: AdminClient, offsets: ConsumerGroupTopicPartitions) -> bool:
    """Set the group's offsets; False while it still has a member (a stopped static member stays
    until its session times out, 30 s)."""
    try:
        for future in admin.alter_consumer_group_offsets([offsets]).values():
            done = future.result()
    except KafkaException:
        return False
    return all(tp.error is None for tp in done.topic_partitions)


def _rebuild_from_input(broker: kafka_local.LocalBroker, deployment: r.Deployment) -> None:
    """The documented recovery for a deleted changelog, as an operator runs it with Kafka's tools: the
    stage's internal topics deleted, its state directories too, its group's input offsets to the
    beginning (kafka-consumer-groups --reset-offsets --to-earliest)."""
    admin = _admin(broker)
    topics = deployment.topics
    internal = [topics.shards(r.APP, STAGE), topics.changelog(r.APP, STAGE)]
    for future in admin.delete_topics(internal).values():
        future.result()
    deployment.delete_state()
    source = r.input_topic(topics, STAGE)
    partitions = admin.list_topics(source, timeout=10).topics[source].partitions
    reset = ConsumerGroupTopicPartitions(deployment.group(STAGE),
                                         [TopicPartition(source, p, 0) for p in partitions])
    deployment.wait_until(lambda: _reset(admin, reset), 120, what="the group empty, its offsets reset")
    deadline = time.monotonic() + 60
    while any(name in admin.list_topics(timeout=10).topics for name in internal):
        assert time.monotonic() < deadline, "internal topics still listed after their deletion"
        time.sleep(0.5)
