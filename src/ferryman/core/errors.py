"""The exception tree of ferryman.

    FerrymanError
    ├── RequestError                    the caller sent something we refuse
    │   ├── InvalidRequestError         unknown task, input failing its model
    │   ├── IdempotencyKeyMismatchError same key, different request
    │   ├── InvalidIdempotencyKeyError  key not 1-255 printable ASCII
    │   ├── PayloadTooLargeError        body over the limit
    │   ├── AuthenticationError         missing, unknown, revoked or expired API key
    │   ├── ForbiddenError              a non-admin key on the operations API
    │   ├── UnsupportedFieldError       a reserved field this version refuses
    │   ├── WebhookUrlRefusedError      a webhook_url ferryman will not call
    │   ├── WebhookSecretRequiredError  a webhook_url from a tenant with no signing secret
    │   └── QuotaExceededError          a tenant's quota is used up
    │       ├── BacklogQuotaExceededError    too many unfinished jobs
    │       └── StorageQuotaExceededError    too many stored jobs
    ├── JobNotFoundError                no such job for this tenant
    ├── ApiKeyNotFoundError             no such API key
    ├── DeadLetterNotFoundError         no such undecodable dead letter
    ├── AlreadyTerminalError            cancel on a finished job
    ├── StateConflictError              a conditional write lost its condition
    │   ├── IllegalTransitionError      the job's status does not allow it
    │   ├── StaleFenceError             the attempt no longer owns the job
    │   └── LastAdminKeyError           revoking it would leave no usable admin key
    ├── PausedError                     intake paused by an operator
    ├── BackendUnavailableError         a backend is away (an outage, never a bug)
    │   ├── StoreUnavailableError       the job store (and a queue kept in it)
    │   ├── QueueUnavailableError       a queue that is a service of its own
    │   └── ResultsUnavailableError     the result store cannot take a write now
    ├── ResultUnreadableError           a stored result is missing or fails verification
    ├── WebhookSecretUnreadableError    a signing secret sealed under another key
    └── ProviderError                   a model call failed; carries a FailureClass
        ├── ThrottledError              THROTTLED (may carry retry_after_seconds)
        ├── ProviderTimeoutError        TRANSIENT
        ├── ProviderServerError         TRANSIENT
        ├── InvalidOutputError          INVALID_OUTPUT
        ├── ProviderBadRequestError     INVALID_REQUEST
        │   └── ContextLengthExceededError  the input is too long for this model
        ├── ProviderUnauthorizedError   UNAUTHORIZED
        │   └── AccountRefusedError     the account, not the key: no quota or credit left
        └── SafetyRejectedError         SAFETY_REJECTED

Whether to retry is never decided here: core/retry.py decides it from the failure
class. Every exception's default message is its class docstring, so a bare raise
reads well.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar


class FailureClass(enum.StrEnum):
    """Why a model call failed, which decides whether it is worth another try."""

    THROTTLED = "THROTTLED"
    TRANSIENT = "TRANSIENT"
    INVALID_OUTPUT = "INVALID_OUTPUT"
    INVALID_REQUEST = "INVALID_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    SAFETY_REJECTED = "SAFETY_REJECTED"
    # Not a model failure: the delivery itself failed too often (crash loops, poison).
    DELIVERY = "DELIVERY"


class FerrymanError(Exception):
    """Something went wrong in ferryman."""

    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (type(self).__doc__ or type(self).__name__).strip()
        super().__init__(self.message)


class RequestError(FerrymanError):
    """The request was refused."""

    code = "invalid_request"


class InvalidRequestError(RequestError):
    """The request is not valid."""

    code = "invalid_request"

    def __init__(self, message: str | None = None, *, errors: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.errors: list[dict[str, Any]] = errors or []


class IdempotencyKeyMismatchError(RequestError):
    """This Idempotency-Key was already used with a different request."""

    code = "idempotency_key_mismatch"


class InvalidIdempotencyKeyError(RequestError):
    """An Idempotency-Key must be 1-255 printable ASCII characters."""

    code = "invalid_idempotency_key"


class PayloadTooLargeError(RequestError):
    """The request body is over the size limit."""

    code = "payload_too_large"


class AuthenticationError(RequestError):
    """A valid API key is required: send Authorization: Bearer <key>."""

    code = "unauthenticated"


class ForbiddenError(RequestError):
    """This operation needs an admin API key."""

    code = "forbidden"


class UnsupportedFieldError(RequestError):
    """This field is reserved and not supported by this version."""

    code = "unsupported_field"


class WebhookUrlRefusedError(RequestError):
    """This webhook_url cannot be used: ferryman delivers only to public https
    addresses, or to hosts the operator allowed (FERRYMAN_WEBHOOK_ALLOWED_HOSTS)."""

    code = "webhook_url_refused"


class WebhookSecretRequiredError(RequestError):
    """A webhook_url needs this tenant's signing secret first: create it with
    POST /v1/webhooks/secret (or `ferryman webhooks secret`), then submit again."""

    code = "webhook_secret_required"


class WebhookSecretUnreadableError(FerrymanError):
    """The tenant's webhook signing secret cannot be read with this process's
    FERRYMAN_SECRET_KEY (it was sealed under another key, or the key is unset)."""

    code = "webhook_secret_unreadable"


class QuotaExceededError(RequestError):
    """The tenant's quota is used up."""

    code = "quota_exceeded"


