"""Kafka-native de-duplication for web crawlers (README.md).

Importing the package first refuses a stale compiled module (:mod:`streams.compiled`).
"""

from streams.compiled import refuse_stale_build

refuse_stale_build()
