"""Adapters that put existing crawlers on the stages' topics (``streams.integrations.scrapy``)."""
