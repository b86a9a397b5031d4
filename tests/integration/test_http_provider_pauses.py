"""GET /v1/generations/{id} says why a waiting job waits: the provider behind its model is
paused (which one, since when, by ferryman or by an operator), computed when read and
never written to the job; an operator's reason stays with operators."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.ports.control import ProviderPause
from ferryman.services.catalog import ModelCatalog
from ferryman.services.jobs import JobQueries
from ferryman.services.pauses import WaitReasons

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack

SECRET_REASON = "rotating the key that leaked on the wiki"


def _app(stack: HttpStack):
    waits = WaitReasons(
        catalog=ModelCatalog.serving_own_names([stack.provider]), control=stack.control
    )
    jobs = JobQueries(
        store=stack.store, ledger=stack.store, results=stack.results, clock=stack.clock, waits=waits
    )
    return stack.app(jobs=jobs)


async def test_a_queued_job_says_which_paused_provider_it_waits_for(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_generate_body: Callable[..., dict],
) -> None:
    app = _app(http_stack)
    acme, admin = http_open_client(app, http_keys.acme), http_open_client(app, http_keys.admin)
    job_id = (await acme.post("/v1/generations", json=http_generate_body())).json()["job_id"]
    before = (await acme.get(f"/v1/generations/{job_id}")).json()
    assert before["waiting"] is None

    paused = await admin.post(
        "/v1/admin/pause", json={"what": "provider", "provider": "sim", "reason": SECRET_REASON}
    )
    assert paused.status_code == 200
    stored = await http_stack.store.get(job_id)
    waiting = await acme.get(f"/v1/generations/{job_id}")

    assert waiting.status_code == 200
    body = waiting.json()
    assert body["status"] == "QUEUED"
    assert body["waiting"] == {
        "reason": "provider_paused",
        "provider": "sim",
        "since": body["waiting"]["since"],
        "automatic": False,
        "next_check_at": None,
    }
    assert body["waiting"]["since"].endswith("Z")
    assert SECRET_REASON not in waiting.text
    # A list says it as GET does: one look at the pauses for the page.
    listed = (await acme.get("/v1/generations", params={"job_id": job_id})).json()["data"]
    assert listed == [body]
    assert (await http_stack.store.get(job_id)).revision == stored.revision  # read, not written

    await admin.post("/v1/admin/resume", json={"what": "provider", "provider": "sim"})
    assert (await acme.get(f"/v1/generations/{job_id}")).json()["waiting"] is None


async def test_an_automatic_pause_says_when_the_provider_is_checked_next(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_generate_body: Callable[..., dict],
) -> None:
    acme = http_open_client(_app(http_stack), http_keys.acme)
    job_id = (await acme.post("/v1/generations", json=http_generate_body())).json()["job_id"]
    now = http_stack.clock.now()
    await http_stack.control.pause_provider_automatically(
        ProviderPause(
            provider="sim",
            since=now,
            actor="worker:w1",
            reason="refused",
            automatic=True,
            next_probe_at=now + 30,
            probe_interval_seconds=30,
        )
    )

    waiting = (await acme.get(f"/v1/generations/{job_id}")).json()["waiting"]

    assert waiting["automatic"] is True
    assert waiting["next_check_at"] is not None and waiting["next_check_at"] > waiting["since"]


async def test_a_finished_job_waits_for_nothing(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_generate_body: Callable[..., dict],
) -> None:
    acme = http_open_client(_app(http_stack), http_keys.acme)
    job_id = (await acme.post("/v1/generations", json=http_generate_body())).json()["job_id"]
    await http_stack.run_worker()
    await http_stack.control.set_provider_paused("sim", True, actor="ops", now=0.0)

    body = (await acme.get(f"/v1/generations/{job_id}")).json()

    assert (body["status"], body["waiting"]) == ("SUCCEEDED", None)
    listed = (await acme.get("/v1/generations")).json()["data"]
    assert [item["job_id"] for item in listed] == [job_id]


async def test_an_admin_resumes_an_automatic_pause(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    admin = http_open_client(_app(http_stack), http_keys.admin)
    now = http_stack.clock.now()
    await http_stack.control.pause_provider_automatically(
        ProviderPause(provider="sim", since=now, actor="worker:w1", automatic=True)
    )

    resumed = await admin.post(
        "/v1/admin/resume", json={"what": "provider", "provider": "sim", "reason": "key fixed"}
    )

    assert resumed.json() == {"paused": []}
    assert await http_stack.control.provider_pauses() == {}
    audit = (await admin.get("/v1/admin/audit")).json()["data"]
    assert [(r["action"], r["actor"]) for r in audit[:2]] == [
        ("resume", http_keys.admin.split("_")[1]),  # the admin key's id
        ("pause", "worker:w1"),
    ]
