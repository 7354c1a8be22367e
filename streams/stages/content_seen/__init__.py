"""The page stage: :mod:`.stage` (route and process) over the block tables (:mod:`.buckets`), the
racing-copies machinery (:mod:`.gather`, :mod:`.horizon`, :mod:`.waiting`, :mod:`.relay`) and the
analysis ahead of a batch (:mod:`.intake`). Page analysis itself, shared with revisit, is
:mod:`streams.pages`."""
