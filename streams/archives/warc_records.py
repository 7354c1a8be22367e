"""WARC records as their own bytes: read from a WARC file, written to another unchanged.

Why not FastWARC here, as ``replay`` reads (:mod:`streams.ops.warc`): a de-duplicated archive must
hold every record it does not turn into a revisit byte for byte as it was, header lines and
compression included, and a parser hands back parsed fields. So this reader splits the stream into
records itself (ISO 28500:2017 section 4: a version line, header fields up to an empty line,
``Content-Length`` bytes of block, then two CRLFs) and keeps each one's exact bytes. A ``.warc.gz``
is a sequence of gzip members, one record each as section D.2 of the standard recommends and
crawlers write; each member's compressed bytes are kept too, so a record passed through is copied
without being compressed again (:class:`Record.member`). A member holding several records, or a
record spread over several, is read all the same; its records are then compressed afresh.

A record is held in memory whole: the largest record of an input bounds the memory a run takes.
Anything that is not a WARC record where one should start ends the read with
:class:`MalformedWarc`, naming the offset (the uncompressed one, and the member's for gzip).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

GZIP_MAGIC: Final = b"\x1f\x8b"
READ_BYTES: Final = 1 << 20
PIECE_BYTES: Final = 1 << 16
MAX_HEADER_BYTES: Final = 1 << 20  # a WARC header block larger than this is not one
COMPRESS_LEVEL: Final = 6  # zlib's default: Heritrix and warcio's choice too; 9 costs twice the time
_END: Final = b"\r\n\r\n"


class MalformedWarc(ValueError):
    """The bytes at ``offset`` are not a WARC record."""

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(f"offset {offset}: {detail}")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Record:
    """One WARC record: ``head`` (version line and header fields, through the empty line),
    ``block`` (``Content-Length`` bytes), the fields parsed from the head (names as written,
    in order), its offset in the uncompressed input and, when it was a gzip member of its own,
    that member's bytes (``member``) to copy as they are."""

    head: bytes
    block: bytes
    fields: tuple[tuple[str, str], ...]
    offset: int
    member: bytes | None = None

    def field(self, name: str) -> str | None:
        """The first value of a header field (names compare case-insensitively, section 4)."""
        wanted = name.lower()
        for found, value in self.fields:
            if found.lower() == wanted:
                return value
        return None

    @property
    def kind(self) -> str:
        return (self.field("WARC-Type") or "").lower()

    def raw(self) -> bytes:
        """The record's uncompressed bytes, its two closing CRLFs included."""
        return self.head + self.block + _END


def parse_head(head: bytes, offset: int) -> tuple[tuple[str, str], ...]:
    """The fields of a WARC header block (``head`` ends with its empty line). Continuation lines
    (section 4: a line starting with space or tab continues the field before) are joined."""
    lines = head.decode("utf-8", "surrogateescape").split("\n")
    if not lines[0].startswith("WARC/"):
        raise MalformedWarc(offset, f"no WARC version line: {lines[0][:40]!r}")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        line = line.rstrip("\r")
        if not line:
            continue
        if line[0] in " \t" and fields:
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {line.strip()}")
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise MalformedWarc(offset, f"a header line without a colon: {line[:40]!r}")
        fields.append((name.strip(), value.strip()))
    return tuple(fields)


def content_length(fields: tuple[tuple[str, str], ...], offset: int) -> int:
    for name, value in fields:
        if name.lower() == "content-length":
            try:
                length = int(value)
            except ValueError:
                break
            if length >= 0:
                return length
            break
    raise MalformedWarc(offset, "no valid Content-Length")


class _Members:
    """The uncompressed bytes of a stream, with the gzip members they came from.

    Compressed bytes wait in one buffer, read a MiB at a time; each member is inflated from pieces
    of :data:`PIECE_BYTES` taken at a position in it, so what zlib hands back past a member's end
    (``unused_data``, a copy) is a piece at most, and the buffer is compacted only when more is read."""

    def __init__(self, stream: BinaryIO, first: bytes) -> None:
        self._stream = stream
        self._pending = first  # compressed bytes read
        self._start = 0  # where the current member starts in them
        self._position = 0  # how far it has been inflated
        self._eof = False

    def next_member(self) -> tuple[bytes, bytes] | None:
        """The next member's (compressed, uncompressed) bytes; None at the end of the stream."""
        self._start = self._position
        if self._position >= len(self._pending) and not self._more():
            return None
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        out = bytearray()
        while True:
            if self._position >= len(self._pending) and not self._more():
                raise zlib.error("the gzip stream ends inside a member")
            piece = self._pending[self._position:self._position + PIECE_BYTES]
            out += inflater.decompress(piece)
            if inflater.eof:
                self._position += len(piece) - len(inflater.unused_data)
                return self._pending[self._start:self._position], bytes(out)
            self._position += len(piece)

    def _more(self) -> bool:
        """Read more, keeping the current member's bytes (those before it are dropped)."""
        chunk = self._stream.read(READ_BYTES)
        if not chunk:
            self._eof = True
            return False
        self._pending = self._pending[self._start:] + chunk
        self._position -= self._start
        self._start = 0
        return True


