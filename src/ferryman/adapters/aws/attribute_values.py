"""DynamoDB attribute values, written and read by the small stores.

The low-level client speaks DynamoDB's typed JSON (``{"S": ...}``, ``{"N": "1.5"}``).
Numbers travel as strings: a float is written as ``repr`` (its shortest exact form),
so it reads back as the very same float, and two writes of one float compare equal
in a ConditionExpression. An absent optional is an absent attribute, never NULL, so
a condition such as ``next_probe_at <= :now`` is simply false for it.
"""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]


def text(value: str) -> dict[str, str]:
    return {"S": value}


def number(value: float) -> dict[str, str]:
    if isinstance(value, bool) or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a number DynamoDB can store: {value!r}")
    return {"N": repr(value) if isinstance(value, float) else str(int(value))}


def flag(value: bool) -> dict[str, bool]:
    return {"BOOL": value}


def blob(value: bytes) -> dict[str, bytes]:
    return {"B": value}


def optional(item: Item, name: str, value: float | str | None) -> None:
    """Set ``name`` on ``item`` unless ``value`` is None (then it stays absent)."""
    if value is None:
        return
    item[name] = text(value) if isinstance(value, str) else number(value)


def read_text(item: Item, name: str) -> str | None:
    value = item.get(name)
    return None if value is None or "S" not in value else str(value["S"])


def read_float(item: Item, name: str) -> float | None:
    value = item.get(name)
    return None if value is None or "N" not in value else float(value["N"])


def read_int(item: Item, name: str) -> int | None:
    value = item.get(name)
    return None if value is None or "N" not in value else int(value["N"])


def read_flag(item: Item, name: str) -> bool:
    value = item.get(name)
    return bool(value is not None and value.get("BOOL"))


def read_blob(item: Item, name: str) -> bytes | None:
    value = item.get(name)
    return None if value is None or "B" not in value else bytes(value["B"])


def need_text(item: Item, name: str) -> str:
    value = read_text(item, name)
    if value is None:
        raise ValueError(f"a stored item lacks its {name!r}")
    return value


def need_float(item: Item, name: str) -> float:
    value = read_float(item, name)
    if value is None:
        raise ValueError(f"a stored item lacks its {name!r}")
    return value
