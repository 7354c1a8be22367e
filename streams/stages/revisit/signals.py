"""Did a page change since its last fetch, and which evidence decided?

:func:`detect_change` compares one :class:`Fetch` with the stored :class:`FetchHistory` and returns a
:class:`ChangeDecision`: ``changed`` (``None`` when it cannot be told) and the ``signal`` that
decided. The evidence is read in this order, the first that applies deciding:

1. ``first_fetch`` (``None``): nothing stored to compare with.
2. ``fetch_error`` (``None``): no response, 408, 429 or 5xx; says nothing about the page.
3. ``not_modified`` (unchanged): a 304 answer to our conditional request. The server compared its
   current validators with the ones we sent (RFC 9110 section 13.1; If-None-Match wins over
   If-Modified-Since, section 13.2.2).
4. ``status`` (changed): the status differs from the stored one (a page that became a 404, a
   redirect that became a page); two equal non-2xx statuses are unchanged.
5. The content, when both fetches have a body digest. We hold the bytes, so we judge them rather
   than the server's claims about them: servers behind load balancers send different ETags for
   the same bytes (inode-based ETags), and dynamic pages send a fresh ETag and Last-Modified with
   every response. In turn: ``digest`` equal (byte-identical, unchanged); ``text_digest`` equal (only
   markup or boilerplate moved: counters, dates, tokens, ads and rotating lists outside the change
   text, unchanged); when the wording digests are equal, only numbers inside the text moved, and
   which numbers decides (:mod:`streams.stages.revisit.numbers`, learned from the page's and its
   host's fetches): ``number_edit`` (a number that holds content moved: changed),
   ``number_churn`` (only numbers that move at every fetch: unchanged), ``numbers_unlearned``
   (``None``: numbers the history cannot place yet, the next fetch is a probe); ``wording`` (the
   words changed: changed, however small the edit;
   the SimHash distance grades it, :attr:`ChangeDecision.distance`), unless the operator set
   ``simhash_threshold`` and the SimHashes are at most that far apart (``simhash_trivial``,
   unchanged). The change text and the wording digest are :mod:`streams.pages.changes`'s. A history
   stored before wording digests were kept is compared once without them: texts that differ are
   ``features_upgraded`` (``None``), since the text compared may have been extracted otherwise;
   so are numbers that moved when the history kept no number buckets, and wording digests that
   differ when the stored one masked fewer words (format 2 and before: no month names).
   Without wording digests on either side (a caller of the core that computes none), SimHashes
   decide as before: ``simhash_trivial`` within the threshold, else ``simhash``; without SimHashes
   the text digests, then the body digests (``text_digest``, ``digest``: changed).
6. The validators, when there are no bodies to compare (a fetcher that sends headers only):
   ``etag`` (entity tags compared with the weak comparison of RFC 9110 section 8.8.3.2, as
   If-None-Match does: a strong tag changes with every byte, a weak one only when the server deems
   the content semantically different, and either way an equal tag is what "unchanged" means here);
   then
   ``last_modified`` (section 8.8.2, one-second resolution, so only equality or difference);
   then ``content_length`` (a different length is a change; an equal one proves nothing).
7. ``no_signal`` (``None``): none of the above was available on both fetches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

from streams.stages.revisit.history import FetchHistory
from streams.stages.revisit.numbers import judge, moved_buckets

_ERROR_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Fetch:
    """One fetch as the core sees it: time, status, validators and the content's digests.

    ``fetched_at_s`` is seconds since the Unix epoch; header values are as received (``etag`` with
    its quotes and ``W/`` prefix, ``last_modified`` an HTTP-date); digests are absent for a 304, a
    HEAD, or a body that could not be read; ``content_type`` is the media type essence.
    """

    fetched_at_s: float
    status: int | None = 200
    method: str = "GET"
    etag: str | None = None
    last_modified: str | None = None
    content_length: int | None = None
    body_digest: bytes | None = None
    text_digest: bytes | None = None
    simhash: int | None = None
    content_type: str | None = None
    wording_digest: bytes | None = None
    number_buckets: bytes | None = None

    @property
    def is_error(self) -> bool:
        """No usable answer: no response, a timeout, throttling, or a server error."""
        return self.status is None or self.status >= 500 or self.status in _ERROR_STATUSES


@dataclass(frozen=True, slots=True)
class ChangeDecision:
    """``changed`` is ``None`` when the fetch cannot tell; ``signal`` names the deciding evidence;
    ``distance`` is the bits between the two change texts' SimHashes when both were compared (0 to
    64: how much the text changed)."""

    changed: bool | None
    signal: str
    distance: int | None = None


def detect_change(previous: FetchHistory | None, fetch: Fetch, simhash_threshold: int,
                  host_churn: int = 0) -> ChangeDecision:
    """Compare ``fetch`` with what is stored (the order of evidence is in the module docstring);
    ``host_churn`` is the mask of number buckets the page's host knows to churn
    (:meth:`streams.stages.revisit.numbers.HostNumbers.churn_mask`)."""
    if previous is None:
        return ChangeDecision(None, "first_fetch")
    if fetch.is_error:
        return ChangeDecision(None, "fetch_error")
    if fetch.status == 304:
        return ChangeDecision(False, "not_modified")
    if previous.status is not None and fetch.status != previous.status:
        return ChangeDecision(True, "status")
    if fetch.status is not None and not 200 <= fetch.status < 300:
        return ChangeDecision(False, "status")
    if fetch.body_digest is not None and previous.body_digest is not None:
        return _content_decision(previous, fetch, simhash_threshold, host_churn)
    return _validator_decision(previous, fetch)


def _content_decision(previous: FetchHistory, fetch: Fetch, simhash_threshold: int,
                      host_churn: int) -> ChangeDecision:
    if fetch.body_digest == previous.body_digest:
        return ChangeDecision(False, "digest")
    if fetch.text_digest is not None and fetch.text_digest == previous.text_digest:
        return ChangeDecision(False, "text_digest", 0 if fetch.simhash == previous.simhash else None)
    distance = None
    if fetch.simhash is not None and previous.simhash is not None:
        distance = (fetch.simhash ^ previous.simhash).bit_count()
    if fetch.wording_digest is not None and previous.wording_digest is not None:
        if fetch.wording_digest == previous.wording_digest:
            return _numbers_decision(previous, fetch, host_churn, distance)
        if previous.legacy_wording:
            return ChangeDecision(None, "features_upgraded", distance)
        if distance is not None and distance <= simhash_threshold:
            return ChangeDecision(False, "simhash_trivial", distance)
        return ChangeDecision(True, "wording", distance)
    if fetch.wording_digest is not None and previous.text_digest is not None:
        return ChangeDecision(None, "features_upgraded", distance)
    if distance is not None:
        if distance <= simhash_threshold:
            return ChangeDecision(False, "simhash_trivial", distance)
        return ChangeDecision(True, "simhash", distance)
    if fetch.text_digest is not None and previous.text_digest is not None:
        return ChangeDecision(True, "text_digest")
    return ChangeDecision(True, "digest")


def _numbers_decision(previous: FetchHistory, fetch: Fetch, host_churn: int,
                      distance: int | None) -> ChangeDecision:
    """Only numbers moved: which ones decides (:func:`streams.stages.revisit.numbers.judge`)."""
    if fetch.number_buckets is None or previous.number_buckets is None:
        return ChangeDecision(None, "features_upgraded", distance)
    moved = moved_buckets(previous.number_buckets, fetch.number_buckets)
    verdict = judge(moved, previous.numbers_steady, previous.numbers_churn, previous.numbers_probing,
                    host_churn)
    return ChangeDecision(verdict.changed, verdict.signal, distance)


def _validator_decision(previous: FetchHistory, fetch: Fetch) -> ChangeDecision:
    if fetch.etag is not None and previous.etag is not None:
        return ChangeDecision(not etags_match_weakly(fetch.etag, previous.etag), "etag")
    fetched_modified = http_date_s(fetch.last_modified)
    stored_modified = http_date_s(previous.last_modified)
    if fetched_modified is not None and stored_modified is not None:
        return ChangeDecision(fetched_modified != stored_modified, "last_modified")
    if fetch.content_length is not None and previous.content_length is not None \
            and fetch.content_length != previous.content_length:
        return ChangeDecision(True, "content_length")
    return ChangeDecision(None, "no_signal")


def etags_match_weakly(a: str, b: str) -> bool:
    """RFC 9110 section 8.8.3.2 weak comparison: the opaque tags are equal, ``W/`` or not."""
    return _opaque_tag(a) == _opaque_tag(b)


def _opaque_tag(tag: str) -> str:
    tag = tag.strip()
    return tag[2:] if tag.startswith("W/") else tag


def http_date_s(value: str | None) -> float | None:
    """An HTTP-date (RFC 9110 section 5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms)
    as seconds since the epoch; ``None`` when absent or unreadable (section 13.1.3 says to ignore an
    invalid date). The obsolete forms carry no zone and are GMT by definition."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
