"""The AWS engine's small stores on the emulator's DynamoDB: API keys, switches and the
audit log, shared limits, and results kept in the table.

The contract suites (tests/contract/test_api_keys.py, test_small_stores.py,
test_provider_pauses.py, test_result_store.py) run on the aws engine too; here is what
they cannot show: two processes (two client sets) at once on one table, optimistic
writes that collide, an item size limit, a listing to reclaim from, a missing table,
and the shared limits' items (their contract: tests/contract/test_shared_limits.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from contextlib import AsyncExitStack
from types import SimpleNamespace

import pytest

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.control import DynamoControlStore
from ferryman.adapters.aws.keys import DynamoApiKeyStore
from ferryman.adapters.aws.limits import PROVIDER_SK, DynamoSharedLimits, provider_pk
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.results_db import (
    MAX_RESULT_BYTES,
    RESULT_SK,
    DynamoResultStore,
    result_pk,
)
from ferryman.core.errors import (
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
    StoreUnavailableError,
)
from ferryman.core.results import job_id_of, result_key
from ferryman.ports.control import AuditAction, AuditRecord, ProviderPause, Switch
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome
from provider_reports import provider_report

pytestmark = pytest.mark.timeout(60)

WORKER = "worker:w1"
KEY_1 = result_key("t1", "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_01HZZZZZZZZZZZZZZZZZZZZZZ1")
KEY_2 = result_key("t1", "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_01HZZZZZZZZZZZZZZZZZZZZZZ2")
OTHER_TENANT = result_key("t2", "gen_01HYYYYYYYYYYYYYYYYYYYYYY1", "att_01HYYYYYYYYYYYYYYYYYYYYYY1")


class _Clock:
    """The contract's engine.now()/advance(): a time the test moves."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.value = now

    def now(self) -> float:
        return self.value

    def advance(self, seconds: float) -> None:
        self.value += seconds


@pytest.fixture
async def aws(aws_url: str):
    """Two "processes" on one table: each its own clients (connection pool) and stores."""
    table = parse_aws_url(aws_url).table
    async with AsyncExitStack() as stack:
        processes = []
        for _ in range(2):
            clients = await stack.enter_async_context(open_clients())
            processes.append(
                SimpleNamespace(
                    clients=clients,
                    table=table,
                    keys=DynamoApiKeyStore(clients, table),
                    control=DynamoControlStore(clients, table),
                    limits=DynamoSharedLimits(clients, table),
                    results=DynamoResultStore(clients, table),
                )
            )
        one, two = processes
        yield SimpleNamespace(**vars(one), two=two, clock=_Clock())


def key(key_id: str, *, tenant: str = "t1", admin: bool = False, **fields: float) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=key_id,
        tenant_id=tenant,
        secret_hash="ab" * 32,
        admin=admin,
        created_at=fields.pop("created_at", 10.0),
        **fields,
    )


# --- API keys ---------------------------------------------------------------------------


async def test_one_key_id_added_by_two_processes_at_once_is_added_once(aws):
    outcomes = await asyncio.gather(
        aws.keys.add_key(key("aaaaaaaaaaaa", tenant="t1")),
        aws.two.keys.add_key(key("aaaaaaaaaaaa", tenant="t2", created_at=11.0)),
        return_exceptions=True,
    )

    assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "StateConflictError"]
    winner = "t1" if outcomes[0] is None else "t2"
    assert (await aws.keys.find_key("aaaaaaaaaaaa")).tenant_id == winner
    assert [r.tenant_id for r in await aws.keys.list_keys()] == [winner]


async def test_revoking_the_last_two_admin_keys_at_once_keeps_one_every_time(aws):
    """Two processes, each revoking one of the last two admin keys: exactly one is
    refused, and one admin key is left. Five rounds, each from no usable admin key."""
    for round_no in range(5):
        ids = (f"a{round_no:011d}", f"b{round_no:011d}")
        for key_id in ids:
            await aws.keys.add_key(key(key_id, admin=True, created_at=float(round_no)))

        outcomes = await asyncio.gather(
            aws.keys.revoke_key(ids[0], actor="ops-1", now=100.0, keep_an_admin=True),
            aws.two.keys.revoke_key(ids[1], actor="ops-2", now=100.0, keep_an_admin=True),
        )

        assert sorted(r.outcome for r in outcomes) == [
            RevokeOutcome.LAST_ADMIN,
            RevokeOutcome.REVOKED,
        ]
        left = [r for r in await aws.keys.list_keys() if r.revoked_at is None]
        assert len(left) == 1
        await aws.keys.revoke_key(left[0].key_id, actor="ops", now=100.0, keep_an_admin=False)


