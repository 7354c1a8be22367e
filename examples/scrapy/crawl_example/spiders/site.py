"""Follows every link and yields one item per page it parses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.crawler import Crawler
from scrapy.http import Response


class SiteSpider(scrapy.Spider):
    name = "site"

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> SiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        domains = crawler.settings.getlist("SITE_ALLOWED_DOMAINS")  # e.g. "test": the local site only
        if domains:
            setattr(spider, "allowed_domains", domains)  # noqa: B010 - not declared by Spider
        return spider

    async def start(self) -> Any:  # Scrapy 2.13 and later
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # before 2.13 (the scrapy extra takes 2.11.2)
        for url in self.settings.getlist("SITE_START_URLS") or ["http://site0.test/p/0.html"]:
            yield scrapy.Request(url)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
