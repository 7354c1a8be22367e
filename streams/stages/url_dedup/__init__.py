"""The URL stage: :mod:`.stage` (route and process), :mod:`.spec` (its declaration, with its
commands), :mod:`.settings`, the seen-set (:mod:`.bloom_store` over :mod:`.bloom`) and :mod:`.migrate`
(``python -m streams url-dedup-migrate``).
Canonicalization, shared with the other stages, is :mod:`streams.urls`."""