async def test_a_key_store_on_a_missing_table_is_unavailable_naming_migrate(aws):
    keys = DynamoApiKeyStore(aws.clients, "no-such-table")
    with pytest.raises(StoreUnavailableError, match="ferryman migrate"):
        await keys.find_key("aaaaaaaaaaaa")
    with pytest.raises(StoreUnavailableError):
        await keys.add_key(key("aaaaaaaaaaaa"))


# --- switches and the audit log ---------------------------------------------------------


async def test_each_flip_is_audited_newest_first_with_increasing_ids(aws):
    control = aws.control
    await control.set_paused(Switch.INTAKE, True, actor="alice", now=1.0, reason="deploy")
    await control.set_paused(Switch.INTAKE, False, actor="bob", now=2.0)
    await control.record_audit(
        AuditRecord(at=3.0, actor="carol", action=AuditAction.REPLAY, target="gen_1")
    )

    log = await control.audit_log(limit=10)

    assert [(r.actor, r.action, r.target, r.reason, r.at) for r in log] == [
        ("carol", AuditAction.REPLAY, "gen_1", None, 3.0),
        ("bob", AuditAction.RESUME, "intake", None, 2.0),
        ("alice", AuditAction.PAUSE, "intake", "deploy", 1.0),
    ]
    assert [r.record_id for r in log] == [3, 2, 1]


async def test_the_audit_log_pages_back_from_a_record_id(aws):
    for i in range(7):
        await aws.control.record_audit(
            AuditRecord(at=float(i), actor="ops", action=AuditAction.REPLAY, target=f"gen_{i}")
        )

    first = await aws.control.audit_log(limit=3)
    second = await aws.control.audit_log(limit=3, before=first[-1].record_id)
    third = await aws.control.audit_log(limit=3, before=second[-1].record_id)

    assert [r.record_id for r in first + second + third] == [7, 6, 5, 4, 3, 2, 1]
    assert await aws.control.audit_log(limit=3, before=1) == []
    assert await aws.control.audit_log(limit=3, before=0) == []
    assert await aws.control.audit_log(limit=3, before=-5) == []
    assert await aws.control.audit_log(limit=0) == []
    assert await aws.control.audit_log(limit=-1) == []
    assert [r.record_id for r in await aws.control.audit_log(limit=2, before=2**63 - 1)] == [7, 6]


async def test_concurrent_audit_records_from_two_processes_take_every_id_once(aws):
    def record(i: int) -> AuditRecord:
        return AuditRecord(at=float(i), actor="ops", action=AuditAction.REPLAY, target=f"gen_{i}")

    await asyncio.gather(
        *((aws.control if i % 2 else aws.two.control).record_audit(record(i)) for i in range(10))
    )

    log = await aws.control.audit_log(limit=100)
    assert [r.record_id for r in log] == list(range(10, 0, -1))
    assert sorted(r.target for r in log) == sorted(f"gen_{i}" for i in range(10))


async def test_a_control_store_on_a_missing_table_is_unavailable(aws):
    control = DynamoControlStore(aws.clients, "no-such-table")
    with pytest.raises(StoreUnavailableError):
        await control.paused()
    with pytest.raises(StoreUnavailableError):
        await control.set_paused(Switch.INTAKE, True, actor="ops", now=1.0)


# --- provider pauses (tests/contract/test_provider_pauses.py) ---------------------------


def _automatic(aws, provider: str = "openai", *, probe_in: float | None = 30.0):
    now = aws.clock.now()
    return ProviderPause(
        provider=provider,
        since=now,
        actor=WORKER,
        reason="its probe was refused (unauthorized)",
        automatic=True,
        next_probe_at=None if probe_in is None else now + probe_in,
        probe_interval_seconds=probe_in,
    )


