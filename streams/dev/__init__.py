"""Development only: ``crawl-dedup demo`` (:mod:`.demo`) and the simulated web it replays (:mod:`.simweb`).

Shipped in the package so that ``make demo`` and ``crawl-dedup demo`` run from a checkout or a
wheel alike, and used by the tests and benchmarks for their crawls; nothing a stage, the runtime, an
integration or an operations command runs imports it (``tools/import_rules.py``, run by
``make lint``, checks that only the command line's ``demo`` command does). Not an interface: it may
change with any release.
"""
