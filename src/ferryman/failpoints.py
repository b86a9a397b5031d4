"""Named crash points for chaos tests (docs/architecture.md, Failpoints).

``FERRYMAN_FAILPOINTS="after_claim=crash@0.1,after_invoke=crash@0.2"`` makes the
process exit abruptly at a named point with the given probability, the way a
power cut or an OOM kill would: no cleanup, no flush, no ack. Unset, a check is
one dictionary lookup on an empty dict.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

POINTS = frozenset(
    {
        "after_receive",
        "after_claim",
        "after_invoke",
        "after_result_put",
        "after_publish",
        "before_ack",
    }
)
CRASH_EXIT_CODE = 86


@dataclass(frozen=True, slots=True)
class Failpoints:
    probabilities: dict[str, float] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def parse(cls, spec: str | None) -> Failpoints:
        """Parse ``name=crash@p,...``; raise ValueError on an unknown point or bad probability."""
        probabilities: dict[str, float] = {}
        for item in (spec or "").split(","):
            if not item.strip():
                continue
            name, _, action = item.strip().partition("=")
            kind, _, p = action.partition("@")
            if name not in POINTS:
                raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(POINTS))}")
            if kind != "crash":
                raise ValueError(f"failpoint {name}: only 'crash' is supported, got {kind!r}")
            probability = float(p) if p else 1.0
            if not 0.0 <= probability <= 1.0:
                raise ValueError(f"failpoint {name}: probability must be within 0..1")
            probabilities[name] = probability
        return cls(probabilities=probabilities)

    def hit(self, name: str) -> None:
        """Crash here with the configured probability."""
        probability = self.probabilities.get(name)
        if probability is not None and self.rng.random() < probability:
            # One unbuffered line, so a chaos run can tell which point fired; then die.
            os.write(2, f"ferryman: failpoint {name} hit, exiting\n".encode())
            os._exit(CRASH_EXIT_CODE)
