"""The record format of a results segment, and how a ref proves the bytes it leads to.

A record is a JSON header line, the result's bytes, and a newline, so a segment
reads as text::

    {"key":"acme/gen_01....att_01....json","length":17,"sha256":"9f86d0..."}
    {"text": "hello"}

A ref names the segment, the record's offset, the result's length and its checksum:
``file:<segment>@<offset>+<length>;sha256=<hex>``. The header says whose record it
is; the ref (kept in the job row) says what the bytes must hash to, so even a
consistent rewrite of header and data is caught. A read is served only when the
header carries the key the reader expects, the lengths agree, the record is whole,
and the checksum matches.

Refs written before checksums existed, ``file:<segment>@<offset>+<length>`` with the
offset of the data itself, stay readable: their header (the line just before the
data) must carry the expected key and length, and the record must be whole. A
change of bytes in place cannot be seen there; nothing else can be served.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ferryman.core.errors import ResultUnreadableError
from ferryman.core.results import checksum

# Headers are refused above this at write time, so a reader knows how far to look.
MAX_HEADER_BYTES = 4096
# Old writers put no bound on keys; their headers are looked for this far back.
_LEGACY_HEADER_BYTES = 65536
_SEGMENT = r"[0-9A-Z]{26}\.results"
SEGMENT_NAME = re.compile(rf"^{_SEGMENT}$")
_REF = re.compile(rf"^file:({_SEGMENT})@(\d+)\+(\d+)(?:;sha256=([0-9a-f]{{64}}))?$")


@dataclass(frozen=True, slots=True)
class FileRef:
    segment: str
    # Where the record's header starts; for a legacy ref, where its data starts.
    offset: int
    length: int
    # None for a ref written before checksums (legacy).
    sha256: str | None

    def __str__(self) -> str:
        ref = f"file:{self.segment}@{self.offset}+{self.length}"
        return ref if self.sha256 is None else f"{ref};sha256={self.sha256}"

    def window(self) -> tuple[int, int]:
        """The (start, size) of the bytes to read to verify this ref."""
        if self.sha256 is None:
            start = max(0, self.offset - _LEGACY_HEADER_BYTES)
            return start, self.offset - start + self.length + 1
        return self.offset, MAX_HEADER_BYTES + self.length + 1


def parse_ref(ref: str) -> FileRef:
    match = _REF.match(ref)
    if match is None:
        raise ResultUnreadableError("the stored result's reference is not a file reference")
    segment, offset, length, sha256 = match.groups()
    return FileRef(segment=segment, offset=int(offset), length=int(length), sha256=sha256)


def encode_record(key: str, data: bytes) -> tuple[bytes, str]:
    """The header line of a record of ``data`` under ``key``, and the data's checksum."""
    digest = checksum(data)
    header = json.dumps({"key": key, "length": len(data), "sha256": digest}, separators=(",", ":"))
    encoded = header.encode("ascii") + b"\n"
    if len(encoded) > MAX_HEADER_BYTES:
        raise ValueError(f"a result key must fit a {MAX_HEADER_BYTES}-byte record header")
    return encoded, digest


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    length: int
    sha256: str | None


def parse_header(line: bytes) -> Header | None:
    """The header in ``line`` (without its newline), or None if it is not one."""
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    key, length, sha256 = fields.get("key"), fields.get("length"), fields.get("sha256")
    if not isinstance(key, str) or type(length) is not int or length < 0:
        return None
    return Header(key=key, length=length, sha256=sha256 if isinstance(sha256, str) else None)


def verify(ref: FileRef, buffer: bytes, start: int, *, key: str) -> bytes:
    """The data ``ref`` names, from ``buffer`` (read from ``start``), once proven to be
    the whole record of ``key``; otherwise ResultUnreadableError."""
    if ref.sha256 is None:
        return _verify_legacy(ref, buffer, ref.offset - start, key=key)
    end_of_header = buffer.find(b"\n", 0, MAX_HEADER_BYTES)
    if end_of_header < 0:
        raise _damaged("no record starts at the referenced offset")
    header = _checked_header(buffer[:end_of_header], key=key, length=ref.length)
    if header.sha256 != ref.sha256:
        raise _damaged("the record's checksum is not the one its job refers to")
    data = _whole_data(buffer, end_of_header + 1, ref.length)
    if checksum(data) != ref.sha256:
        raise _damaged("the result's bytes do not match their checksum")
    return data


def _verify_legacy(ref: FileRef, buffer: bytes, data_at: int, *, key: str) -> bytes:
    if data_at < 1 or buffer[data_at - 1 : data_at] != b"\n":
        raise _damaged("no record header precedes the referenced offset")
    line_start = buffer.rfind(b"\n", 0, data_at - 1) + 1
    if line_start == 0 and ref.offset > data_at:
        raise _damaged("no record header precedes the referenced offset")
    _checked_header(buffer[line_start : data_at - 1], key=key, length=ref.length)
    return _whole_data(buffer, data_at, ref.length)


def _checked_header(line: bytes, *, key: str, length: int) -> Header:
    header = parse_header(line)
    if header is None:
        raise _damaged("the record header is unreadable")
    # Never say whose record it is: that could be another tenant's.
    if header.key != key:
        raise _damaged("the record found belongs to another result")
    if header.length != length:
        raise _damaged("the record's length is not the one its job refers to")
    return header


def _whole_data(buffer: bytes, at: int, length: int) -> bytes:
    data = buffer[at : at + length]
    if len(data) != length or buffer[at + length : at + length + 1] != b"\n":
        raise _damaged("the record is cut short")
    return data


def _damaged(reason: str) -> ResultUnreadableError:
    return ResultUnreadableError(f"the stored result failed verification: {reason}")