class BacklogQuotaExceededError(QuotaExceededError):
    """The tenant has too many unfinished jobs; wait for some to finish."""

    code = "backlog_quota_exceeded"


class StorageQuotaExceededError(QuotaExceededError):
    """The tenant has too many stored jobs; purge old ones or raise the quota."""

    code = "storage_quota_exceeded"


class JobNotFoundError(FerrymanError):
    """No such job."""

    code = "not_found"


class ApiKeyNotFoundError(FerrymanError):
    """No such API key."""

    code = "not_found"


class DeadLetterNotFoundError(FerrymanError):
    """No undecodable dead letter of that id."""

    code = "not_found"


class AlreadyTerminalError(FerrymanError):
    """The job has already finished."""

    code = "already_terminal"


class StateConflictError(FerrymanError):
    """The job changed under this write; its condition no longer holds."""

    code = "conflict"


class IllegalTransitionError(StateConflictError):
    """The job's status does not allow this transition."""


class StaleFenceError(StateConflictError):
    """This attempt no longer owns the job: its fence is stale or its lease expired."""

    code = "stale_fence"


class LastAdminKeyError(StateConflictError):
    """This is the last usable admin key; create another admin key before revoking it."""

    code = "last_admin_key"


class PausedError(FerrymanError):
    """Intake is paused by an operator; try again later."""

    code = "paused"

    def __init__(self, message: str | None = None, *, retry_after_seconds: int = 30) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class BackendUnavailableError(FerrymanError):
    """A backend cannot serve us now: an outage to ride out or report, never a bug.

    Engines raise one of the three kinds below, and only for what says the backend is
    away (a lost connection, a held lock, a full or failed disk); a wrong statement or
    a driver's own error goes through as itself. Services catch these, never OSError
    or a driver's errors."""

    code = "backend_unavailable"
    backend = "backend"


class StoreUnavailableError(BackendUnavailableError):
    """The job store cannot be reached (on SQLite and PostgreSQL, the queue with it)."""

    code = "store_unavailable"
    backend = "store"


class QueueUnavailableError(BackendUnavailableError):
    """The queue cannot be reached, where it is a service apart from the job store."""

    code = "queue_unavailable"
    backend = "queue"


class ResultsUnavailableError(BackendUnavailableError):
    """The result store cannot take a write, or give a read, right now."""

    code = "results_unavailable"
    backend = "results"


class ResultUnreadableError(FerrymanError):
    """The job's stored result is missing or failed verification."""

    code = "result_unreadable"


class ProviderError(FerrymanError):
    """The model call failed."""

    failure_class: ClassVar[FailureClass] = FailureClass.TRANSIENT
    code = "provider_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_after_seconds: float | None = None,
        provider_request_id: str | None = None,
        scripted: bool = False,
    ) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
        self.provider_request_id = provider_request_id
        # Made up by a script the client controls (the sim's): it says nothing about the
        # provider, so it must never steer a limiter that every tenant shares.
        self.scripted = scripted


class ThrottledError(ProviderError):
    """The provider is throttling requests."""

    failure_class = FailureClass.THROTTLED
    code = "throttled"


class ProviderTimeoutError(ProviderError):
    """The model did not answer within the timeout."""

    failure_class = FailureClass.TRANSIENT
    code = "timeout"


class ProviderServerError(ProviderError):
    """The provider answered with a server error."""

    failure_class = FailureClass.TRANSIENT
    code = "server_error"


class InvalidOutputError(ProviderError):
    """The model output does not match the task's output schema."""

    failure_class = FailureClass.INVALID_OUTPUT
    code = "invalid_output"


class ProviderBadRequestError(ProviderError):
    """The provider rejected the request as invalid."""

    failure_class = FailureClass.INVALID_REQUEST
    code = "bad_request"


class ContextLengthExceededError(ProviderBadRequestError):
    """The input is too long for this model's context window."""

    code = "context_length_exceeded"


class ProviderUnauthorizedError(ProviderError):
    """The provider refused our credentials."""

    failure_class = FailureClass.UNAUTHORIZED
    code = "unauthorized"


class AccountRefusedError(ProviderUnauthorizedError):
    """The provider refused our account: it has no quota or credit left."""

    code = "account_refused"


class SafetyRejectedError(ProviderError):
    """The model refused the request under its content policy."""

    failure_class = FailureClass.SAFETY_REJECTED
    code = "safety_rejected"
