"""Seed 004's pre-fetch check: does a HEAD response say the page must be fetched in full?

Seed 004 (incremental collection on Nutch) skips the full fetch when the HEAD response's
Content-Length and Last-Modified equal the stored ones. :func:`fetch_needed` answers that, with
the reason, reading the evidence in this order:

1. ``no_history``: nothing stored, fetch.
2. ETag on both sides (RFC 9110 section 8.8.3, weak comparison as for If-None-Match):
   ``etag_unchanged`` (skip) or ``etag_changed`` (fetch). An entity tag is the more precise
   validator, so it wins over the date (section 13.2.2 gives If-None-Match the same precedence).
3. Last-Modified on both sides: a different date is ``last_modified_changed`` (fetch). An equal
   date with a different Content-Length is ``content_length_changed`` (fetch); with an equal one
   ``unchanged`` (skip: both validators agree); with no length to compare ``last_modified_unchanged`` (skip).
4. Content-Length alone: a different one is ``content_length_changed`` (fetch); an equal one is
   ``content_length_only`` (fetch: an edit that keeps the length, a date or a digit, is common).
5. ``no_validators``: nothing to compare, fetch.
"""

from __future__ import annotations

from streams.stages.revisit.history import FetchHistory
from streams.stages.revisit.signals import etags_match_weakly, http_date_s


def fetch_needed(history: FetchHistory | None, head_content_length: int | None,
                 head_last_modified: str | None, head_etag: str | None = None) -> tuple[bool, str]:
    """``(fetch needed, reason)`` for a HEAD response (module docstring)."""
    if history is None:
        return True, "no_history"
    if head_etag is not None and history.etag is not None:
        if etags_match_weakly(head_etag, history.etag):
            return False, "etag_unchanged"
        return True, "etag_changed"
    length_known = head_content_length is not None and history.content_length is not None
    length_changed = length_known and head_content_length != history.content_length
    head_modified_s = http_date_s(head_last_modified)
    stored_modified_s = http_date_s(history.last_modified)
    if head_modified_s is not None and stored_modified_s is not None:
        if head_modified_s != stored_modified_s:
            return True, "last_modified_changed"
        if length_changed:
            return True, "content_length_changed"
        return False, "unchanged" if length_known else "last_modified_unchanged"
    if length_changed:
        return True, "content_length_changed"
    if length_known:
        return True, "content_length_only"
    return True, "no_validators"