async def test_two_processes_pausing_one_provider_at_once_pause_it_once(aws):
    pause = _automatic(aws)
    other = dataclasses.replace(pause, actor="worker:w2")

    won = await asyncio.gather(
        aws.control.pause_provider_automatically(pause),
        aws.two.control.pause_provider_automatically(other),
    )

    assert sorted(won) == [False, True]
    assert len(await aws.control.audit_log(limit=5)) == 1


async def test_a_probe_of_a_provider_never_paused_is_none(aws):
    now = aws.clock.now()
    assert (
        await aws.control.take_provider_probe(
            "nobody", now=now, next_probe_at=now + 60, probe_interval_seconds=60
        )
        is None
    )
    assert await aws.control.provider_pauses() == {}  # the probe made no item


# --- shared limits (their contract: tests/contract/test_shared_limits.py) ---------------


async def _provider_item(aws, provider: str, model: str) -> dict:
    response = await aws.clients.dynamodb.get_item(
        TableName=aws.table,
        Key={"pk": {"S": provider_pk(provider, model)}, "sk": {"S": PROVIDER_SK}},
        ConsistentRead=True,
    )
    return response["Item"]


async def test_a_report_that_moves_nothing_writes_nothing_and_one_that_does_writes(aws):
    first = await aws.limits.report_provider(provider_report("a", 100.0))
    written = await _provider_item(aws, "p#1", "m")

    steady = await aws.limits.report_provider(provider_report("a", 101.0))
    untouched = await _provider_item(aws, "p#1", "m")
    grown = await aws.limits.report_provider(provider_report("a", 102.0, grown_window=1.0))

    assert steady == first
    assert untouched == written  # the steady report wrote nothing
    after = await _provider_item(aws, "p#1", "m")
    assert grown.window == first.window + 1.0
    assert int(after["version"]["N"]) == int(written["version"]["N"]) + 1
    assert after["updated_at"] == {"N": "102.0"}


async def test_a_member_gone_for_good_has_its_item_deleted(aws):
    await aws.limits.report_provider(provider_report("a", 100.0))
    await aws.limits.report_provider(provider_report("b", 100.0))
    # Long after (over 100 liveness horizons), "b" is gone for good.
    await aws.limits.report_provider(provider_report("a", 2_000.0))

    members = await aws.clients.dynamodb.query(
        TableName=aws.table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "member#p%231#m"}},
        ConsistentRead=True,
    )
    assert [item["sk"]["S"] for item in members["Items"]] == ["a"]


async def test_a_limits_store_on_a_missing_table_is_unavailable(aws):
    limits = DynamoSharedLimits(aws.clients, "no-such-table")
    with pytest.raises(StoreUnavailableError):
        await limits.lease("k", rate_per_second=1.0, burst=1, want=1, now=1.0)
    with pytest.raises(StoreUnavailableError):
        await limits.report_provider(provider_report("a", 1.0))


# --- results kept in the table (tests/contract/test_result_store.py) --------------------


async def test_an_empty_result_round_trips(aws):
    ref = await aws.results.put(KEY_1, b"")
    assert await aws.results.get(ref, key=KEY_1) == b""


async def test_unknown_missing_and_mismatched_refs_are_unreadable(aws):
    ref = await aws.results.put(KEY_1, b"x")

    with pytest.raises(ResultUnreadableError, match="not a database reference"):
        await aws.results.get("gen_1/att_9-never-stored", key=KEY_1)
    with pytest.raises(ResultUnreadableError, match="missing"):
        await aws.results.get(f"db:{KEY_2};sha256={'0' * 64}", key=KEY_2)
    with pytest.raises(ResultUnreadableError, match="checksum"):
        await aws.results.get(ref.rsplit("=", 1)[0] + "=" + "0" * 64, key=KEY_1)
    # A ref without a checksum (as SQLite once wrote them) is checked by its key alone.
    assert await aws.results.get(f"db:{KEY_1}", key=KEY_1) == b"x"


