"""The stages, one package each; what they share lives beside this package, not in it.

* :mod:`.url_dedup`: the frontier's new URLs, once (the seen-set, its Bloom filters, migrations).
* :mod:`.content_seen`: a verdict for every fetched page (block tables, racing copies).
* :mod:`.revisit`: change detection and the next fetch time (history, estimators, policies).

The runtime's minimal processor, for benchmarks and crash tests, is not a stage of the crawl:
``testing/first_seen.py``.

Shared by several stages: URL canonicalization (:mod:`streams.urls`, all three), page analysis
(:mod:`streams.pages`, content-seen and revisit), records and topics. The runtime
(:mod:`streams.runtime`) imports none of this; :mod:`streams.registry` lists the stages.
"""
