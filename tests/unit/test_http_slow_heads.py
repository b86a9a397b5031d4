"""Slow request heads, counted apart from the connection cap (http/slow_heads.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ferryman.http.slow_heads import HeadWaits


@dataclass(eq=False)
class Connection:
    client_address: str
    closed: bool = field(default=False)

    def close_slow(self) -> None:
        self.closed = True


def waiting(waits: HeadWaits, address: str, count: int) -> list[Connection]:
    for _ in range(count):
        waits.started()
    return [Connection(address) for _ in range(count)]


def test_waiting_connections_are_counted_until_their_head_is_in() -> None:
    waits = HeadWaits(total=10, per_client=10)
    a, b = waiting(waits, "10.0.0.1", 2)

    waits.ended(a)

    assert waits.waiting == 1
    waits.slow(b)
    waits.ended(b)
    assert (waits.waiting, waits.slow_count) == (0, 0)


def test_past_its_cap_a_clients_oldest_slow_head_is_closed_and_no_one_elses() -> None:
    waits = HeadWaits(total=10, per_client=2)
    other = waiting(waits, "10.0.0.2", 2)
    own = waiting(waits, "10.0.0.1", 4)

    for connection in [*other, *own]:
        waits.slow(connection)

    assert [c.closed for c in own] == [True, True, False, False]
    assert not any(c.closed for c in other)
    assert waits.slow_count == 4


def test_past_the_total_the_oldest_slow_head_is_closed_whoever_holds_it() -> None:
    waits = HeadWaits(total=3, per_client=3)
    first = waiting(waits, "10.0.0.2", 2)
    later = waiting(waits, "10.0.0.1", 2)

    for connection in [*first, *later]:
        waits.slow(connection)

    assert [c.closed for c in [*first, *later]] == [True, False, False, False]


def test_a_closed_connection_ending_its_wait_is_forgotten_once() -> None:
    waits = HeadWaits(total=1, per_client=1)
    a, b = waiting(waits, "10.0.0.1", 2)
    waits.slow(a)
    waits.slow(b)  # closes a

    waits.ended(a)  # its connection_lost, later
    waits.ended(b)

    assert a.closed and not b.closed
    assert (waits.waiting, waits.slow_count) == (0, 0)


def test_the_caps_are_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HeadWaits(total=0, per_client=1)
