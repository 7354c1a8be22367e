"""The one error hierarchy of the project.

Every error raised on purpose by ``streams`` derives from :class:`StreamsError`, so an operator's
wrapper can catch one type. Records that are merely bad are not errors of the worker: they become
dead letters (:class:`RecordRejected` carries the reason to the dead-letter writer).

::

    StreamsError
    ├── ConfigError            a setting is missing, malformed or contradicts existing state
    │   ├── ShardCountMismatch   internal shard count differs from the topic or the local state
    │   ├── StaleGeneration      a worker built for a state generation that is not current
    │   └── ReshardRefused       a reshard cannot start: workers running, records undecided
    ├── BrokerError            the local broker cannot be fetched, started or reached
    ├── BuildError             a compiled module was built from another version of its source
    ├── StateError             the local state store is unusable (ahead of its changelog, wrong format)
    │   └── DiskFull             no space left where the local state is kept
    ├── InputError             a command's input file is not what it should be (a broken WARC)
    ├── RuntimeFailure         the Kafka runtime hit a fatal, non-retriable client error
    │   ├── AccessDenied         the cluster refuses the worker's credentials or a permission it needs
    │   └── TopicDeleted         a topic the worker reads or writes was deleted under it
    └── RecordRejected         one input record is invalid; becomes a dead letter, never crashes

Each class says in ``advice`` what an operator does about it; the command line prints it after the
error's own message (which names the setting, the topic or the directory at fault).
"""

from __future__ import annotations


class StreamsError(Exception):
    """Root of every error raised on purpose by this package."""

    advice = ""


class ConfigError(StreamsError):
    """A setting is missing, malformed, or contradicts the state already on disk or in Kafka."""

    advice = "correct the setting named above (flag, STREAMS_* variable or TOML file) and start again"


class ShardCountMismatch(ConfigError):
    """The configured internal shard count differs from the existing topics or local state."""


class StaleGeneration(ConfigError):
    """A worker is built for a generation of its stage's state that is not the current one, or a
    reshard is under way (:mod:`streams.runtime.generations`)."""

    advice = ("wait for the reshard to finish, then start the worker with the shard count it set "
              "(docs/production.md, 'Scaling out')")


class ReshardRefused(ConfigError):
    """A reshard cannot start: the stage's workers still run, or records are still undecided."""

    advice = "drain the stage's workers (--drain) and let them exit, then run the reshard again"


class BrokerError(StreamsError):
    """The local Kafka broker could not be fetched, started, stopped or reached."""

    advice = "check KAFKA_BOOTSTRAP_SERVERS, the STREAMS_KAFKA_* security settings and that the cluster is up"


class BuildError(StreamsError):
    """A module compiled with mypyc sits beside a source other than the one it was built from."""

    advice = "rebuild: make (a checkout) or reinstall the package"


class StateError(StreamsError):
    """The local state store cannot be used as it is (format, ahead of its changelog)."""

    advice = ("stop the worker, delete its state directory (a cache of the changelog) and start it "
              "again: it rebuilds its shards from the changelog")


class DiskFull(StateError):
    """No space is left on the filesystem of the local state directory: the worker stops, since it
    can keep no state; what it committed is in Kafka (the store applies a batch only after its
    transaction commits), so once there is room a restart catches up from the changelog."""


class InputError(StreamsError):
    """An input file of a command cannot be read as what it should be (a WARC that stops being
    one): the command writes nothing and changes no state."""

    advice = "repair or leave out the file named above and run the command again"


class RuntimeFailure(StreamsError):
    """A fatal Kafka client error (fenced producer, unrecoverable transaction state)."""

    advice = ("start the worker again (it resumes from its last commit; nothing is lost); if it was "
              "fenced, make sure no other worker runs with the same --worker-id")


class AccessDenied(RuntimeFailure):
    """The cluster refuses this worker's credentials (SASL), or an operation it needs (an ACL):
    :mod:`streams.runtime.access` tells it from a fault."""


class TopicDeleted(RuntimeFailure):
    """A topic this worker reads or writes (an internal one: shard topic, changelog) was deleted
    while it ran."""


class RecordRejected(StreamsError):
    """One input record is invalid. The runtime turns it into a dead letter and goes on.

    ``reason`` is a short machine-friendly code (``invalid_json``, ``schema``...), ``detail`` the
    human explanation.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
