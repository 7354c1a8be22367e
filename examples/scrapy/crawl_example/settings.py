"""A Scrapy project on crawl-dedup: the two lines that switch it over, and the stage's settings.

Run the stages (``python -m streams url-dedup``, ``content-seen``, ``revisit``) on the same broker
and topic prefix, then ``scrapy crawl site`` in as many processes as you like: they share one crawl.
"""

BOT_NAME = "crawl_example"
SPIDER_MODULES = ["crawl_example.spiders"]

# The two-line switch (scrapy-redis: SCHEDULER and DUPEFILTER_CLASS).
SCHEDULER = "streams.integrations.scrapy.Scheduler"
SPIDER_MIDDLEWARES = {"streams.integrations.scrapy.FetchedPages": 30}

# Optional: skip parsing pages the page stage calls duplicates; close after 10 s with nothing to do.
CRAWL_DEDUP_SKIP_DUPLICATES = True
CRAWL_DEDUP_IDLE_CLOSE_S = 10
# CRAWL_DEDUP_BOOTSTRAP_SERVERS = "127.0.0.1:19092"   # default: KAFKA_BOOTSTRAP_SERVERS
# CRAWL_DEDUP_TOPIC_PREFIX = "crawl."
# CRAWL_DEDUP_KAFKA = {"security.protocol": "SASL_SSL", ...}   # passed to librdkafka
# A run resumes the crawl the stages know (the log says how many start URLs were seen before);
# a new crawl id, the same in every process, is a new crawl that sees none of the earlier URLs:
# CRAWL_DEDUP_CRAWL_ID = "site-2024-06"

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
