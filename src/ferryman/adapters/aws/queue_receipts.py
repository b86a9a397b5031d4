"""The receipts this process was given, so a stale one is refused here, not by SQS.

The port says a stale receipt (its message received again since, or deleted) changes
nothing. SQS does not promise that: DeleteMessage with an older receipt of a message
received again "might not" delete it (so it might), and moto accepts any receipt the
message ever had, for ChangeMessageVisibility and DeleteMessage alike. So the queue
remembers, per message, the latest receipt it issued: an older one of the same
message, or one of a message this process deleted or let go, is known stale and never
reaches SQS. A receipt from another process (or one forgotten) is unknown here and
goes to SQS, which decides; the job's own lease in the store stays the real fence.

It also remembers what SQS does not tell again: each receipt's 12-hour limit
(``extendable_until``) and how long it is hidden, for ``stats``'s oldest age.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

# Stale receipts remembered (16-byte digests): far more than a process holds at once.
STALE_CAPACITY = 20_000


def _key(receipt: str) -> bytes:
    # SQS receipt handles run to hundreds of bytes; a digest keeps the book small.
    return hashlib.blake2b(receipt.encode(), digest_size=16).digest()


@dataclass(slots=True)
class Held:
    """A receipt this process holds: its message, and until when it is hidden."""

    message_id: str
    sent_at: float
    hidden_until: float
    extendable_until: float


class ReceiptBook:
    """Held receipts by digest, the latest per message, and a bounded stale set."""

    def __init__(self, *, stale_capacity: int = STALE_CAPACITY) -> None:
        self._held: dict[bytes, Held] = {}
        self._latest: dict[str, bytes] = {}  # message id -> its latest receipt's key
        self._stale: OrderedDict[bytes, None] = OrderedDict()
        self._stale_capacity = stale_capacity

    def __len__(self) -> int:
        return len(self._held)

    def issued(self, receipt: str, held: Held) -> None:
        """A receive gave ``receipt``: the message's earlier receipt is stale now."""
        key = _key(receipt)
        earlier = self._latest.get(held.message_id)
        if earlier is not None and earlier != key:
            self._retire(earlier)
        self._held[key] = held
        self._latest[held.message_id] = key

    def get(self, receipt: str) -> Held | None:
        return self._held.get(_key(receipt))

    def is_stale(self, receipt: str) -> bool:
        return _key(receipt) in self._stale

    def hidden_until(self, receipt: str, until: float) -> None:
        held = self._held.get(_key(receipt))
        if held is not None:
            held.hidden_until = until

    def retire(self, receipt: str) -> None:
        """Deleted, let go, or refused by SQS: the receipt is stale from now on."""
        self._retire(_key(receipt))

    def _retire(self, key: bytes) -> None:
        held = self._held.pop(key, None)
        if held is not None and self._latest.get(held.message_id) == key:
            del self._latest[held.message_id]
        self._stale[key] = None
        self._stale.move_to_end(key)
        while len(self._stale) > self._stale_capacity:
            self._stale.popitem(last=False)

    def prune(self, *, now: float, grace_seconds: float) -> None:
        """Forget receipts whose hiding ran out ``grace_seconds`` ago: their message is
        back in SQS (maybe received elsewhere), so this process no longer knows about
        them; SQS decides what such a receipt may still do."""
        lapsed = [k for k, h in self._held.items() if h.hidden_until + grace_seconds < now]
        for key in lapsed:
            held = self._held.pop(key)
            if self._latest.get(held.message_id) == key:
                del self._latest[held.message_id]

    def oldest_sent_at(self, now: float) -> float | None:
        """The oldest send time among the messages this process holds hidden now."""
        return min((h.sent_at for h in self._held.values() if h.hidden_until > now), default=None)
