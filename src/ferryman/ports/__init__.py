"""The ports: what services need from the outside world, as small Protocols in domain verbs."""

from __future__ import annotations
