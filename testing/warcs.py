"""WARC files written by hand for the replay tests (ISO 28500, WARC/1.1), plain or gzipped per record."""

from __future__ import annotations

import gzip
import itertools

_IDS = itertools.count(1)


def warc_record(kind: str, uri: str | None, block: bytes, *, date: str = "2024-05-01T12:00:00Z",
                content_type: str = "application/http; msgtype=response", extra: str = "") -> bytes:
    """One record: the WARC header block, then ``block`` (for ``response``: the HTTP message)."""
    lines = ["WARC/1.1", f"WARC-Type: {kind}", f"WARC-Date: {date}",
             f"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{next(_IDS):012d}>"]
    if uri is not None:
        lines.append(f"WARC-Target-URI: {uri}")
    lines += [f"Content-Type: {content_type}", f"Content-Length: {len(block)}"]
    lines += [line for line in extra.split("\n") if line]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


HTML_UTF8 = ("Content-Type: text/html; charset=utf-8",)


def http_response(body: bytes, status: str = "200 OK", headers: tuple[str, ...] = HTML_UTF8) -> bytes:
    """An HTTP/1.1 response message as a fetcher received it."""
    head = "\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n"
    return head.encode("latin-1") + body


def response(uri: str, body: bytes, *, date: str = "2024-05-01T12:00:00Z", status: str = "200 OK",
             headers: tuple[str, ...] = HTML_UTF8) -> bytes:
    return warc_record("response", uri, http_response(body, status, headers), date=date)


def chunked(data: bytes, size: int = 7) -> bytes:
    """``data`` in HTTP/1.1 chunked transfer coding, ``size`` bytes a chunk, with an extension."""
    pieces = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def warc_file(records: list[bytes], gzipped: bool = False) -> bytes:
    """Records one after the other; gzipped, each record its own gzip member (as crawlers write)."""
    return b"".join(gzip.compress(r) if gzipped else r for r in records)


def html_page(title: str, text: str, links: tuple[str, ...] = ()) -> bytes:
    anchors = "".join(f'<a href="{link}">link</a> ' for link in links)
    return (f"<!doctype html><html><head><title>{title}</title></head><body><nav>{anchors}</nav>"
            f"<article><h1>{title}</h1><p>{text}</p></article></body></html>").encode()
