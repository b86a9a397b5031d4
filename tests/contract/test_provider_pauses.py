"""ControlStore's provider pauses on every engine: an automatic pause says why and when,
its probes are taken by one process at a time, it is lifted only while it is the same
automatic pause, and an operator's pause is never lifted automatically."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.ports.control import AuditAction, ProviderPause

pytestmark = pytest.mark.timeout(30)

WORKER = "worker:w1"


def _automatic(engine, provider: str = "openai", *, probe_in: float | None = 30.0):
    now = engine.now()
    return ProviderPause(
        provider=provider,
        since=now,
        actor=WORKER,
        reason="its probe was refused (unauthorized)",
        automatic=True,
        next_probe_at=None if probe_in is None else now + probe_in,
        probe_interval_seconds=probe_in,
    )


async def test_an_automatic_pause_says_who_why_since_when_and_its_next_probe(engine):
    pause = _automatic(engine)

    assert await engine.control.pause_provider_automatically(pause) is True

    assert await engine.control.paused_providers() == frozenset({"openai"})
    assert await engine.control.provider_pauses() == {"openai": pause}
    assert pause.resumes_by_itself
    (record,) = await engine.control.audit_log(limit=5)
    assert (record.action, record.target, record.actor, record.reason) == (
        AuditAction.PAUSE,
        "provider:openai",
        WORKER,
        pause.reason,
    )


async def test_a_provider_paused_already_keeps_its_pause(engine):
    await engine.control.set_provider_paused(
        "openai", True, actor="ops", now=engine.now(), reason="key rotation"
    )
    engine.advance(5)

    assert await engine.control.pause_provider_automatically(_automatic(engine)) is False

    pause = (await engine.control.provider_pauses())["openai"]
    assert (pause.automatic, pause.actor, pause.reason) == (False, "ops", "key rotation")
    assert pause.since == engine.now() - 5
    assert not pause.resumes_by_itself
    assert len(await engine.control.audit_log(limit=5)) == 1  # nothing more recorded


async def test_an_operators_pause_over_an_automatic_one_makes_it_the_operators(engine):
    await engine.control.pause_provider_automatically(_automatic(engine))
    await engine.control.set_provider_paused("openai", True, actor="ops", now=engine.now())
    engine.advance(3600)

    pause = (await engine.control.provider_pauses())["openai"]
    assert (pause.automatic, pause.next_probe_at) == (False, None)
    assert (
        await engine.control.take_provider_probe(
            "openai", now=engine.now(), next_probe_at=engine.now() + 60, probe_interval_seconds=60
        )
        is None
    )
    assert not await engine.control.resume_provider_automatically(
        "openai", since=pause.since, actor=WORKER, now=engine.now(), reason="probe passed"
    )
    assert await engine.control.paused_providers() == frozenset({"openai"})


async def test_a_probe_is_taken_once_when_due_and_moves_the_next_one_on(engine):
    pause = _automatic(engine)
    await engine.control.pause_provider_automatically(pause)

    def take():
        now = engine.now()
        return engine.control.take_provider_probe(
            "openai", now=now, next_probe_at=now + 60, probe_interval_seconds=60
        )

    assert await take() is None  # not due yet
    engine.advance(30)
    first, second = await asyncio.gather(take(), take())  # two processes at once

    taken = [t for t in (first, second) if t is not None]
    assert len(taken) == 1
    assert taken[0].next_probe_at == engine.now() + 60
    assert taken[0].probe_interval_seconds == 60
    assert (taken[0].since, taken[0].reason, taken[0].automatic) == (
        pause.since,
        pause.reason,
        True,
    )
    assert await take() is None
    assert (await engine.control.provider_pauses())["openai"] == taken[0]


async def test_a_pause_that_is_never_probed_is_never_taken(engine):
    await engine.control.pause_provider_automatically(_automatic(engine, probe_in=None))
    engine.advance(86_400)
    now = engine.now()

    assert (
        await engine.control.take_provider_probe(
            "openai", now=now, next_probe_at=now + 60, probe_interval_seconds=60
        )
        is None
    )
    pause = (await engine.control.provider_pauses())["openai"]
    assert pause.automatic and not pause.resumes_by_itself


async def test_only_the_same_automatic_pause_is_lifted_automatically(engine):
    pause = _automatic(engine)
    await engine.control.pause_provider_automatically(pause)
    engine.advance(30)

    assert not await engine.control.resume_provider_automatically(
        "openai", since=pause.since - 1, actor=WORKER, now=engine.now(), reason="probe passed"
    )
    assert not await engine.control.resume_provider_automatically(
        "anthropic", since=pause.since, actor=WORKER, now=engine.now(), reason="probe passed"
    )
    assert await engine.control.resume_provider_automatically(
        "openai", since=pause.since, actor=WORKER, now=engine.now(), reason="probe passed"
    )

    assert await engine.control.provider_pauses() == {}
    assert await engine.control.paused_providers() == frozenset()
    resumed = (await engine.control.audit_log(limit=1))[0]
    assert (resumed.action, resumed.actor, resumed.reason) == (
        AuditAction.RESUME,
        WORKER,
        "probe passed",
    )
    assert not await engine.control.resume_provider_automatically(
        "openai", since=pause.since, actor=WORKER, now=engine.now(), reason="probe passed"
    )
    # Paused again later, it is a new pause: the earlier one's resume does not lift it.
    engine.advance(10)
    later = _automatic(engine)
    assert await engine.control.pause_provider_automatically(later)
    assert not await engine.control.resume_provider_automatically(
        "openai", since=pause.since, actor=WORKER, now=engine.now(), reason="probe passed"
    )


async def test_an_operator_resumes_an_automatic_pause(engine):
    await engine.control.pause_provider_automatically(_automatic(engine))
    await engine.control.set_provider_paused("openai", False, actor="ops", now=engine.now())
    assert await engine.control.provider_pauses() == {}


async def test_switches_are_not_provider_pauses(engine):
    from ferryman.ports.control import Switch

    await engine.control.set_paused(Switch.WORKERS, True, actor="ops", now=engine.now())
    await engine.control.set_provider_paused("sim", True, actor="ops", now=engine.now(), reason="r")
    pauses = await engine.control.provider_pauses()
    assert list(pauses) == ["sim"]
    assert (pauses["sim"].actor, pauses["sim"].reason, pauses["sim"].since) == (
        "ops",
        "r",
        engine.now(),
    )
    assert await engine.control.paused() == frozenset({Switch.WORKERS})
