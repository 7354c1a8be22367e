"""Web archives: WARC revisit records for byte-identical payloads (docs/web-archives.md).

Pure, no Kafka or RocksDB here: :mod:`.payload` (the WARC payload digest), :mod:`.warc_records`
(WARC records as their bytes, read and written), :mod:`.revisit` (the revisit record),
:mod:`.cdx` (CDX and CDXJ index lines), :mod:`.dedup` (which response becomes a revisit, over an
index of first captures it is given). The ``warc-dedup`` and ``warc-import-cdx`` commands are
their adapter (:mod:`streams.ops.warc_dedup`), the page stage's verdicts the other user
(:mod:`streams.stages.content_seen`).
"""
