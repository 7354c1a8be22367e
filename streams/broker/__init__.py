"""The Kafka broker the project runs beside the stages, and the cluster every command talks to.

``bootstrap``: the cluster a command connects to (``KAFKA_BOOTSTRAP_SERVERS``, else the local
broker) with the client settings that pass through. For development, tests and the demo:
``kafka_release`` (the pinned Apache Kafka release, fetched from Maven Central and checked),
``kafka_local`` (one single-node KRaft broker on 127.0.0.1), ``kafka_cluster`` (a local cluster of
several nodes) and ``kafka_command`` (``crawl-dedup kafka start|stop|status|wipe|fetch``). Nothing
here knows a stage.
"""
