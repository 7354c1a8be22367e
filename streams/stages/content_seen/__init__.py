"""The page stage: :mod:`.stage` wires its processors (:mod:`.route`, :mod:`.probe`, :mod:`.gather`,
:mod:`.decide`, the records between them in :mod:`.shard_records`), :mod:`.spec` declares it; the
block tables (:mod:`.buckets`), the racing-copies machinery (:mod:`.horizon`, :mod:`.waiting`,
:mod:`.relay`) and the analysis ahead of a batch (:mod:`.intake`). Page analysis itself, shared
with revisit, is :mod:`streams.pages`."""
