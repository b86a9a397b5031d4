"""The AWS engine's small stores on the emulator's DynamoDB: API keys, switches and the
audit log, shared limits, and results kept in the table.

The contract suites (tests/contract/test_api_keys.py, test_small_stores.py,
test_provider_pauses.py, test_result_store.py) run on the aws engine too; here is what
they cannot show: two processes (two client sets) at once on one table, optimistic
writes that collide, an item size limit, a listing to reclaim from, a missing table;
and the shared limits, whose contract (test_postgres_shared.py) needs PostgreSQL."""

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
from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.aimd import AimdWindow
from ferryman.core.errors import (
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
    StoreUnavailableError,
)
from ferryman.core.ratelimit import TokenBucket
from ferryman.core.results import job_id_of, result_key
from ferryman.ports.control import AuditAction, AuditRecord, ProviderPause, Switch
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome
from ferryman.ports.limits import ProviderReport
from ferryman.services.provider_share import LIVE_AFTER_SECONDS, PerMinute, ProviderShareSync

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


# --- shared limits (tests/contract/test_postgres_shared.py) -----------------------------


async def test_a_new_bucket_starts_full_refills_over_time_and_never_from_a_clock_stepping_back(
    aws,
):
    async def lease(want: int, now: float):
        return await aws.limits.lease(
            "submit:acme", rate_per_second=2.0, burst=10, want=want, now=now
        )

    first = await lease(4, 100.0)
    rest = await lease(20, 100.0)
    empty = await lease(1, 100.0)
    refilled = await lease(5, 101.5)  # 1.5 s at 2/s: 3 tokens
    stepped_back = await lease(5, 50.0)
    much_later = await lease(20, 10_000.0)  # never above the burst

    assert (first.granted, first.tokens_left) == (4, 6.0)
    assert (rest.granted, rest.tokens_left) == (6, 0.0)
    assert (empty.granted, empty.tokens_left) == (0, 0.0)
    assert (refilled.granted, refilled.tokens_left) == (3, 0.0)
    assert stepped_back.granted == 0
    assert (much_later.granted, much_later.tokens_left) == (10, 0.0)


async def test_a_first_lease_over_the_burst_gets_the_burst_and_a_bad_want_is_refused(aws):
    got = await aws.limits.lease("k", rate_per_second=1.0, burst=3, want=10, now=1.0)
    assert (got.granted, got.tokens_left) == (3, 0.0)
    with pytest.raises(ValueError, match="want"):
        await aws.limits.lease("k", rate_per_second=1.0, burst=3, want=0, now=1.0)


async def test_fractional_tokens_are_kept_between_leases(aws):
    await aws.limits.lease("k", rate_per_second=0.5, burst=2, want=2, now=0.0)
    half = await aws.limits.lease("k", rate_per_second=0.5, burst=2, want=1, now=1.0)
    whole = await aws.limits.lease("k", rate_per_second=0.5, burst=2, want=1, now=2.0)

    assert (half.granted, half.tokens_left) == (0, 0.5)
    assert (whole.granted, whole.tokens_left) == (1, 0.0)


async def test_concurrent_leases_from_two_processes_never_grant_more_than_the_bucket(aws):
    async def lease(i: int, now: float) -> int:
        limits = aws.limits if i % 2 else aws.two.limits
        got = await limits.lease("submit:acme", rate_per_second=10.0, burst=50, want=3, now=now)
        return got.granted

    at_once = await asyncio.gather(*(lease(i, 1000.0) for i in range(40)))
    # Two seconds later: 20 tokens refilled, whoever asks.
    later = await asyncio.gather(*(lease(i, 1002.0) for i in range(40)))
    earlier = await lease(0, 900.0)

    assert sum(at_once) == 50
    assert sum(later) == 20
    assert earlier == 0


class _Wall:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _sync(limits, member: str, wall: _Wall, per_minute: float = 600.0):
    window = AimdWindow(maximum=64.0, start=8.0)
    learned = AdaptiveRate()
    bucket = TokenBucket(per_minute / 60.0, burst=10)
    sync = ProviderShareSync(
        limits,
        provider="openai",
        model="gpt-x",
        member=member,
        window=window,
        learned=learned,
        budgets=(PerMinute(bucket, per_minute),),
        wall_clock=wall,
    )
    return sync, window, learned, bucket


async def test_two_limiters_on_one_table_converge_to_one_window_and_rate(aws):
    wall = _Wall()
    one, w1, r1, b1 = _sync(aws.limits, "worker-1", wall)
    two, w2, r2, b2 = _sync(aws.two.limits, "worker-2", wall)

    await one.report(0.0)
    await two.report(0.0)
    await one.report(0.1)
    assert (w1.limit, w2.limit) == (8.0, 8.0)
    assert (one.members, two.members) == (2, 2)
    assert b1.rate_per_second == b2.rate_per_second == pytest.approx(5.0)

    for _ in range(4):
        w1.on_success()
    await one.report(1.0)
    await two.report(1.0)
    assert (w1.limit, w2.limit) == (10.0, 10.0)

    for rate in (r1, r2):
        for _ in range(20):
            rate.admitted(2.0)
        assert rate.on_throttle(2.0, 0)
    w1.on_throttle(0)
    w2.on_throttle(0)
    await one.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
    await two.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
    await one.report(3.5)
    assert (one.epoch, two.epoch) == (1, 1)
    assert (w1.limit, w2.limit) == (5.0, 5.0)
    assert r1.rate == r2.rate
    assert r1.rate is not None
    assert r1.rate * 2 == pytest.approx(19 * 0.85 * 2)

    for _ in range(2):
        wall.now += LIVE_AFTER_SECONDS / 2 + 0.5
        await one.report(10.0)
    assert one.members == 1
    assert w1.limit == 10.0
    assert b1.rate_per_second == pytest.approx(10.0)


