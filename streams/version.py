"""What ``crawl-dedup --version`` reports: this package, how it was built, and what it was tested with.

An operator filing a bug, or checking an image before a rollout, needs four facts: the package
version, whether the per-record hot path runs compiled (mypyc, ``setup.py``) or as pure Python
(about half the URL stage's speed), the librdkafka in use, and the Kafka and librdkafka releases
the project's tests ran against. The last two are this release's pins: librdkafka as bundled by
the confluent-kafka release ``constraints.txt`` pins, Kafka as the local broker's release
(``kafka/pom.xml``, carried in ``streams/broker/kafka_release.json``); ``tests/test_version.py`` keeps
the constants below equal to those pins.
"""

from __future__ import annotations

import platform
from importlib import metadata

DISTRIBUTION = "crawl-dedup"
TESTED_CONFLUENT_KAFKA = "2.16.1"
TESTED_LIBRDKAFKA = "2.16.0"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


def version_text() -> str:
    import confluent_kafka

    from streams.broker import kafka_release
    from streams.compiled import built_sources, compiled_modules

    compiled = compiled_modules()
    build = (f"hot path compiled ({len(compiled)} of {len(built_sources())} modules, mypyc)" if compiled
             else "pure Python (hot path not compiled)")
    return (f"crawl-dedup {package_version()}: {build}\n"
            f"Python {platform.python_version()}, confluent-kafka {confluent_kafka.version()}, "
            f"librdkafka {confluent_kafka.libversion()[0]}\n"
            f"tested with librdkafka {TESTED_LIBRDKAFKA} (confluent-kafka {TESTED_CONFLUENT_KAFKA}) and "
            f"Apache Kafka {kafka_release.pinned().kafka_version}\n")
