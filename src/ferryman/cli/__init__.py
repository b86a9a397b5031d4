"""The ferryman command line: serve, api, worker, keys, submit, status, doctor, dlq."""

from __future__ import annotations
