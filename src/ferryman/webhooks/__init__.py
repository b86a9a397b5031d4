"""Completion webhooks' adapters: the SSRF guard (``urls``, over ``addresses``), Standard
Webhooks signatures (``signing``), the HTTP sender (``sender``) and the sealing of
signing secrets at rest (``sealing``). Like ``providers/``, they implement ports and
import only ``core`` and ``ports`` of ferryman."""

from __future__ import annotations
