"""ferryman: durable jobs for slow, costly foundation-model calls.

The public Python API is the HTTP client; everything else is reached through
the HTTP API or the ``ferryman`` command.
"""

from __future__ import annotations

from ferryman.client import Client, ClientError, WaitTimeoutError

__all__ = ["Client", "ClientError", "WaitTimeoutError"]
__version__ = "0.1.0"