async def test_bytes_changed_in_place_are_unreadable(aws):
    ref = await aws.results.put(KEY_1, b"original")
    await aws.clients.dynamodb.update_item(
        TableName=aws.table,
        Key={"pk": {"S": result_pk(KEY_1)}, "sk": {"S": RESULT_SK}},
        UpdateExpression="SET #d = :d",
        ExpressionAttributeNames={"#d": "data"},
        ExpressionAttributeValues={":d": {"B": b"tampered"}},
    )

    with pytest.raises(ResultUnreadableError, match="checksum"):
        await aws.results.get(ref, key=KEY_1)
    # Even a ref without a checksum is not served: the item's own checksum disagrees.
    with pytest.raises(ResultUnreadableError, match="checksum"):
        await aws.results.get(f"db:{KEY_1}", key=KEY_1)


async def test_a_put_again_of_the_same_bytes_is_the_same_ref_and_other_bytes_are_refused(aws):
    ref = await aws.results.put(KEY_1, b"first")

    assert await aws.two.results.put(KEY_1, b"first") == ref
    with pytest.raises(StateConflictError):
        await aws.results.put(KEY_1, b"different")
    assert await aws.results.get(ref, key=KEY_1) == b"first"


async def test_a_large_result_fits_and_one_over_an_items_limit_names_the_s3_store(aws):
    # moto counts Binary by its base64 text and stops at 405,000 (DynamoDB: raw bytes,
    # 409,600), so the largest result DynamoDB takes cannot be shown here: 256 KiB can.
    large = bytes(range(256)) * 1024
    long_key = result_key("t" * 900, "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_1")

    ref = await aws.results.put(long_key, large)

    assert await aws.results.get(ref, key=long_key) == large
    with pytest.raises(ValueError, match=r"FERRYMAN_RESULTS_URL=s3://"):
        await aws.results.put(KEY_1, b"x" * (MAX_RESULT_BYTES + 1))
    with pytest.raises(ResultUnreadableError, match="missing"):  # nothing was written
        await aws.results.get(f"db:{KEY_1}", key=KEY_1)


async def test_keys_no_store_may_use_are_refused(aws):
    with pytest.raises(ValueError, match="empty"):
        await aws.results.put("", b"x")
    with pytest.raises(ValueError, match="longer"):
        await aws.results.put("t/" + "k" * 1100, b"x")


async def test_a_results_store_on_a_missing_table_fails_its_probe_and_reads(aws):
    results = DynamoResultStore(aws.clients, "no-such-table")
    with pytest.raises(ResultsUnavailableError, match="ferryman migrate"):
        await results.probe()
    with pytest.raises(ResultsUnavailableError):
        await results.get(f"db:{KEY_1}", key=KEY_1)
    with pytest.raises(StoreUnavailableError):  # a put is the job store's write
        await results.put(KEY_1, b"x")


async def test_reclaim_takes_only_results_whose_jobs_are_gone(aws):
    kept = await aws.results.put(KEY_1, b"kept")
    gone = await aws.results.put(OTHER_TENANT, b"gone!")
    unowned = await aws.results.put("not-a-rule-key", b"stays")
    asked: list[list[str]] = []

    async def only_the_first_job_exists(job_ids) -> bool:
        asked.append(sorted(job_ids))
        return job_id_of(KEY_1) in job_ids

    reclaimed = await aws.results.reclaim(any_job_exists=only_the_first_job_exists)
    again = await aws.results.reclaim(any_job_exists=only_the_first_job_exists)

    assert reclaimed == len(b"gone!")
    assert again == 0
    assert await aws.results.get(kept, key=KEY_1) == b"kept"
    assert await aws.results.get(unowned, key="not-a-rule-key") == b"stays"
    with pytest.raises(ResultUnreadableError, match="missing"):
        await aws.results.get(gone, key=OTHER_TENANT)
    assert all(ids for ids in asked)


async def test_reclaim_pages_through_many_results(aws):
    keys = [result_key("t1", f"gen_{i:026d}", "att_01HZZZZZZZZZZZZZZZZZZZZZZ1") for i in range(60)]
    await asyncio.gather(*(aws.results.put(k, b"12345") for k in keys))

    async def none_exists(job_ids) -> bool:
        return False

    assert await aws.results.reclaim(any_job_exists=none_exists) == 60 * 5
    assert await aws.results.reclaim(any_job_exists=none_exists) == 0
