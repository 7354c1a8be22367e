"""Adapters that put existing crawlers on the stages\x27 topics (``streams.integrations.scrapy``)."""
