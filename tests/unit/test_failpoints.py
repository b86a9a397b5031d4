"""Failpoints: parsed strictly, free when unset, and a real abrupt exit when hit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ferryman.failpoints import CRASH_EXIT_CODE, POINTS, Failpoints


def test_unset_means_no_points() -> None:
    assert Failpoints.parse(None).probabilities == {}
    assert Failpoints.parse("").probabilities == {}
    Failpoints.parse(None).hit("after_claim")  # returns: nothing configured


def test_spec_is_parsed_per_point() -> None:
    points = Failpoints.parse("after_claim=crash@0.1, before_ack=crash")
    assert points.probabilities == {"after_claim": 0.1, "before_ack": 1.0}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("after_lunch=crash@0.1", "unknown failpoint"),
        ("after_claim=hang@0.1", "only 'crash'"),
        ("after_claim=crash@1.5", "within 0..1"),
        ("after_claim=crash@often", "could not convert"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Failpoints.parse(spec)


def test_the_architecture_points_are_all_known() -> None:
    assert {
        "after_receive",
        "after_claim",
        "after_invoke",
        "after_result_put",
        "after_publish",
        "before_ack",
    } == POINTS


def test_a_hit_exits_the_process_abruptly() -> None:
    script = textwrap.dedent(
        """
        import atexit
        from ferryman.failpoints import Failpoints
        atexit.register(lambda: print("cleanup ran"))
        Failpoints.parse("after_invoke=crash@1").hit("after_invoke")
        print("survived")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == CRASH_EXIT_CODE
    assert done.stdout == b""  # no cleanup, no flush: like a power cut
    assert done.stderr == b"ferryman: failpoint after_invoke hit, exiting\n"


def test_probability_zero_never_fires() -> None:
    points = Failpoints.parse("after_claim=crash@0")
    for _ in range(1000):
        points.hit("after_claim")
