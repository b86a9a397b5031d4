"""ResultWriter: a paid-for output is written until it sticks or its attempt is over,
and the store's health is known (for workers and /readyz) from the first failure on."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ferryman.core.errors import ResultsUnavailableError, StoreUnavailableError
from ferryman.services.results import ResultWriter


class FlakyStore:
    """A ResultStore whose puts and probes fail while ``broken`` says so."""

    def __init__(self, *, broken: bool = False, error: Exception | None = None) -> None:
        self.broken = broken
        self.error = error or ResultsUnavailableError(
            "results: cannot write a segment: Read-only file system"
        )
        self.puts = 0
        self.probes = 0
        self.heal_after_puts: int | None = None
        # Called after each probe with the number of probes so far.
        self.on_probe = lambda probes: None

    async def put(self, key: str, data: bytes) -> str:
        self.puts += 1
        if self.heal_after_puts is not None and self.puts > self.heal_after_puts:
            self.broken = False
        if self.broken:
            raise self.error
        return f"ref:{key}"

    async def get(self, ref: str, *, key: str) -> bytes:
        raise NotImplementedError

    async def probe(self) -> None:
        self.probes += 1
        broken = self.broken
        self.on_probe(self.probes)
        if broken:
            raise ResultsUnavailableError("results: no space left")

    async def reclaim(self, *, any_job_exists) -> int:
        return 0


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def writer_over(store: FlakyStore, sleep: FakeSleep, **options) -> ResultWriter:
    options.setdefault("initial_backoff_seconds", 0.1)
    options.setdefault("max_backoff_seconds", 1.0)
    return ResultWriter(store, sleep=sleep, **options)


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), ValueError("a bug")])
async def test_an_error_that_is_no_outage_is_never_retried(error: Exception) -> None:
    # The engines say "away" with BackendUnavailableError; anything else is a bug of the
    # store's, which no retry mends, and the health stays as it was.
    store = FlakyStore(broken=True, error=error)
    sleep = FakeSleep()
    writer = writer_over(store, sleep)

    with pytest.raises(type(error)):
        await writer.put("k", b"x", keep_trying=lambda: True)
    assert (store.puts, sleep.delays, writer.healthy) == (1, [], True)


async def test_a_healthy_write_goes_straight_through() -> None:
    sleep = FakeSleep()
    writer = writer_over(FlakyStore(), sleep)

    assert await writer.put("k", b"x", keep_trying=lambda: True) == "ref:k"
    assert (writer.healthy, writer.last_error, sleep.delays) == (True, None, [])


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailableError("sqlite: database is locked"),
        ResultsUnavailableError("results: cannot write a segment"),
    ],
)
async def test_a_failing_write_is_retried_with_capped_backoff_until_it_sticks(error) -> None:
    store = FlakyStore(broken=True, error=error)
    store.heal_after_puts = 6
    sleep = FakeSleep()
    writer = writer_over(store, sleep)

    ref = await writer.put("k", b"x", keep_trying=lambda: True)

    assert ref == "ref:k"
    assert store.puts == 7
    assert sleep.delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert (writer.healthy, writer.last_error) == (True, None)


async def test_it_gives_up_as_unavailable_once_the_attempt_is_no_longer_worth_finishing() -> None:
    store = FlakyStore(broken=True)
    sleep = FakeSleep()
    writer = writer_over(store, sleep)
    answers = iter([True, True, False])

    with pytest.raises(ResultsUnavailableError, match="Read-only"):
        await writer.put("k", b"x", keep_trying=lambda: next(answers))

    assert store.puts == 3
    assert writer.healthy is False
    assert writer.last_error == (
        "ResultsUnavailableError: results: cannot write a segment: Read-only file system"
    )


async def test_keep_trying_may_be_a_coroutine() -> None:
    store = FlakyStore(broken=True)
    writer = writer_over(store, FakeSleep())

    async def lease_held() -> bool:
        return store.puts < 2

    with pytest.raises(ResultsUnavailableError):
        await writer.put("k", b"x", keep_trying=lease_held)
    assert store.puts == 2


async def test_a_bug_is_not_retried() -> None:
    store = FlakyStore(broken=True, error=ValueError("a result key cannot be empty"))
    writer = writer_over(store, FakeSleep())

    with pytest.raises(ValueError, match="key"):
        await writer.put("", b"x", keep_trying=lambda: True)
    assert store.puts == 1


async def test_wait_until_healthy_returns_at_once_while_healthy() -> None:
    store = FlakyStore()
    writer = writer_over(store, FakeSleep())

    assert await writer.wait_until_healthy(asyncio.Event()) is True
    assert store.probes == 0


async def test_wait_until_healthy_probes_every_interval_until_the_store_recovers() -> None:
    store = FlakyStore(broken=True)
    sleep = FakeSleep()
    writer = writer_over(store, sleep, probe_interval_seconds=3.0)
    with pytest.raises(ResultsUnavailableError):
        await writer.put("k", b"x", keep_trying=lambda: False)

    def heal_after_four(probes: int) -> None:
        if probes == 4:
            store.broken = False  # from the next probe on

    store.on_probe = heal_after_four
    assert await writer.wait_until_healthy(asyncio.Event()) is True

    assert store.probes == 5
    assert sleep.delays == [3.0] * 4
    assert (writer.healthy, writer.last_error) == (True, None)


async def test_wait_until_healthy_stops_when_asked() -> None:
    store = FlakyStore(broken=True)
    writer = writer_over(store, FakeSleep())
    await writer.probe()
    stop = asyncio.Event()

    store.on_probe = lambda probes: stop.set() if probes == 3 else None

    assert await writer.wait_until_healthy(stop) is False
    assert store.probes == 3
    assert writer.healthy is False


async def test_an_unhealthy_spell_is_logged_once_when_it_starts_and_once_when_it_ends() -> None:
    store = FlakyStore(broken=True)
    writer = writer_over(store, FakeSleep())
    attempts = iter([True, True, True, False])

    with capture_logs() as logs:
        with pytest.raises(ResultsUnavailableError):
            await writer.put(
                "t1/gen_1.att_1.json", b'{"secret": 1}', keep_trying=lambda: next(attempts)
            )
        await writer.probe()
        store.broken = False
        await writer.probe()
        await writer.put("t1/gen_2.att_2.json", b"{}", keep_trying=lambda: True)

    events = [(entry["event"], entry["log_level"]) for entry in logs]
    assert events == [("results.unavailable", "warning"), ("results.recovered", "info")]
    assert "secret" not in repr(logs)
