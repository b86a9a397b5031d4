"""/v1/admin/keys: admins list, create and revoke keys; a revoked or expired key is
refused exactly like an unknown one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ferryman.engines import open_engine
from ferryman.services.access import ApiKeys

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

UNKNOWN_KEY = "fm_0123456789ab_" + "y" * 43
KEY_FIELDS = {
    "key_id",
    "tenant_id",
    "admin",
    "status",
    "created_at",
    "expires_at",
    "revoked_at",
    "revoked_by",
}


def key_id(key: str) -> str:
    return key.split("_")[1]


async def refusal(client: httpx.AsyncClient) -> tuple[int, dict[str, Any], str | None]:
    response = await client.get("/v1/generations")
    return response.status_code, response.json(), response.headers.get("WWW-Authenticate")


@pytest.fixture
def admin_client(
    http_stack: HttpStack, http_keys: HttpKeys, http_open_client: Callable[..., httpx.AsyncClient]
) -> httpx.AsyncClient:
    return http_open_client(http_stack.app(), http_keys.admin)


async def test_admins_list_every_key_without_any_secret(
    admin_client: httpx.AsyncClient, http_keys: HttpKeys
) -> None:
    response = await admin_client.get("/v1/admin/keys")

    assert response.status_code == 200
    keys = response.json()["data"]
    # All made at the same (fake) moment: the order among them is by id.
    assert sorted((k["tenant_id"], k["admin"]) for k in keys) == [
        ("acme", False),
        ("globex", False),
        ("ops", True),
    ]
    assert all(set(k) == KEY_FIELDS for k in keys)
    assert {k["status"] for k in keys} == {"active"}
    for secret in (http_keys.acme, http_keys.globex, http_keys.admin):
        assert secret.split("_", 2)[2] not in response.text  # the secret may hold "_"
    only_acme = await admin_client.get("/v1/admin/keys", params={"tenant": "acme"})
    assert [k["key_id"] for k in only_acme.json()["data"]] == [key_id(http_keys.acme)]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/admin/keys", None),
        ("POST", "/v1/admin/keys", {"tenant": "acme", "admin": True}),
        ("POST", "/v1/admin/keys/0123456789ab/revoke", None),
    ],
)
async def test_tenant_keys_get_403_and_no_key_gets_401(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    app = http_stack.app()
    tenant = await http_open_client(app, http_keys.acme).request(method, path, json=body)
    anonymous = await http_open_client(app).request(method, path, json=body)

    http_problem(tenant, 403, "forbidden")
    http_problem(anonymous, 401, "unauthenticated")
    assert len(await http_stack.api_keys.list_keys()) == 3  # nothing was created


async def test_a_created_key_is_shown_once_and_works(
    http_stack: HttpStack,
    admin_client: httpx.AsyncClient,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    created = await admin_client.post("/v1/admin/keys", json={"tenant": "initech"})

    assert created.status_code == 201
    assert created.headers["Cache-Control"] == "no-store"
    body = created.json()
    assert set(body) == KEY_FIELDS | {"key"}
    assert (body["tenant_id"], body["admin"], body["expires_at"]) == ("initech", False, None)
    assert body["key_id"] == key_id(body["key"])
    works = await http_open_client(http_stack.app(), body["key"]).get("/v1/generations")
    assert works.status_code == 200
    listed = await admin_client.get("/v1/admin/keys")
    assert body["key"] not in listed.text


async def test_a_revoked_key_is_refused_exactly_like_an_unknown_one(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    admin_client: httpx.AsyncClient,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    assert (await acme.get("/v1/generations")).status_code == 200

    revoked = await admin_client.post(f"/v1/admin/keys/{key_id(http_keys.acme)}/revoke")

    assert revoked.status_code == 200
    body = revoked.json()
    assert body["status"] == "revoked"
    assert body["revoked_by"] == key_id(http_keys.admin)  # who
    assert body["revoked_at"] is not None  # when
    assert body["already_revoked"] is False
    unknown = await refusal(http_open_client(app, UNKNOWN_KEY))
    assert unknown[0] == 401
    assert await refusal(acme) == unknown
    # The tenant's other keys are untouched.
    assert (await http_open_client(app, http_keys.globex).get("/v1/generations")).status_code == 200


async def test_revoking_twice_is_harmless_and_keeps_the_first_record(
    admin_client: httpx.AsyncClient, http_keys: HttpKeys, http_stack: HttpStack
) -> None:
    path = f"/v1/admin/keys/{key_id(http_keys.acme)}/revoke"
    first = (await admin_client.post(path)).json()
    http_stack.clock.advance(30)
    second = await admin_client.post(path)

    assert second.status_code == 200
    assert second.json()["already_revoked"] is True
    assert second.json()["revoked_at"] == first["revoked_at"]


async def test_revoking_an_unknown_or_malformed_id(
    admin_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    http_problem(await admin_client.post("/v1/admin/keys/0123456789ab/revoke"), 404, "not_found")
    http_problem(await admin_client.post("/v1/admin/keys/not-an-id/revoke"), 422, "invalid_request")


async def test_the_last_admin_key_is_not_revoked_over_the_api(
    admin_client: httpx.AsyncClient, http_keys: HttpKeys, http_problem: ProblemCheck
) -> None:
    own = f"/v1/admin/keys/{key_id(http_keys.admin)}/revoke"
    http_problem(await admin_client.post(own), 409, "last_admin_key")
    assert (await admin_client.get("/v1/admin/keys")).status_code == 200

    spare = (
        await admin_client.post("/v1/admin/keys", json={"tenant": "ops", "admin": True})
    ).json()
    assert (await admin_client.post(own)).status_code == 200
    assert spare["admin"] is True


async def test_an_expired_key_is_refused_exactly_like_an_unknown_one(
    http_stack: HttpStack,
    admin_client: httpx.AsyncClient,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    created = await admin_client.post(
        "/v1/admin/keys", json={"tenant": "initech", "expires_in_seconds": 60}
    )
    assert created.status_code == 201
    app = http_stack.app()
    client = http_open_client(app, created.json()["key"])
    assert (await client.get("/v1/generations")).status_code == 200

    http_stack.clock.advance(61)

    assert await refusal(client) == await refusal(http_open_client(app, UNKNOWN_KEY))
    listed = (await admin_client.get("/v1/admin/keys", params={"tenant": "initech"})).json()
    assert listed["data"][0]["status"] == "expired"


async def test_an_expiry_may_be_an_rfc3339_time(
    http_stack: HttpStack, admin_client: httpx.AsyncClient
) -> None:
    created = await admin_client.post(
        "/v1/admin/keys", json={"tenant": "initech", "expires_at": "2099-01-31T19:00:00+01:00"}
    )
    assert created.status_code == 201
    assert created.json()["expires_at"] == "2099-01-31T18:00:00.000000Z"


@pytest.mark.parametrize(
    "body",
    [
        {"tenant": "initech", "expires_at": "2000-01-01T00:00:00Z"},  # in the past
        {"tenant": "initech", "expires_at": "2099-01-01T00:00:00"},  # no offset
        {"tenant": "initech", "expires_at": "next tuesday"},
        {"tenant": "initech", "expires_at": 4102444800},  # epoch seconds are not a time
        {"tenant": "initech", "expires_at": "2099-01-01"},  # nor is a date
        {"tenant": "initech", "expires_at": "9999-12-31T23:59:59-12:00"},  # past year 9999 UTC
        {"tenant": "initech", "expires_in_seconds": 1e12},
        {"tenant": "initech", "expires_in_seconds": 0},
        {"tenant": "initech", "expires_in_seconds": 60, "expires_at": "2099-01-01T00:00:00Z"},
        {"tenant": "no spaces", "admin": False},
        {"tenant": "initech", "admin": "yes"},
        {"tenant": "initech", "role": "admin"},
    ],
)
async def test_a_bad_create_request_is_422_and_creates_nothing(
    http_stack: HttpStack,
    admin_client: httpx.AsyncClient,
    http_problem: ProblemCheck,
    body: dict[str, Any],
) -> None:
    response = await admin_client.post("/v1/admin/keys", json=body)
    http_problem(response, 422, "invalid_request")
    assert len(await http_stack.api_keys.list_keys()) == 3


async def test_a_revocation_holds_at_once_for_another_app_over_the_same_file(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    admin_client: httpx.AsyncClient,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    # A second API process: its own connections to the same SQLite file.
    url = f"sqlite:///{http_stack.db.path}"
    async with open_engine(url, clock=http_stack.clock) as other_engine:
        other_keys = ApiKeys(other_engine.keys, http_stack.clock)
        other = http_open_client(http_stack.app(api_keys=other_keys), http_keys.acme)
        assert (await other.get("/v1/generations")).status_code == 200

        await admin_client.post(f"/v1/admin/keys/{key_id(http_keys.acme)}/revoke")

        assert (await other.get("/v1/generations")).status_code == 401
