"""The revisit stage: :mod:`.stage`, the thin stage (:mod:`.spec` declares it), around a pure core:
fetch history, change signals, change-rate estimators, intervals.

Nothing in the core imports Kafka or RocksDB; the
benchmark (``bench/revisit_sim.py``) drives it through ``python -m streams revisit --offline``.

* :mod:`.history`: what is kept per URL, and its compact versioned encoding.
* :mod:`.signals`: did the page change since the last fetch, and which evidence said so.
* :mod:`.estimators`: Poisson change rates from a page's fetch history (Cho and Garcia-Molina 2003).
* :mod:`.allocation`: the freshness-optimal refresh frequency under a fetch budget (Lagrange).
* :mod:`.budget`: the shard's shared allocation state (rate histogram, multiplier, spend feedback).
* :mod:`.schedule`: the one pure step per fetch that ties them together.
* :mod:`.policies`: the interval policies (``default``, ``nutch``, ``fixed``) and their bounds.
* :mod:`.prefetch`: the check of a HEAD response before a full fetch.
"""
