"""The ferryman command line: the client's commands over HTTP, the server's and the operator's."""

from __future__ import annotations
