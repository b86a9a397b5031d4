"""Requests as the worker builds them, with a prompt that no error message may repeat."""

from __future__ import annotations

import dataclasses
from typing import Any

from ferryman.ports.provider import ModelRequest
from ferryman.tasks import builtin_tasks

# A prompt no error message may ever repeat.
SECRET_PROMPT = "the customer's card number is 4111-SECRET-PROMPT"


def classify_request(**overrides: Any) -> ModelRequest:
    """A structured request as the worker builds one (the classify_ticket task)."""
    task = builtin_tasks().get("classify_ticket")
    request = task.build_request(
        {"ticket": SECRET_PROMPT}, model="served-model", attempt_no=1, job_id="gen_test"
    )
    return dataclasses.replace(request, **overrides)


VALID_TICKET = '{"category": "billing", "priority": "high", "summary": "charged twice"}'
