"""Pure domain logic of ferryman: no I/O, no frameworks, no drivers."""

from __future__ import annotations
