"""S3ResultStore: results as S3 objects (FERRYMAN_RESULTS_URL=s3://BUCKET/PREFIX).

One object per result, at ``PREFIX/<key>`` (keys are attempt-specific:
core.results.result_key). Its metadata carries the job id and attempt id parsed
from the key and the sha256 of its bytes; a ref is ``s3:<key>;sha256=<hex>``, the
key it was written under and the checksum, as the database stores' refs are. The
bucket and prefix come from the configuration, as a results directory does, so a
ref stays valid when the bucket is reached by another endpoint or region.

Put: one ``PutObject`` with ``IfNoneMatch="*"`` (S3 refuses it when an object is
already at the key: a result is never overwritten) and ``ChecksumSHA256`` (S3
recomputes the checksum of the bytes it received and refuses the put when they
differ, so what it stores is what we hashed). Then a ``HEAD`` reads it back. Why a
HEAD and not a GET: S3 answers a PutObject only once the object is stored
redundantly (durable), it is strongly read-after-write consistent, and the HEAD's
``ChecksumSHA256`` (with ``ChecksumMode=ENABLED``) is the checksum S3 verified the
stored bytes against; so a HEAD proves the object at the key is ours, whole, without
paying to download it again. A put retried after a lost answer finds its own object
(412) and, when the checksums agree, returns the same ref; different bytes there
are refused with StateConflictError and left alone.

Get: the ref must name the key the reader expects and carry a checksum; the
object's metadata must carry that key's job and attempt ids and that checksum; the
bytes must hash to it. Anything else is ResultUnreadableError, never another
tenant's name in the message. An outage (throttling, 5xx, a connection lost, a
bucket gone) is ResultsUnavailableError (adapters/aws/errors.py).
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.errors import error_code, translate_result_errors
from ferryman.core.errors import ResultsUnavailableError, ResultUnreadableError, StateConflictError
from ferryman.core.results import attempt_id_of, checksum, gone_jobs, job_id_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from ferryman.adapters.aws.clients import AwsClients

_REF = re.compile(r"^s3:(.+?);sha256=([0-9a-f]{64})$", re.DOTALL)
# The object's user metadata (x-amz-meta-*; S3 gives the names back in lowercase).
META_JOB_ID = "ferryman-job-id"
META_ATTEMPT_ID = "ferryman-attempt-id"
META_SHA256 = "ferryman-sha256"
# An object key is at most 1024 bytes of UTF-8.
_MAX_OBJECT_KEY_BYTES = 1024
# DeleteObjects takes at most this many keys per call.
DELETE_BATCH = 1000
# probe's conditional put names this key; it never writes it (see probe).
PROBE_KEY = ".ferryman-probe"
# The condition that can never hold: no object has this ETag.
_IMPOSSIBLE_ETAG = '"ferryman-probe-never-matches"'
_BUCKET_MISSING = frozenset({"404", "NotFound", "NoSuchBucket"})
_DENIED = frozenset({"403", "AccessDenied", "Forbidden", "AllAccessDisabled"})


def _ref(key: str, digest: str) -> str:
    return f"s3:{key};sha256={digest}"


def _sha256_b64(digest: str) -> str:
    """The hex checksum as S3 spells it (base64 of the raw digest)."""
    return base64.b64encode(bytes.fromhex(digest)).decode("ascii")


def owner_metadata(key: str) -> dict[str, str]:
    """The job and attempt ids a key names, as object metadata (none for a key the
    result rule did not make, or ids S3 metadata cannot carry: only ASCII)."""
    job_id, attempt_id = job_id_of(key), attempt_id_of(key)
    if job_id is None or attempt_id is None or not (job_id + attempt_id).isascii():
        return {}
    return {META_JOB_ID: job_id, META_ATTEMPT_ID: attempt_id}


def _check_key(key: str, object_key: str) -> None:
    """Keys are relative, path-like names; refuse what S3 or a listing would make ambiguous."""
    if not key or "\\" in key or any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ValueError("a result key must be a non-empty name without control characters")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError("a result key cannot contain '..', '.' or empty segments")
    if len(object_key.encode()) > _MAX_OBJECT_KEY_BYTES:
        raise ValueError(f"a result key with its prefix must fit {_MAX_OBJECT_KEY_BYTES} bytes")


def _damaged(reason: str) -> ResultUnreadableError:
    return ResultUnreadableError(f"the stored result failed verification: {reason}")


class S3ResultStore:
    def __init__(self, clients: AwsClients, bucket: str, prefix: str = "") -> None:
        self._s3 = clients.s3
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        # Every object of this store starts with this; a listing under it sees no other's.
        self._start = f"{self._prefix}/" if self._prefix else ""

    def object_key(self, key: str) -> str:
        """Where the result of ``key`` is in the bucket."""
        return self._start + key

    async def put(self, key: str, data: bytes) -> str:
        object_key = self.object_key(key)
        _check_key(key, object_key)
        digest = checksum(data)
        with translate_result_errors():
            try:
                await self._s3.put_object(
                    Bucket=self._bucket,
                    Key=object_key,
                    Body=bytes(data),
                    IfNoneMatch="*",
                    ChecksumAlgorithm="SHA256",
                    ChecksumSHA256=_sha256_b64(digest),
                    Metadata={**owner_metadata(key), META_SHA256: digest},
                )
            except Exception as exc:
                code = error_code(exc)
                if code == "ConditionalRequestConflict":
                    # Another put to this key is in flight (S3's 409): a retry settles it.
                    raise ResultsUnavailableError(
                        "s3: another write to this result's key is in progress"
                    ) from exc
                if code != "PreconditionFailed":
                    raise
                # Already there: ours (a retried put whose answer was lost) or not.
            await self._read_back(object_key, key, digest, len(data))
        return _ref(key, digest)

    async def _read_back(self, object_key: str, key: str, digest: str, length: int) -> None:
        """Raise StateConflictError unless the object at ``object_key`` is these bytes."""
        head = await self._s3.head_object(
            Bucket=self._bucket, Key=object_key, ChecksumMode="ENABLED"
        )
        metadata = head.get("Metadata") or {}
        if (
            head.get("ChecksumSHA256") != _sha256_b64(digest)
            or metadata.get(META_SHA256) != digest
            or int(head.get("ContentLength", -1)) != length
            or _owner_of(metadata) != owner_metadata(key)
        ):
            raise StateConflictError(
                "results: another result is already stored under this key; "
                "a result is never overwritten"
            )

    async def get(self, ref: str, *, key: str) -> bytes:
        match = _REF.match(ref)
        if match is None:
            raise ResultUnreadableError("the stored result's reference is not an S3 reference")
        stored_key, digest = match.groups()
        # Never say whose result the ref names: that could be another tenant's.
        if stored_key != key:
            raise ResultUnreadableError("the stored result's reference names another result")
        with translate_result_errors():
            try:
                response = await self._s3.get_object(Bucket=self._bucket, Key=self.object_key(key))
            except Exception as exc:
                if error_code(exc) in {"NoSuchKey", "404"}:
                    raise ResultUnreadableError("the stored result is missing") from None
                raise
            data = await _read_body(response)
        metadata = response.get("Metadata") or {}
        if _owner_of(metadata) != owner_metadata(key):
            raise _damaged("the object belongs to another result")
        if metadata.get(META_SHA256) != digest:
            raise _damaged("the object's checksum is not the one its job refers to")
        if checksum(data) != digest:
            raise _damaged("the result's bytes do not match their checksum")
        return data

    async def probe(self) -> None:
        """HeadBucket (the bucket is there and this identity may list it), then a
        PutObject whose condition can never hold: S3 checks the right to write
        before it evaluates the condition, so AccessDenied says a put would be
        refused, and the precondition failure (or NoSuchKey) says it would be taken.
        Nothing is written either way."""
        with translate_result_errors():
            try:
                await self._s3.head_bucket(Bucket=self._bucket)
                await self._s3.put_object(
                    Bucket=self._bucket,
                    Key=self.object_key(PROBE_KEY),
                    Body=b"",
                    IfMatch=_IMPOSSIBLE_ETAG,
                )
            except Exception as exc:
                code = error_code(exc)
                if code in {"PreconditionFailed", "NoSuchKey"}:
                    return
                if code in _BUCKET_MISSING:
                    raise ResultsUnavailableError(
                        f"s3: bucket {self._bucket!r} does not exist "
                        "(run `ferryman migrate` to create it)"
                    ) from exc
                if code in _DENIED:
                    raise ResultsUnavailableError(
                        f"s3: this identity may not write to bucket {self._bucket!r} ({code})"
                    ) from exc
                raise
        # A put that succeeded means the store ignored the condition: say so, and remove it.
        await self._s3.delete_object(Bucket=self._bucket, Key=self.object_key(PROBE_KEY))
        raise ResultsUnavailableError("s3: the bucket ignored a conditional put (If-Match)")

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        reclaimed = 0
        paginator = self._s3.get_paginator("list_objects_v2")
        with translate_result_errors():
            async for page in paginator.paginate(Bucket=self._bucket, Prefix=self._start):
                reclaimed += await self._reclaim_page(page.get("Contents") or [], any_job_exists)
        return reclaimed

    async def _reclaim_page(
        self,
        objects: list[dict[str, Any]],
        any_job_exists: Callable[[Collection[str]], Awaitable[bool]],
    ) -> int:
        """Delete the objects of one listing page whose jobs are all gone; their bytes.
        Deleting behind the listing is safe: its continuation is after these keys."""
        sizes = {str(o["Key"]): int(o.get("Size", 0)) for o in objects}
        owners = {k: job_id_of(k.removeprefix(self._start)) for k in sizes}
        gone = await gone_jobs({o for o in owners.values() if o}, any_job_exists)
        doomed = [k for k, owner in owners.items() if owner in gone]
        reclaimed = 0
        for start in range(0, len(doomed), DELETE_BATCH):
            batch = doomed[start : start + DELETE_BATCH]
            response = await self._s3.delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            # Quiet: only failures are listed; those stay, and their bytes are not counted.
            failed = {str(e.get("Key")) for e in response.get("Errors") or []}
            reclaimed += sum(sizes[k] for k in batch if k not in failed)
        return reclaimed


def _owner_of(metadata: dict[str, Any]) -> dict[str, str]:
    return {
        name: str(metadata[name]) for name in (META_JOB_ID, META_ATTEMPT_ID) if name in metadata
    }


async def _read_body(response: dict[str, Any]) -> bytes:
    """The object's bytes; a stream cut short is an outage (the next read may succeed)."""
    from botocore.exceptions import IncompleteReadError

    body = response["Body"]
    try:
        async with body:
            data: bytes = await body.read()
    except IncompleteReadError as exc:
        raise ResultsUnavailableError("s3: the result's download was cut short") from exc
    return data
