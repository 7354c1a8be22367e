"""How a stage chooses the replication of the topics it creates, and what it refuses (issue 37):
:mod:`streams.runtime.replication` on what a cluster answered, without a cluster."""

from __future__ import annotations

import pytest

from streams.config import TopicSettings
from streams.errors import ConfigError
from streams.runtime.replication import _check, _choose, _Found
from streams.runtime.topic_admin import Replication

IN, SHARDS = "crawl.frontier", "crawl.app.url-dedup.shards"


def _found(brokers: int = 3, factor: int | None = 3, min_insync: int | None = 2,
           replicas: dict[str, int] | None = None, topic_min: dict[str, int] | None = None) -> _Found:
    return _Found(brokers, factor, min_insync, replicas or {}, topic_min or {})


@pytest.mark.parametrize(("settings", "found", "chosen"), [
    (TopicSettings(), _found(), Replication(3, 2)),                                   # the cluster's
    (TopicSettings(), _found(1, 1, 1), Replication(1, 1)),                            # the local broker
    (TopicSettings(), _found(3, None, None), Replication(1, 1)),                      # unreadable
    (TopicSettings(), _found(3, 1, 1, {IN: 3}, {IN: 2}), Replication(3, 2)),          # the input's
    (TopicSettings(), _found(3, 3, 2, {IN: 1}, {IN: 1}), Replication(3, 2)),          # never below
    (TopicSettings(replication_factor=2), _found(), Replication(2, 2)),               # a setting
    (TopicSettings(replication_factor=2, min_insync_replicas=1), _found(), Replication(2, 1)),
])
def test_choice(settings: TopicSettings, found: _Found, chosen: Replication) -> None:
    assert _choose(settings, found, [IN])[0] == chosen


@pytest.mark.parametrize(("settings", "found", "internal", "missing", "says"), [
    (TopicSettings(replication_factor=2, min_insync_replicas=3), _found(), [], [],
     "no write could ever be acknowledged"),
    (TopicSettings(), _found(brokers=2), [], [SHARDS], "the cluster has 2 live broker"),
    (TopicSettings(), _found(replicas={SHARDS: 1}), [SHARDS], [],
     f"internal topic {SHARDS} keeps 1 replica"),
    (TopicSettings(), _found(replicas={SHARDS: 3}, topic_min={SHARDS: 1}), [SHARDS], [],
     "min.insync.replicas=2"),
    (TopicSettings(replication_factor=0), _found(), [], [], "at least 1"),
])
def test_refusals(settings: TopicSettings, found: _Found, internal: list[str], missing: list[str],
                  says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        chosen, why = _choose(settings, found, [IN])
        _check(chosen, why, found, internal, missing)


def test_fewer_live_brokers_than_min_insync_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A worker restarted while brokers are down must start: its existing topics are whole."""
    found = _found(brokers=1, replicas={SHARDS: 3}, topic_min={SHARDS: 2})
    chosen, why = _choose(TopicSettings(), found, [IN])
    _check(chosen, why, found, [SHARDS], [])
    assert "writes wait" in caplog.text
