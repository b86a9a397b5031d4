"""The observer chain (services/observers.py): every hook reaches every observer that
watches it, in order, and one that raises never stops the others."""

from __future__ import annotations

import inspect

from ferryman.core.job import JobStatus
from ferryman.services.ledger import JobLedger
from ferryman.services.observers import HOOKS, JobObserver, Observers


def test_the_chain_passes_on_every_hook_an_observer_has() -> None:
    declared = {
        name
        for name, member in inspect.getmembers(JobObserver, inspect.isfunction)
        if not name.startswith("_")
    }
    assert set(HOOKS) == declared
    # The chain is an observer too (chains nest): it passes on every hook but
    # ``completed``, which it finds itself from ``changed``, so a nested chain's
    # observers hear each completion once.
    passed_on = {h for h in HOOKS if getattr(Observers, h) is not getattr(JobObserver, h)}
    assert passed_on == set(HOOKS) - {"completed"}


def test_each_point_reaches_each_watching_observer_in_order() -> None:
    heard: list[str] = []

    class First(JobObserver):
        def reached(self, point: str) -> None:
            heard.append(f"first {point}")

    class Second(JobObserver):
        def reached(self, point: str) -> None:
            heard.append(f"second {point}")

    class Deaf(JobObserver):
        pass

    chain = Observers([First(), Deaf(), Second()])
    chain.reached("after_claim")
    chain.with_observer(First()).reached("before_ack")

    assert heard == [
        "first after_claim",
        "second after_claim",
        "first before_ack",
        "second before_ack",
        "first before_ack",
    ]


async def test_a_nested_chain_hears_each_completion_once(make_world) -> None:
    seen: list[JobStatus] = []

    class Completions(JobObserver):
        def completed(self, change) -> None:
            seen.append(change.after.status)

    world = make_world()
    job = await world.submit()
    ledger = JobLedger(world.store.store, observers=Observers([Observers([Completions()])]))

    await ledger.request_cancel(job.job_id, tenant_id="t1", now=world.clock.now())

    assert seen == [JobStatus.CANCELLED]


def test_an_observer_that_raises_is_logged_and_the_next_still_hears(capsys) -> None:
    heard: list[str] = []

    class Broken(JobObserver):
        def reached(self, point: str) -> None:
            raise RuntimeError(f"customer text {point}")

    class Listening(JobObserver):
        def reached(self, point: str) -> None:
            heard.append(point)

    Observers([Broken(), Listening()]).reached("after_invoke")

    assert heard == ["after_invoke"]
    logged = capsys.readouterr().out
    assert "observer.failed" in logged
    assert "Broken" in logged
    assert "customer text" not in logged  # an exception's message may quote input
