"""bench/aws_requests.py's meter: DynamoDB's write units as its published rules count them.

The goal in docs/benchmarks.md ("AWS requests per job") is judged by these counts, so
each rule is held here: the item's size (the larger of before and after, doubled in a
transaction), and the index entries a write puts, rewrites, moves or deletes.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load

pytest.importorskip("aiobotocore", reason="bench/aws_requests.py needs ferryman[aws]")
bench = load("bench_aws_requests", "aws_requests.py")

# One index keyed on (ipk, isk) that holds "shown"; nothing else.
INDEXES = {"ix": (frozenset({"ipk", "isk"}), frozenset({"ipk", "isk", "pk", "sk", "shown"}))}
KEY = {"pk": {"S": "a"}, "sk": {"S": "b"}}


def _units(meter: Any) -> float:
    return float(meter.counts["dynamodb_write_units"])


def _update(expression: str, values: dict[str, Any], names: dict[str, str] | None = None):
    op: dict[str, Any] = {"TableName": "t", "Key": KEY, "UpdateExpression": expression}
    op["ExpressionAttributeValues"] = values
    if names:
        op["ExpressionAttributeNames"] = names
    return op


def _put(meter: Any, **attributes: Any) -> None:
    meter._dynamodb("PutItem", {"TableName": "t", "Item": {**KEY, **attributes}}, {})


def test_a_put_into_an_index_is_its_kb_and_one_entry_and_doubled_in_a_transaction() -> None:
    meter = bench.Meter(INDEXES)
    item = {**KEY, "ipk": {"S": "p"}, "isk": {"S": "s"}, "blob": {"S": "x" * 1500}}

    meter._dynamodb(
        "TransactWriteItems", {"TransactItems": [{"Put": {"TableName": "t", "Item": item}}]}, {}
    )

    assert _units(meter) == 2 * 2 + 1  # 2 KB, in a transaction; one index entry


@pytest.mark.parametrize(
    ("expression", "names", "index_writes"),
    [
        ("SET other = :v", {}, 0),  # nothing the index holds
        ("SET #s = :v", {"#s": "shown"}, 1),  # a projected attribute: rewritten
        ("SET isk = :v", {}, 2),  # its key moved: deleted and put
        ("REMOVE ipk", {}, 1),  # out of the index: deleted
    ],
)
def test_an_update_writes_an_index_entry_only_as_far_as_it_touches_it(
    expression: str, names: dict[str, str], index_writes: int
) -> None:
    meter = bench.Meter(INDEXES)
    _put(meter, ipk={"S": "p"}, isk={"S": "s"}, shown={"S": "1"}, other={"S": "1"})
    before = _units(meter)

    meter._dynamodb("UpdateItem", _update(expression, {":v": {"S": "2"}}, names), {})

    assert _units(meter) - before == 1 + index_writes


def test_an_item_outside_the_index_costs_it_nothing_and_entering_it_costs_one() -> None:
    meter = bench.Meter(INDEXES)
    _put(meter, shown={"S": "1"})
    assert _units(meter) == 1

    meter._dynamodb("UpdateItem", _update("SET shown = :v", {":v": {"S": "2"}}), {})
    meter._dynamodb(
        "UpdateItem", _update("SET ipk = :p, isk = :s", {":p": {"S": "p"}, ":s": {"S": "s"}}), {}
    )

    assert _units(meter) == 1 + 1 + (1 + 1)


def test_an_update_is_charged_for_the_larger_of_the_item_before_and_after() -> None:
    meter = bench.Meter(INDEXES)
    _put(meter, big={"S": "x" * 3000})  # 3 units

    meter._dynamodb("UpdateItem", _update("REMOVE big", {}), {})
    meter._dynamodb("UpdateItem", _update("SET small = :v", {":v": {"S": "y"}}), {})

    assert _units(meter) == 3 + 3 + 1
