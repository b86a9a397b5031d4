"""Connections still waiting for a request head, counted apart from the served ones.

A connection that has not sent a whole request head has asked nothing of the app
yet: it must not take a place under the connection cap that a request with a head
would then be refused for (header-dripping sockets from one host would otherwise
answer every tenant 503 for as long as they hold them). So the cap counts only the
connections that are not waiting for a head (``HeadWaits.waiting``), and those
waiting are bounded on their own:

- a head has ``SLOW_AFTER_SECONDS`` (1 s, or half the header timeout if that is
  shorter) before its connection counts as slow: an honest client's head arrives in
  far less, even in a burst of connections the loop has not read yet, so a burst
  from one host is never mistaken for an attack;
- at most ``per_client`` slow heads from one client address: past it, that address's
  oldest slow connection is closed (one host dripping headers only ever displaces
  its own sockets);
- at most ``total`` slow heads in all: past it, the oldest slow connection is closed,
  whoever holds it (many hosts dripping headers are bounded too; the newest
  connections, honest ones among them, get their chance).

Every one of them is still closed at the header timeout (http/connections.py).
Closing sends nothing: there is no request to answer.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

# How long a head may take before its connection counts as slow (see above).
SLOW_AFTER_SECONDS = 1.0


class WaitingConnection(Protocol):
    """What the registry needs of a connection: who it is from, and how to close it."""

    @property
    def client_address(self) -> str: ...

    def close_slow(self) -> None: ...


@dataclass(slots=True)
class HeadWaits:
    """The connections of one server waiting for a request head (shared by all of them)."""

    total: int
    per_client: int
    waiting: int = 0
    # Slow ones, oldest first: in all, and per client address.
    _slow: OrderedDict[WaitingConnection, None] = field(default_factory=OrderedDict)
    _by_client: dict[str, OrderedDict[WaitingConnection, None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_client < 1:
            raise ValueError("the slow head caps must be at least 1")

    def started(self) -> None:
        """A connection began waiting for a head."""
        self.waiting += 1

    def ended(self, connection: WaitingConnection) -> None:
        """It stopped waiting: its head is in, or it is closed."""
        self.waiting -= 1
        self._forget(connection)

    def slow(self, connection: WaitingConnection) -> None:
        """Its head is taking longer than SLOW_AFTER_SECONDS: count it, and close the
        oldest slow connections past the caps (its client's first, then anyone's)."""
        address = connection.client_address
        self._slow[connection] = None
        own = self._by_client.setdefault(address, OrderedDict())
        own[connection] = None
        if len(own) > self.per_client:
            self._close(next(iter(own)))
        if len(self._slow) > self.total:
            self._close(next(iter(self._slow)))

    @property
    def slow_count(self) -> int:
        return len(self._slow)

    def _close(self, connection: WaitingConnection) -> None:
        self._forget(connection)
        connection.close_slow()

    def _forget(self, connection: WaitingConnection) -> None:
        if connection not in self._slow:
            return
        del self._slow[connection]
        own = self._by_client[connection.client_address]
        del own[connection]
        if not own:
            del self._by_client[connection.client_address]
