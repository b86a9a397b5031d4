"""bench/peers.py's pure parts: run order, medians (min-max), CPU of process trees, the report.

The benchmark itself needs Redis, PostgreSQL and the peers' virtualenv; these tests
need none of them. bench/ is not a package: its two modules are loaded by path.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from bench_modules import load

# peers.py imports ``peer_systems`` by that name, as it does when run as a script.
peer_systems = load("peer_systems", "peer_systems.py")
peers = load("bench_peers", "peers.py")


# --- interleaving --------------------------------------------------------------------


def test_round_zero_runs_the_systems_in_table_order() -> None:
    assert peers.rotated(["a", "b", "c"], 0) == ["a", "b", "c"]


def test_each_round_starts_one_system_further_and_wraps() -> None:
    assert peers.rotated(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert peers.rotated(["a", "b", "c"], 2) == ["c", "a", "b"]
    assert peers.rotated(["a", "b", "c"], 3) == ["a", "b", "c"]


def test_over_as_many_rounds_as_systems_each_system_holds_each_slot_once() -> None:
    keys = ["a", "b", "c", "d"]
    orders = [peers.rotated(keys, r) for r in range(len(keys))]
    for order in orders:
        assert sorted(order) == keys
    for slot in range(len(keys)):
        assert sorted(order[slot] for order in orders) == keys


def test_no_systems_is_an_empty_round() -> None:
    assert peers.rotated([], 5) == []


# --- medians (min-max) ----------------------------------------------------------------


def test_a_cell_is_the_median_with_min_and_max_as_the_issue_writes_it() -> None:
    assert peers.Spread.of([1418.2, 994.0, 1384.4]).cell() == "1,384 (994-1,418)"


def test_an_even_count_takes_the_mean_of_the_middle_two() -> None:
    spread = peers.Spread.of([1.0, 4.0, 2.0, 3.0])
    assert (spread.median, spread.low, spread.high) == (2.5, 1.0, 4.0)


def test_a_single_run_shows_its_figure_alone() -> None:
    assert peers.Spread.of([846.0]).cell() == "846"


# --- choosing systems ----------------------------------------------------------------


def test_groups_expand_in_table_order() -> None:
    assert peers.parse_systems("ferryman") == [k for k in peers.SYSTEMS if k.startswith("ferryman")]
    assert peers.parse_systems("peers") == ["celery", "dbos", "rq", "procrastinate"]
    assert peers.parse_systems("ferryman-single, celery") == ["celery", "ferryman-single"]


def test_an_unknown_system_is_refused_with_the_known_ones() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown system 'kafka'.*celery"):
        peers.parse_systems("celery,kafka")


# --- CPU of process trees -------------------------------------------------------------


def _stat(pid: int, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # The command name may hold spaces and parentheses: only the last ')' ends it.
    head = f"{pid} (celery: (worker) 1) S {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0"
    return f"{head} {utime} {stime} {cutime} {cstime} 20 0 1 0 12345 0 0\n"


def test_a_stat_line_gives_parent_and_all_four_cpu_fields() -> None:
    stat = peer_systems.parse_stat(_stat(42, 7, utime=10, stime=5, cutime=3, cstime=2))
    assert (stat.pid, stat.ppid, stat.ticks) == (42, 7, 20)


def _table(*stats: tuple[int, int, int]) -> dict[int, object]:
    return {pid: peer_systems.ProcStat(pid=pid, ppid=ppid, ticks=t) for pid, ppid, t in stats}


def test_a_tree_counts_its_root_and_every_descendant_and_nothing_else() -> None:
    stats = _table(
        (1, 0, 1000),  # init: not ours
        (10, 1, 5),  # the worker we started
        (11, 10, 7),  # its pool child
        (12, 11, 11),  # a grandchild
        (20, 1, 100),  # Redis, started by someone else
    )
    assert peer_systems.tree_ticks([10], stats) == 5 + 7 + 11


def test_several_roots_are_summed_once_each_even_when_nested() -> None:
    stats = _table((10, 1, 5), (11, 10, 7), (30, 1, 2))
    assert peer_systems.tree_ticks([10, 11, 30], stats) == 5 + 7 + 2


def test_a_root_that_has_exited_counts_nothing() -> None:
    assert peer_systems.tree_ticks([99], _table((10, 1, 5))) == 0


def test_proc_is_read_from_every_numeric_entry_and_vanished_ones_are_skipped(
    tmp_path: Path,
) -> None:
    for pid, ppid, utime in ((10, 1, 4), (11, 10, 6)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, ppid, utime, 0))
    (tmp_path / "12").mkdir()  # exited between listing and reading: no stat file
    (tmp_path / "self").mkdir()
    stats = peer_systems.read_procs(tmp_path)
    assert sorted(stats) == [10, 11]
    assert peer_systems.tree_ticks([10], stats) == 10


def test_cpu_per_1000_jobs_adds_the_producer_to_the_systems_processes() -> None:
    figures = peer_systems.RunFigures(jobs=2000, seconds=4.0, service_cpu_s=3.0, producer_cpu_s=1.0)
    assert figures.jobs_per_s == 500.0
    assert figures.cpu_s_per_1000 == 2.0


# --- the report ----------------------------------------------------------------------


def _run(rate: float, cpu: float = 1.0) -> object:
    extra = {"first_submit": 0.0, "last_submit": 1000 / rate - 0.02, "last_completion": 1000 / rate}
    return peer_systems.RunFigures(
        jobs=1000, seconds=1000 / rate, service_cpu_s=cpu, producer_cpu_s=0.0, extra=extra
    )


def _args() -> argparse.Namespace:
    return peers.parse_args(["--jobs", "1000", "--rounds", "3"])


def test_a_build_without_the_batch_path_reports_null_not_a_figure() -> None:
    outcomes = {
        "celery": peers.Outcome([_run(1000), _run(900), _run(1100)], []),
        "ferryman-batch": peers.Outcome([None, None, None], []),
        "ferryman-single": peers.Outcome([_run(1600), _run(1400), _run(1500)], []),
    }
    out = peers.report(_args(), outcomes, start_load=0.0)
    assert out["ferryman_batch_jobs_per_s"] is None
    assert out["ferryman_cpu_s_per_1000_batch"] is None
    assert out["ratios_to_celery"]["batch"] is None
    assert out["systems"]["ferryman-batch"]["reason"] == "not available in this build"
    assert out["celery_jobs_per_s"] == pytest.approx(1000)
    assert out["ratios_to_celery"]["single"] == pytest.approx(1.5)
    assert out["ferryman_sequential_jobs_per_s"] is None  # not run: null, never absent
    assert out["targets_met"]["single_to_celery"] is True
    assert out["targets_met"]["batch_to_celery"] is None


def test_a_missed_target_is_false() -> None:
    outcomes = {
        "celery": peers.Outcome([_run(1000)], []),
        "ferryman-sequential": peers.Outcome([_run(700)], []),
        "ferryman-single": peers.Outcome([_run(2000, cpu=1.6)], []),
    }
    met = peers.report(_args(), outcomes, start_load=0.0)["targets_met"]
    assert met["sequential_to_celery"] is False  # 0.7 < 0.75
    assert met["single_to_celery"] is True
    assert met["cpu_s_per_1000_single"] is False  # 1.6 > 1.5


def test_a_system_whose_every_run_failed_says_why() -> None:
    summary = peers.summarize(peers.Outcome([], ["round 1: redis refused"]))
    assert summary == {"available": False, "reason": "round 1: redis refused"}


def test_a_summary_is_over_the_runs_that_measured_something() -> None:
    summary = peers.summarize(peers.Outcome([_run(800, cpu=2.0), _run(1000), _run(600)], []))
    assert summary["cell"] == "800 (600-1,000)"
    assert summary["cpu_s_per_1000"] == pytest.approx(1.0)
    assert summary["last_submit_to_last_completion_ms"] == pytest.approx(20.0)


def test_the_warm_up_defaults_to_a_tenth_of_the_jobs_and_never_below_50() -> None:
    assert peers.parse_args(["--jobs", "10000"]).warmup == 1000
    assert peers.parse_args(["--jobs", "100"]).warmup == 50
    assert peers.parse_args(["--jobs", "100", "--warmup", "0"]).warmup == 0


def test_the_split_rows_are_held_to_the_same_targets_as_serve() -> None:
    outcomes = {
        "celery": peers.Outcome([_run(1000)], []),
        "ferryman-batch": peers.Outcome([_run(2500, cpu=0.9)], []),
        "ferryman-split-batch": peers.Outcome([_run(3100, cpu=1.1)], []),
        "ferryman-split-single": peers.Outcome([_run(1400, cpu=1.4)], []),
    }
    out = peers.report(_args(), outcomes, start_load=0.0)
    met = out["targets_met"]
    assert out["ratios_to_celery"]["split_batch"] == pytest.approx(3.1)
    assert met["batch_to_celery"] is False  # serve: 2.5 < 3
    assert met["split_batch_to_celery"] is True  # api + workers: 3.1 >= 3
    assert met["cpu_s_per_1000_split_batch"] is False  # 1.1 > 1.0
    assert met["split_single_to_celery"] is False  # 1.4 < 1.5
    assert met["cpu_s_per_1000_split_single"] is True
    assert met["split_sequential_to_celery"] is None  # not run


def test_split_workers_default_to_one_per_core_as_celerys_prefork_pool() -> None:
    assert peers.parse_args([]).split_workers == (os.cpu_count() or 1)
    assert peers.parse_args(["--split-workers", "3"]).split_workers == 3


def test_accepting_alone_is_a_ratio_to_read_not_a_target() -> None:
    outcomes = {
        "celery": peers.Outcome([_run(1000)], []),
        "ferryman-accept": peers.Outcome([_run(780)], []),
    }
    out = peers.report(_args(), outcomes, start_load=0.0)
    assert out["ferryman_accept_only_jobs_per_s"] == pytest.approx(780)
    assert out["ratios_to_celery"]["accept_only"] == pytest.approx(0.78)
    assert not any("accept" in name for name in out["targets_met"])


def test_accepting_alone_runs_the_api_and_no_worker(tmp_path: Path) -> None:
    services = peers._services("ferryman-accept", {}, 8000, tmp_path, workers=2)
    assert [s.name for s in services] == ["ferryman-api"]
    assert peers._MODES["ferryman-accept"] == "accept-only"
    split = peers._services("ferryman-split", {}, 8000, tmp_path, workers=2)
    assert [s.name for s in split] == ["ferryman-api", "ferryman-worker-1", "ferryman-worker-2"]


def test_the_accept_only_row_says_what_it_measures() -> None:
    outcomes = {"ferryman-accept": peers.Outcome([_run(900)], [])}
    summary = peers.report(_args(), outcomes, start_load=0.0)["systems"]["ferryman-accept"]
    assert "not end to end" in summary["measures"]
    assert "last_submit_to_last_completion_ms" not in summary


def test_an_accept_only_run_whose_jobs_are_not_all_stored_fails(tmp_path: Path) -> None:
    import sqlite3

    database = tmp_path / "ferryman.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE jobs (created_at REAL)")
        conn.executemany("INSERT INTO jobs VALUES (?)", [(10.0,), (11.0,), (5.0,)])
    peers._check_accepted(database, since=10.0, jobs=2)
    with pytest.raises(RuntimeError, match="1 jobs stored for 2 accepted"):
        peers._check_accepted(database, since=11.0, jobs=2)
