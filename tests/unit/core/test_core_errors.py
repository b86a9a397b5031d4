from __future__ import annotations

import inspect
import re

import pytest

from ferryman.core import errors
from ferryman.core.errors import FailureClass, FerrymanError, ProviderError

ALL_ERRORS = sorted(
    (
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, FerrymanError)
    ),
    key=lambda cls: cls.__name__,
)


def test_the_drawn_tree_and_the_classes_agree() -> None:
    assert errors.__doc__ is not None
    drawn = set(re.findall(r"\b([A-Z]\w*Error)\b", errors.__doc__))
    assert drawn == {cls.__name__ for cls in ALL_ERRORS}


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda cls: cls.__name__)
def test_default_message_is_the_docstring(cls: type[FerrymanError]) -> None:
    error = cls()
    assert cls.__doc__
    assert error.message == cls.__doc__.strip()
    assert str(error) == error.message


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_is_named_as_an_error(cls: type[FerrymanError]) -> None:
    assert cls.__name__.endswith("Error")


def test_an_explicit_message_wins() -> None:
    assert errors.StaleFenceError("lost it").message == "lost it"


@pytest.mark.parametrize(
    ("cls", "failure_class"),
    [
        (errors.ThrottledError, FailureClass.THROTTLED),
        (errors.ProviderTimeoutError, FailureClass.TRANSIENT),
        (errors.ProviderServerError, FailureClass.TRANSIENT),
        (errors.InvalidOutputError, FailureClass.INVALID_OUTPUT),
        (errors.ProviderBadRequestError, FailureClass.INVALID_REQUEST),
        (errors.ContextLengthExceededError, FailureClass.INVALID_REQUEST),
        (errors.ProviderUnauthorizedError, FailureClass.UNAUTHORIZED),
        (errors.AccountRefusedError, FailureClass.UNAUTHORIZED),
        (errors.SafetyRejectedError, FailureClass.SAFETY_REJECTED),
    ],
)
def test_provider_errors_carry_their_failure_class(
    cls: type[ProviderError], failure_class: FailureClass
) -> None:
    assert cls.failure_class is failure_class
    assert cls().failure_class is failure_class


def test_every_provider_error_subclass_is_mapped() -> None:
    subclasses = {cls for cls in ALL_ERRORS if issubclass(cls, ProviderError)} - {ProviderError}
    assert len(subclasses) == 9


def test_provider_errors_keep_retry_after_and_request_id() -> None:
    error = errors.ThrottledError(retry_after_seconds=2.5, provider_request_id="req-1")
    assert (error.retry_after_seconds, error.provider_request_id) == (2.5, "req-1")
    assert errors.ProviderServerError().retry_after_seconds is None


def test_invalid_request_carries_field_errors() -> None:
    loc_error = {"loc": ["body", "input", "prompt"], "msg": "Field required"}
    assert errors.InvalidRequestError(errors=[loc_error]).errors == [loc_error]
    assert errors.InvalidRequestError().errors == []


def test_paused_carries_retry_after() -> None:
    assert errors.PausedError().retry_after_seconds == 30
    assert errors.PausedError(retry_after_seconds=5).retry_after_seconds == 5


def test_an_explicit_message_wins_for_errors_with_their_own_arguments() -> None:
    assert errors.PausedError("closed for the upgrade").message == "closed for the upgrade"
    assert errors.InvalidRequestError("bad input").message == "bad input"
    assert errors.ThrottledError("slow down").message == "slow down"


@pytest.mark.parametrize(
    ("cls", "parent"),
    [
        (errors.IllegalTransitionError, errors.StateConflictError),
        (errors.StaleFenceError, errors.StateConflictError),
        (errors.InvalidRequestError, errors.RequestError),
        (errors.IdempotencyKeyMismatchError, errors.RequestError),
        (errors.InvalidIdempotencyKeyError, errors.RequestError),
        (errors.PayloadTooLargeError, errors.RequestError),
        (errors.AuthenticationError, errors.RequestError),
        (errors.ForbiddenError, errors.RequestError),
    ],
)
def test_the_tree_shape(cls: type[FerrymanError], parent: type[FerrymanError]) -> None:
    assert issubclass(cls, parent)


def test_codes_are_distinct_where_callers_tell_them_apart() -> None:
    codes = [
        errors.InvalidRequestError.code,
        errors.IdempotencyKeyMismatchError.code,
        errors.InvalidIdempotencyKeyError.code,
        errors.PayloadTooLargeError.code,
        errors.AuthenticationError.code,
        errors.ForbiddenError.code,
        errors.JobNotFoundError.code,
        errors.AlreadyTerminalError.code,
        errors.PausedError.code,
    ]
    assert len(set(codes)) == len(codes)
    assert errors.IdempotencyKeyMismatchError.code == "idempotency_key_mismatch"
    assert errors.AlreadyTerminalError.code == "already_terminal"
    assert errors.InvalidRequestError.code == "invalid_request"


def test_a_bare_provider_error_is_transient() -> None:
    # An adapter that cannot say more about a failed call gets it retried, not failed.
    assert ProviderError.failure_class is FailureClass.TRANSIENT
    error = ProviderError()
    assert error.failure_class is FailureClass.TRANSIENT
    assert (error.code, error.retry_after_seconds, error.provider_request_id) == (
        "provider_error",
        None,
        None,
    )
    assert error.scripted is False


def test_a_scripted_failure_says_so() -> None:
    assert errors.ThrottledError(scripted=True).scripted is True
