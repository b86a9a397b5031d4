"""Engines behind the ports: one package (or module) per engine, independent of each other."""

from __future__ import annotations
