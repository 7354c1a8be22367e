"""The one place that knows topic names.

Input and output topics are shared with the crawler (fetchers produce the frontier and fetched
pages, and consume new URLs and revisit updates); internal topics belong to one stage of one
application (``app_id``) and are named after both, the way Kafka Streams names its repartition and
changelog topics, so two deployments on one cluster never share state.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topics:
    """All topic names for one deployment; ``prefix`` namespaces the shared ones (tests use a fresh one)."""

    prefix: str = "crawl."

    @property
    def frontier(self) -> str:
        return f"{self.prefix}frontier"

    @property
    def new_urls(self) -> str:
        return f"{self.prefix}new-urls"

    @property
    def fetched_pages(self) -> str:
        return f"{self.prefix}fetched-pages"

    @property
    def unique_pages(self) -> str:
        return f"{self.prefix}unique-pages"

    @property
    def page_verdicts(self) -> str:
        return f"{self.prefix}page-verdicts"

    @property
    def revisit_updates(self) -> str:
        return f"{self.prefix}revisit-updates"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}dead-letters"

    def shards(self, app_id: str, stage: str) -> str:
        """The stage's internal topic, re-keyed by its state key; partition i is state shard i."""
        return f"{self.prefix}{app_id}.{stage}.shards"

    def changelog(self, app_id: str, stage: str) -> str:
        """The compacted changelog of the stage's state; partition i backs state shard i."""
        return f"{self.prefix}{app_id}.{stage}.changelog"

    def group(self, app_id: str, stage: str) -> str:
        """The stage's consumer group (also the stem of its workers' transactional ids)."""
        return f"{self.prefix}{app_id}.{stage}"

    def shared(self) -> list[str]:
        return [self.frontier, self.new_urls, self.fetched_pages, self.unique_pages,
                self.page_verdicts, self.revisit_updates, self.dead_letters]
