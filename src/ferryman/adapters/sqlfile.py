"""Named SQL blocks kept in .sql files, loaded once from package data.

A file holds blocks headed by ``-- name: <block>``; each block runs up to the next
header. Keeping SQL in files keeps it readable, reviewable and greppable, and the
loader is engine-independent so every SQL adapter shares it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)


def read_sql(package: str, resource: str) -> str:
    """The whole text of a .sql file shipped inside ``package``."""
    return resources.files(package).joinpath(resource).read_text(encoding="utf-8")


def parse_blocks(text: str) -> dict[str, str]:
    """Split SQL text into its named blocks; a repeated name is an error."""
    headers = list(_HEADER.finditer(text))
    blocks: dict[str, str] = {}
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        name = header.group("name")
        if name in blocks:
            raise ValueError(f"SQL block {name!r} is defined twice")
        blocks[name] = text[header.end() : end].strip()
    return blocks


class Queries(Mapping[str, str]):
    """The named blocks of one .sql file; a missing name raises KeyError with the file's name."""

    def __init__(self, blocks: Mapping[str, str], *, source: str = "<sql>") -> None:
        self._blocks = dict(blocks)
        self._source = source

    @classmethod
    def load(cls, package: str, resource: str) -> Queries:
        return cls(parse_blocks(read_sql(package, resource)), source=f"{package}/{resource}")

    def __getitem__(self, name: str) -> str:
        try:
            return self._blocks[name]
        except KeyError:
            raise KeyError(f"no SQL block {name!r} in {self._source}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._blocks)

    def __len__(self) -> int:
        return len(self._blocks)
