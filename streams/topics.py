"""The one place that knows topic names.

Input and output topics are shared with the crawler (fetchers produce the frontier and fetched
pages, and consume new URLs and revisit updates); internal topics belong to one stage of one
application (``app_id``) and are named after both, the way Kafka Streams names its repartition and
changelog topics, so two deployments on one cluster never share state.

A stage's state may be moved to another shard count (``python -m streams reshard``,
:mod:`streams.runtime.reshard`): each move writes a new *generation* of its shard topic and
changelog, named ``...<stage>.g<n>.shards`` (generation 0, the first, keeps the plain names), and
records the current one in the stage's ``...<stage>.generations`` topic. ``generations`` says which
generation of each stage a worker is built for; its group, and so its input offsets, never change.

A stage declares its topics by name (:class:`streams.spec.StageSpec`): shared ones (``frontier``,
``new-urls``...) are ``<prefix><name>`` unless ``renamed`` names them otherwise (a stage whose
topics are given on the command line, ``testing/first_seen.py``'s); internal ones are
``<prefix><app>.<stage>.<name>`` (``shards``, or ``probes`` and ``gather`` for the page stage).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topics:
    """All topic names for one deployment; ``prefix`` namespaces the shared ones (tests use a fresh one)."""

    prefix: str = "crawl."
    generations: tuple[tuple[str, int], ...] = ()  # (stage, generation) where it is not 0
    renamed: tuple[tuple[str, str], ...] = ()  # (name, topic) for shared topics named otherwise

    def named(self, name: str) -> str:
        """The shared topic a stage declares as ``name``: ``<prefix><name>`` unless renamed."""
        for each, topic in self.renamed:
            if each == name:
                return topic
        return f"{self.prefix}{name}"

    @property
    def frontier(self) -> str:
        return self.named("frontier")

    @property
    def new_urls(self) -> str:
        return self.named("new-urls")

    @property
    def fetched_pages(self) -> str:
        return self.named("fetched-pages")

    @property
    def unique_pages(self) -> str:
        return self.named("unique-pages")

    @property
    def page_verdicts(self) -> str:
        return self.named("page-verdicts")

    @property
    def revisit_updates(self) -> str:
        return self.named("revisit-updates")

    @property
    def dead_letters(self) -> str:
        return self.named("dead-letters")

    def generation(self, stage: str) -> int:
        """The generation of ``stage``'s state these names are for (0 unless resharded)."""
        return dict(self.generations).get(stage, 0)

    def at_generation(self, stage: str, generation: int) -> Topics:
        """These names, with ``stage``'s internal topics those of ``generation``."""
        others = tuple((name, number) for name, number in self.generations if name != stage)
        return Topics(self.prefix, others + (((stage, generation),) if generation else ()), self.renamed)

    def _internal(self, app_id: str, stage: str, generation: int | None) -> str:
        number = self.generation(stage) if generation is None else generation
        return f"{self.prefix}{app_id}.{stage}" + (f".g{number}" if number else "")

    def internal(self, app_id: str, stage: str, name: str, generation: int | None = None) -> str:
        """The stage's internal topic ``name``, keyed by state key; partition i belongs to state shard i."""
        return f"{self._internal(app_id, stage, generation)}.{name}"

    def is_internal(self, topic: str, app_id: str, stage: str, name: str) -> bool:
        """Whether ``topic`` is the stage's internal topic ``name`` of some generation."""
        stem, end = f"{self.prefix}{app_id}.{stage}.", f".{name}"
        if topic == stem + name:
            return True
        number = topic[len(stem):-len(end)] if topic.startswith(stem + "g") and topic.endswith(end) else ""
        return number[:1] == "g" and number[1:].isdigit()

    def shards(self, app_id: str, stage: str, generation: int | None = None) -> str:
        """The internal topic ``shards``: the one of a stage that re-keys its input into one topic."""
        return self.internal(app_id, stage, "shards", generation)

    def changelog(self, app_id: str, stage: str, generation: int | None = None) -> str:
        """The compacted changelog of the stage's state; partition i backs state shard i."""
        return f"{self._internal(app_id, stage, generation)}.changelog"

    def generations_topic(self, app_id: str, stage: str) -> str:
        """The compacted topic holding which generation of the stage's state is current."""
        return f"{self.prefix}{app_id}.{stage}.generations"

    def group(self, app_id: str, stage: str) -> str:
        """The stage's consumer group (also the stem of its workers' transactional ids)."""
        return f"{self.prefix}{app_id}.{stage}"

    def shared(self) -> list[str]:
        return [self.frontier, self.new_urls, self.fetched_pages, self.unique_pages,
                self.page_verdicts, self.revisit_updates, self.dead_letters]
