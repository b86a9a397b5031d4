"""Identifiers: sortable, unguessable, with a prefix that says what they name."""

from __future__ import annotations

import os
import secrets
import threading
import time

# Crockford's base32, as ULIDs are written; and every pair of its digits (ten bits).
_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _DIGITS for b in _DIGITS]
_RANDOM_BITS = 80
_MAX_RANDOM = (1 << _RANDOM_BITS) - 1


class _RandomBytes:
    """Bytes from the system's CSPRNG, read 4 KiB at a time.

    os.urandom releases the GIL for its system call; on a busy server the calling
    thread then waits for the GIL to come back, far longer than the call itself. One
    read serves a few hundred ids. A forked child reads its own (``_reset``), so no
    two processes ever hand out the same bytes.
    """

    _CHUNK = 4096

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # A new lock too: in a forked child, the parent's may be held for ever by a
        # thread that does not exist there.
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._pool):
                self._pool, at = os.urandom(max(self._CHUNK, n)), 0
            self._at = at + n
            return self._pool[at : at + n]


_RANDOM = _RandomBytes()


class _UlidSource:
    """ULIDs (48 bits of milliseconds, 80 random bits, 26 digits), as python-ulid's
    ``str(ULID())`` makes them: fresh random bits in a new millisecond, the last ones
    plus one within the same millisecond, so ids sort in the order they were made.

    Written out here because the library's generator costs several times as much
    (validation and objects per id), and an attempt id is made for every claim.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()  # as _RandomBytes._reset
        self._ms = -1
        self._random = 0
        self._prefix = ""

    def new(self) -> str:
        ms = time.time_ns() // 1_000_000
        with self._lock:
            if ms == self._ms and self._random < _MAX_RANDOM:
                self._random += 1
            else:
                self._ms = ms
                self._random = int.from_bytes(_RANDOM.take(_RANDOM_BITS // 8), "big")
                self._prefix = (
                    _DIGITS[(ms >> 45) & 31]
                    + "".join(_PAIRS[(ms >> shift) & 1023] for shift in (35, 25, 15, 5))
                    + _DIGITS[ms & 31]
                )
            prefix, r = self._prefix, self._random
        pairs = _PAIRS
        return (
            prefix
            + pairs[r >> 70]
            + pairs[(r >> 60) & 1023]
            + pairs[(r >> 50) & 1023]
            + pairs[(r >> 40) & 1023]
            + pairs[(r >> 30) & 1023]
            + pairs[(r >> 20) & 1023]
            + pairs[(r >> 10) & 1023]
            + pairs[r & 1023]
        )


_ULIDS = _UlidSource()


def _after_fork_in_child() -> None:
    # A forked child must not go on from its parent's last id or random bytes: both
    # processes would hand out the same.
    _RANDOM._reset()
    _ULIDS._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def new_job_id() -> str:
    return f"gen_{_ULIDS.new()}"


def new_attempt_id() -> str:
    return f"att_{_ULIDS.new()}"


def new_correlation_id() -> str:
    return f"cor_{_RANDOM.take(12).hex()}"


def new_worker_id(hostname: str, pid: int) -> str:
    return f"{hostname}:{pid}:{secrets.token_hex(3)}"
