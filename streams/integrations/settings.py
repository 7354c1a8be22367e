"""The Scrapy integration's settings, read from the crawler's settings (``CRAWL_DEDUP_*``, Scrapy's
own style): one typed object, the defaults documented in :mod:`streams.integrations.scrapy`."""

from __future__ import annotations

from dataclasses import dataclass

from scrapy.crawler import Crawler

from streams import config
from streams.errors import ConfigError
from streams.integrations.requests import SCRAPY_CLASSES
from streams.runtime.extras import KafkaConfig
from streams.topics import Topics

BUFFER_PER_CONCURRENT_REQUEST = 32
CRAWL_ID_MAX_CHARS = 256  # schemas/frontier_url.schema.json, crawl


@dataclass(frozen=True)
class CrawlSettings:
    kafka: KafkaConfig
    topics: Topics
    group: str
    crawl_id: str  # "" for the stages' unnamed crawl
    skip_duplicates: bool
    verdict_timeout_s: float
    idle_close_s: float
    buffer: int
    process_id: str | None
    app_id: str  # the stages' application id: where the URL stage's group and shard topic are
    revisit: bool
    revisit_ahead_s: float
    request_classes: frozenset[str]

    @classmethod
    def from_crawler(cls, crawler: Crawler, spider_name: str) -> CrawlSettings:
        get = crawler.settings
        bootstrap = (get.get("CRAWL_DEDUP_BOOTSTRAP_SERVERS") or config.bootstrap_servers()
                     or "127.0.0.1:19092")
        topics = Topics(get.get("CRAWL_DEDUP_TOPIC_PREFIX", "crawl."))
        crawl_id = str(get.get("CRAWL_DEDUP_CRAWL_ID") or "")
        if len(crawl_id) > CRAWL_ID_MAX_CHARS:
            raise ConfigError(f"CRAWL_DEDUP_CRAWL_ID is longer than {CRAWL_ID_MAX_CHARS} characters")
        group = get.get("CRAWL_DEDUP_GROUP") or f"{topics.prefix}scrapy.{spider_name}" + (
            f".{crawl_id}" if crawl_id else "")
        concurrency = get.getint("CONCURRENT_REQUESTS", 16)
        return cls(KafkaConfig(bootstrap, dict(get.getdict("CRAWL_DEDUP_KAFKA"))), topics, group, crawl_id,
                   get.getbool("CRAWL_DEDUP_SKIP_DUPLICATES"),
                   get.getfloat("CRAWL_DEDUP_VERDICT_TIMEOUT_S", 30.0),
                   get.getfloat("CRAWL_DEDUP_IDLE_CLOSE_S", 0.0),
                   get.getint("CRAWL_DEDUP_BUFFER") or BUFFER_PER_CONCURRENT_REQUEST * concurrency,
                   get.get("CRAWL_DEDUP_PROCESS_ID") or None,
                   get.get("CRAWL_DEDUP_APP_ID") or config.RuntimeSettings().app_id,
                   get.getbool("CRAWL_DEDUP_REVISIT"), get.getfloat("CRAWL_DEDUP_REVISIT_AHEAD_S", 0.0),
                   SCRAPY_CLASSES | frozenset(get.getlist("CRAWL_DEDUP_REQUEST_CLASSES")))