def read_records(stream: BinaryIO) -> Iterator[Record]:
    """Every record of a WARC stream, plain or gzipped (detected from its first bytes), in order.
    Raises :class:`MalformedWarc` (or ``zlib.error`` for broken compression) where the bytes stop
    being records; trailing empty lines at the end are allowed."""
    first = stream.read(2)
    if first == GZIP_MAGIC:
        yield from _gzip_records(_Members(stream, first))
    else:
        yield from _plain_records(first, stream)


def _plain_records(first: bytes, stream: BinaryIO) -> Iterator[Record]:
    buffer, position, offset, eof = first, 0, 0, False
    while True:
        found = None if eof and not buffer[position:].strip() else _split(buffer, position, offset, eof)
        if found is None:
            if eof:
                return
            chunk = stream.read(READ_BYTES)
            eof = not chunk
            buffer = buffer[position:] + chunk
            offset, position = offset + position, 0
            continue
        record, used = found
        yield record
        position = used


def _gzip_records(members: _Members) -> Iterator[Record]:
    buffer, position, offset = b"", 0, 0
    while True:
        member = members.next_member()
        rest = buffer[position:]
        if member is None:
            if rest.strip():
                found = _split(rest, 0, offset, eof=True)
                assert found is not None  # at the end, a record or an error
                yield found[0]
            return
        compressed, data = member
        aligned = not rest.strip()
        if aligned:
            offset += len(rest)
            buffer = data
        else:
            buffer = rest + data
        position = 0
        while True:
            found = _split(buffer, position, offset, eof=False)
            if found is None:
                break
            record, used = found
            whole = aligned and position == 0 and used == len(buffer)
            yield Record(record.head, record.block, record.fields, record.offset,
                         compressed if whole else None)
            position = used
        offset += position
        buffer = buffer[position:] if position else buffer
        position = 0


def _split(buffer: bytes, position: int, offset: int, eof: bool) -> tuple[Record, int] | None:
    """The record of ``buffer`` at ``position`` (``offset``: where ``buffer`` starts in the
    input) and the position after it (its trailing CRLFs included), or None when ``buffer`` does
    not hold all of it yet (an error at ``eof``)."""
    start = position
    while start < len(buffer) and buffer[start] in b"\r\n":  # blank lines between records
        start += 1
    head_end = buffer.find(b"\r\n\r\n", start)
    if head_end < 0:
        if len(buffer) - start > MAX_HEADER_BYTES or (eof and buffer[start:].strip()):
            raise MalformedWarc(offset + start, "no end of the WARC header block")
        return None
    head = buffer[start:head_end + 4]
    fields = parse_head(head, offset + start)
    length = content_length(fields, offset + start)
    block_end = head_end + 4 + length
    if len(buffer) < block_end + 4 and not eof:
        return None
    if len(buffer) < block_end:
        raise MalformedWarc(offset + start, f"the input ends inside a record of {length} bytes")
    tail = buffer[block_end:block_end + 4]
    if tail != _END[:len(tail)]:
        raise MalformedWarc(offset + block_end, "the record's block is not followed by CRLF CRLF")
    record = Record(head, buffer[head_end + 4:block_end], fields, offset + start)
    return record, block_end + len(tail)


def compress(raw: bytes, level: int = COMPRESS_LEVEL) -> bytes:
    """A record as a gzip member of its own (RFC 1952)."""
    packer = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return packer.compress(raw) + packer.flush()


class RecordWriter:
    """Records to a WARC stream: gzipped, each its own member (a passed-through member copied as it
    was), or plain."""

    def __init__(self, out: BinaryIO, gzipped: bool) -> None:
        self._out = out
        self.gzipped = gzipped
        self.bytes_written = 0

    def write(self, record: Record) -> int:
        """Write ``record`` as it was read; the bytes written."""
        if self.gzipped and record.member is not None:
            return self._put(record.member)
        return self.write_raw(record.raw())

    def write_raw(self, raw: bytes) -> int:
        """Write a record's uncompressed bytes (compressed here for a gzipped stream)."""
        return self._put(compress(raw) if self.gzipped else raw)

    def _put(self, data: bytes) -> int:
        self._out.write(data)
        self.bytes_written += len(data)
        return len(data)
