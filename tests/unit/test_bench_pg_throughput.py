"""bench/pg_throughput.py's pure parts: reading /proc for the PostgreSQL server's CPU,
what counts as the benchmark's share of it, medians and the command line.

The benchmark itself needs a PostgreSQL server; these tests need none. bench/ is not a
package: its modules are loaded by path, under the names it imports them by.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from bench_modules import load

load("harness", "harness.py")
load("peer_systems", "peer_systems.py")
pg = load("bench_pg_throughput", "pg_throughput.py")

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _stat_line(pid: int, comm: str, *, ppid: int, utime: int, stime: int, cut: int = 0) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority ...
    rest = [ppid, 1, 1, 0, -1, 4194560, 10, 0, 0, 0, utime, stime, cut, 2 * cut, 20, 0]
    return f"{pid} ({comm}) S " + " ".join(str(v) for v in rest) + "\n"


# --- /proc -----------------------------------------------------------------------------


def test_a_stat_line_gives_parent_and_user_plus_system_ticks() -> None:
    comm, stat = pg.parse_stat(_stat_line(7, "postgres", ppid=1, utime=30, stime=12, cut=5))
    assert comm == "postgres"
    assert (stat.ppid, stat.ticks, stat.children_ticks) == (1, 42, 15)


def test_a_comm_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    comm, stat = pg.parse_stat(_stat_line(7, "a) b (c", ppid=3, utime=1, stime=2))
    assert comm == "a) b (c"
    assert (stat.ppid, stat.ticks) == (3, 3)


def test_only_processes_named_postgres_are_read(tmp_path: Path) -> None:
    for pid, comm in ((10, "postgres"), (11, "python3"), (12, "postgres")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat_line(pid, comm, ppid=1, utime=pid, stime=0))
    (tmp_path / "self").mkdir()  # not a pid
    (tmp_path / "13").mkdir()  # ended while we looked: no stat file
    found = pg.postgres_processes(str(tmp_path))
    assert sorted(found) == [10, 12]
    assert found[12].ticks == 12


def _fake_proc(tmp_path: Path, processes: dict[int, int]) -> str:
    """A /proc of postgres processes: pid -> parent pid."""
    for pid, ppid in processes.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            _stat_line(pid, "postgres", ppid=ppid, utime=1, stime=0)
        )
    return str(tmp_path)


def test_only_the_answering_servers_postmaster_and_its_children_count(tmp_path: Path) -> None:
    # Cluster A: postmaster 100, WAL writer 101, our backend 102, asking backend 103,
    # another database's autovacuum worker 104. Cluster B: postmaster 200, backend 201.
    proc = _fake_proc(tmp_path, {100: 1, 101: 100, 102: 100, 103: 100, 104: 100, 200: 1, 201: 200})
    # (pid, other work's, this database's client, the asking one), as ACTIVITY answers.
    rows = [
        (101, False, False, False),
        (102, False, True, False),
        (103, True, False, True),
        (104, True, False, False),
    ]
    server = pg.classified(rows, proc)
    assert server is not None
    assert sorted(server.processes) == [100, 101, 102, 103, 104]
    assert server.not_ours == {103, 104}
    assert server.clients == {102}


def test_a_server_whose_backends_this_machine_cannot_see_is_not_measured(
    tmp_path: Path,
) -> None:
    # A server in a container answers with pids of its own namespace.
    proc = _fake_proc(tmp_path, {100: 1, 101: 100})
    assert pg.classified([(7, True, False, True)], proc) is None
    assert pg.classified([], proc) is None


# --- the benchmark's share of the server -------------------------------------------------


def _server(
    processes: dict[int, tuple[int, int, int]],
    not_ours: set[int],
    clients: frozenset[int] = frozenset(),
) -> object:
    return pg.ServerCpu(
        {pid: pg.ProcStat(*figures) for pid, figures in processes.items()},
        frozenset(not_ours),
        frozenset(clients),
    )


def test_ours_counts_the_postmaster_background_and_our_backends_not_other_databases() -> None:
    # 1 postmaster, 2 WAL writer, 3 our backend, 4 another database's backend.
    before = _server({1: (0, 10, 0), 2: (1, 5, 0), 3: (1, 100, 0), 4: (1, 50, 0)}, {4})
    after = _server({1: (0, 11, 0), 2: (1, 9, 0), 3: (1, 180, 0), 4: (1, 90, 0)}, {4})
    assert after.ours_ticks(before) == 1 + 4 + 80


def test_the_client_backends_part_leaves_out_postmaster_and_background() -> None:
    before = _server(
        {1: (0, 10, 0), 2: (1, 5, 0), 3: (1, 100, 0), 4: (1, 50, 0)}, {4}, frozenset({3})
    )
    after = _server(
        {1: (0, 11, 0), 2: (1, 9, 0), 3: (1, 180, 0), 4: (1, 90, 0)}, {4}, frozenset({3})
    )
    assert after.client_ticks(before) == 80


def test_a_backend_that_started_during_the_phase_counts_whole() -> None:
    before = _server({1: (0, 10, 0)}, set())
    after = _server({1: (0, 10, 0), 5: (1, 7, 0)}, set())
    assert after.ours_ticks(before) == 7


def test_the_asking_backend_is_not_ours_at_either_end() -> None:
    before = _server({1: (0, 10, 0), 6: (1, 3, 0)}, {6})
    after = _server({1: (0, 10, 0), 6: (1, 9, 0)}, set())
    assert after.ours_ticks(before) == 0


def test_all_includes_other_databases_and_ended_backends_through_the_postmaster() -> None:
    before = _server({1: (0, 10, 0), 3: (1, 100, 0), 4: (1, 50, 0)}, {4})
    # Backend 3 ended: its 120 ticks are now the postmaster's waited-for children's.
    after = _server({1: (0, 12, 120), 4: (1, 60, 0)}, {4})
    assert after.all_ticks(before) == (12 + 120 + 60) - (10 + 100 + 50)


def test_per_job_figures_are_ms_and_null_when_the_server_is_elsewhere() -> None:
    before = _server({1: (0, 0, 0)}, set())
    after = _server({1: (0, 100, 0)}, set())
    figures = pg.server_ms_per_job(before, after, 1000)
    assert figures["postgres"] == pytest.approx(100 * TICK_MS / 1000)
    assert figures["postgres_all"] == pytest.approx(100 * TICK_MS / 1000)
    assert set(pg.server_ms_per_job(None, after, 1000).values()) == {None}


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("postgresql://postgres@127.0.0.1:5432/postgres", True),
        ("postgresql://postgres@localhost/postgres", True),
        ("postgresql:///postgres", True),  # the Unix socket
        ("postgresql://postgres@db.example.com:5432/postgres", False),
    ],
)
def test_only_a_server_on_this_machine_is_measured(url: str, local: bool) -> None:
    assert pg.is_local(url) is local


def test_usage_per_job_splits_machine_process_workers_and_server() -> None:
    before = pg.Usage(10.0, 1.0, [2.0, 3.0], _server({1: (0, 0, 0)}, set()))
    after = pg.Usage(12.0, 1.5, [2.5, 3.25], _server({1: (0, 0, 0)}, set()))
    figures = after.per_job(before, 1000, "drain")
    assert figures["drain_cpu_ms_per_job"] == pytest.approx(2.0)
    assert figures["drain_process_cpu_ms_per_job"] == pytest.approx(0.5)
    assert figures["drain_worker_process_cpu_ms_per_job"] == pytest.approx([0.5, 0.25])
    assert figures["drain_worker_processes_cpu_ms_per_job"] == pytest.approx(0.75)
    assert figures["drain_postgres_cpu_ms_per_job"] == 0.0


def test_without_worker_processes_their_figures_are_null() -> None:
    before = pg.Usage(0.0, 0.0, [], None)
    figures = pg.Usage(1.0, 1.0, [], None).per_job(before, 10, "e2e")
    assert figures["e2e_worker_processes_cpu_ms_per_job"] is None
    assert figures["e2e_worker_process_cpu_ms_per_job"] is None
    assert figures["e2e_postgres_cpu_ms_per_job"] is None


# --- medians and the command line -------------------------------------------------------


def test_a_figure_unknown_in_any_round_has_no_median() -> None:
    assert pg.median_of([1.0, None, 3.0]) is None
    assert pg.median_of([3.0, 1.0, 2.0]) == 2.0
    assert pg.median_of([[1.0, 2.0], [3.0, 4.0]]) == [3.0, 4.0]  # the last round's


def test_worker_processes_get_the_in_process_workers_settings() -> None:
    args = pg.parse_args(["--database", "postgresql://x@127.0.0.1/y", "--worker-processes", "2"])
    env = pg.worker_env("postgresql://x@127.0.0.1/scratch", args)
    assert env["FERRYMAN_DATABASE_URL"] == "postgresql://x@127.0.0.1/scratch"
    assert env["FERRYMAN_RESULTS_URL"] == "db"
    assert env["FERRYMAN_WORKER_CONCURRENCY"] == str(args.concurrency)
    assert env["FERRYMAN_POSTGRES_POOL_MAX_SIZE"] == str(args.pool)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--worker-processes", "-1"], "--worker-processes must be 0 or more"),
        # The group commit is set on this process's engine only.
        (
            ["--worker-processes", "1", "--group-max-batch", "1"],
            "apply to the in-process worker only",
        ),
    ],
)
def test_bad_worker_process_options_are_refused(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        pg.parse_args(["--database", "postgresql://x@127.0.0.1/y", *extra])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_this_process_runs_on_ferrymans_loop_unless_asked_for_asyncios() -> None:
    from ferryman.cli.serving import event_loop_factory

    url = ["--database", "postgresql://x@127.0.0.1/y"]
    assert pg.loop_factory(pg.parse_args(url)) is event_loop_factory()
    assert pg.loop_factory(pg.parse_args([*url, "--loop", "asyncio"])) is asyncio.new_event_loop
