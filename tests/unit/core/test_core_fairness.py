"""core.fairness.fair_pick: free slots go to the tenant holding fewest, oldest first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.fairness import fair_pick


def _pick(waiting, held=None, limit=100):
    held = held or {}
    return fair_pick(
        waiting,
        held=lambda tenant: held.get(tenant, 0),
        waited_since=lambda item: item[1],
        limit=limit,
    )


def test_tenants_alternate_when_they_hold_the_same():
    waiting = {"a": [("a1", 1.0), ("a2", 2.0)], "b": [("b1", 5.0), ("b2", 6.0)]}
    assert [name for name, _ in _pick(waiting)] == ["a1", "b1", "a2", "b2"]


def test_a_tie_goes_to_the_item_that_waited_longest():
    waiting = {"late": [("l1", 9.0)], "early": [("e1", 1.0)]}
    assert [name for name, _ in _pick(waiting)] == ["e1", "l1"]


def test_a_tenant_already_holding_slots_waits_for_the_others_to_catch_up():
    waiting = {"busy": [(f"b{i}", float(i)) for i in range(5)], "idle": [("i1", 99.0)]}
    picked = _pick(waiting, held={"busy": 2}, limit=3)
    assert [name for name, _ in picked] == ["i1", "b0", "b1"]


def test_nothing_waiting_or_no_room_picks_nothing():
    assert _pick({}) == []
    assert _pick({"a": []}) == []
    assert _pick({"a": [("a1", 1.0)]}, limit=0) == []


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(min_value=0, max_value=8), min_size=1),
    st.integers(min_value=0, max_value=30),
)
def test_shares_never_differ_by_more_than_one_among_tenants_with_work_left(counts, limit):
    waiting = {t: [(f"{t}{i}", float(i)) for i in range(n)] for t, n in counts.items()}
    picked = _pick(waiting, limit=limit)
    assert len(picked) == min(limit, sum(counts.values()))
    taken = {t: sum(1 for name, _ in picked if name[0] == t) for t in counts}
    # Each tenant's items come out in their own order.
    for t in counts:
        assert [n for n, _ in picked if n[0] == t] == [f"{t}{i}" for i in range(taken[t])]
    unfinished = [taken[t] for t in counts if taken[t] < counts[t]]
    if unfinished:
        assert max(taken.values()) <= min(unfinished) + 1


def test_among_tenants_holding_the_same_the_longest_waiting_next_item_goes_first():
    # After one slot each, a's next item (10) has waited less than b's (3): b goes first;
    # then each holds two, and b's next (4) beats a's (11).
    waiting = {
        "a": [("a1", 1.0), ("a2", 10.0), ("a3", 11.0)],
        "b": [("b1", 2.0), ("b2", 3.0), ("b3", 4.0)],
    }
    assert [name for name, _ in _pick(waiting)] == ["a1", "b1", "b2", "a2", "b3", "a3"]


def test_each_slot_taken_counts_as_one_more_held():
    # a already holds one, so b gets the first slot; from then on the tenant holding
    # fewer goes next, ties to the older next item (b2 before a1, b3 before a2).
    waiting = {
        "a": [("a1", 5.0), ("a2", 6.0), ("a3", 7.0)],
        "b": [("b1", 1.0), ("b2", 2.0), ("b3", 3.0)],
    }
    picked = _pick(waiting, held={"a": 1})
    assert [name for name, _ in picked] == ["b1", "b2", "a1", "b3", "a2", "a3"]
