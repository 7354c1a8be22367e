"""Support code shared by the tests (``tests/``) and the benchmarks (``bench/``); never part of the package.

The tests import nothing from ``bench/`` and ``bench/`` nothing from ``tests/``: what both need is
here. Not installed (``setup.py`` packages ``streams`` only); run from a checkout, as
``python -m pytest`` and ``python -m bench.<name>`` are.

* Kafka, real and in memory: :mod:`.harness` (the broker, topics, producing, reading committed
  records, workers run through SIGKILLs), :mod:`.cli` (the command line against the test broker),
  :mod:`.memory_kafka` (an in-memory broker with transactions and a group), :mod:`.stages` (a stage
  run by the real engine on it, or initialised with no Kafka).
* The reliability suite: :mod:`.workload` (inputs and offline answers), :mod:`.workers` (worker
  processes, a paced producer), :mod:`.reliability` (a deployment and the comparison).
* Inputs: :mod:`.hostile` (hostile records for every input), :mod:`.warcs` (WARC files),
  :mod:`.charsets` (prose in legacy charsets), :mod:`.simcluster` (the page stage on a simulated
  cluster); the simulated web itself is :mod:`streams.dev.simweb`.
* Quality: :mod:`.extraction` (the article-extraction metric), :mod:`.neardup_set` and
  :mod:`.neardup_transforms` (a labelled near-duplicate set), :mod:`.neardup_ours` (our decisions
  on it), :mod:`.clueweb` (the judged ClueWeb pairs), :mod:`.verdicts` (verdicts on a planted crawl).
* Scrapy: :mod:`.scrapy_site` (a local site), :mod:`.scrapy` (crawls against the stages).
"""