async def test_a_throttle_under_an_old_epoch_does_not_narrow_the_cluster_again(aws):
    one, w1, _, _ = _sync(aws.limits, "worker-1", _Wall())
    await one.report(0.0)
    await one.after_call(1.0, admitted_epoch=0, narrowed=True, lowered=False)
    await one.after_call(1.1, admitted_epoch=0, narrowed=True, lowered=False)

    assert one.epoch == 1
    assert w1.limit == 4.0  # 8 halved once, not twice


def _report(member: str, now: float, **fields) -> ProviderReport:
    base = {
        "provider": "p#1",
        "model": "m",
        "member": member,
        "now": now,
        "grown_window": 0.0,
        "grown_rate": 0.0,
        "throttled_epoch": None,
        "narrowed_window": False,
        "lowered_rate": False,
        "learned_rate": None,
        "start_window": 4.0,
        "max_window": 6.0,
        "live_after_seconds": 5.0,
    }
    return ProviderReport(**{**base, **fields})


async def _provider_item(aws, provider: str, model: str) -> dict:
    response = await aws.clients.dynamodb.get_item(
        TableName=aws.table,
        Key={"pk": {"S": provider_pk(provider, model)}, "sk": {"S": PROVIDER_SK}},
        ConsistentRead=True,
    )
    return response["Item"]


async def test_a_report_that_moves_nothing_writes_nothing_and_one_that_does_writes(aws):
    first = await aws.limits.report_provider(_report("a", 100.0))
    written = await _provider_item(aws, "p#1", "m")

    steady = await aws.limits.report_provider(_report("a", 101.0))
    untouched = await _provider_item(aws, "p#1", "m")
    grown = await aws.limits.report_provider(_report("a", 102.0, grown_window=1.0))

    assert steady == first
    assert untouched == written  # the steady report wrote nothing
    after = await _provider_item(aws, "p#1", "m")
    assert grown.window == first.window + 1.0
    assert int(after["version"]["N"]) == int(written["version"]["N"]) + 1
    assert after["updated_at"] == {"N": "102.0"}


async def test_the_cluster_window_is_capped_at_every_live_member_and_a_gone_one_is_forgotten(
    aws,
):
    first = await aws.limits.report_provider(_report("a", 100.0))
    joined = await aws.limits.report_provider(_report("b", 100.0))
    grown = await aws.limits.report_provider(_report("a", 101.0, grown_window=50.0))
    # A report from the past (a slow clock) never moves a member's heartbeat back.
    await aws.limits.report_provider(_report("b", 90.0))
    # Long after (over 100 liveness horizons), "b" is gone for good: only "a" counts.
    alone = await aws.limits.report_provider(_report("a", 2_000.0))

    assert (first.window, first.rate, first.epoch, first.members) == (4.0, None, 0, 1)
    assert (joined.window, joined.members) == (8.0, 2)
    assert grown.window == 12.0  # 2 live x max_window 6
    assert alone.members == 1
    assert alone.window == 6.0  # a came back (joined again): min(1 x 6, 12 + 4)
    members = await aws.clients.dynamodb.query(
        TableName=aws.table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "member#p%231#m"}},
        ConsistentRead=True,
    )
    assert [item["sk"]["S"] for item in members["Items"]] == ["a"]


async def test_concurrent_throttles_in_one_epoch_decrease_the_cluster_once(aws):
    await aws.limits.report_provider(_report("a", 100.0, learned_rate=2.0))
    throttle = {"throttled_epoch": 0, "narrowed_window": True, "lowered_rate": True}

    shares = await asyncio.gather(
        *(
            (aws.limits if i % 2 else aws.two.limits).report_provider(
                _report(f"m{i}", 100.0, learned_rate=2.0, **throttle)
            )
            for i in range(6)
        )
    )

    # Whoever came first lowered the rate (2.0, the first report's) once; the others'
    # throttles were of the epoch that had ended: echoes that change nothing.
    assert {s.epoch for s in shares} == {1}
    assert [s.rate for s in shares] == [pytest.approx(2.0 * 0.85)] * 6


async def test_a_limits_store_on_a_missing_table_is_unavailable(aws):
    limits = DynamoSharedLimits(aws.clients, "no-such-table")
    with pytest.raises(StoreUnavailableError):
        await limits.lease("k", rate_per_second=1.0, burst=1, want=1, now=1.0)
    with pytest.raises(StoreUnavailableError):
        await limits.report_provider(_report("a", 1.0))


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
