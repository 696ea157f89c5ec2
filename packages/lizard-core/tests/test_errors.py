from __future__ import annotations

import json
import traceback
from typing import Any

import httpx
import lizard
import lizard.errors
import pytest

from lizard_core._redact import register_secret
from lizard_core.errors import (
    CommandTimeoutError,
    CredentialsError,
    GuestProtocolError,
    LizardIntegrationError,
    OutputLimitError,
    QuotaError,
    SandboxGoneError,
    SandboxPausedError,
    SandboxStateError,
    TransientError,
    translate,
    translated,
)

KEY = "liz_errors_test_key_7f3a9c"
register_secret(KEY)


def sdk_error(status: int, body: dict[str, Any] | str) -> lizard.LizardError:
    """The exception lizard-sdk raises for an HTTP answer, built by the SDK's own code."""
    raw = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(lizard.LizardError) as caught:
        lizard.errors.handle_api_error(status, raw)
    return caught.value


# Section 3 of the API notes: every status the SDK maps, and what callers get.
STATUS_KINDS: list[tuple[int, type[LizardIntegrationError]]] = [
    (400, LizardIntegrationError),
    (401, CredentialsError),
    (402, QuotaError),
    (403, CredentialsError),
    (404, SandboxGoneError),
    (408, TransientError),
    (409, SandboxStateError),
    (429, QuotaError),
    (500, TransientError),
    (501, LizardIntegrationError),
    (502, TransientError),
    (503, TransientError),
    (504, TransientError),
]


@pytest.mark.parametrize(("status", "kind"), STATUS_KINDS)
@pytest.mark.parametrize(
    "body",
    [
        {"error": f"something about {KEY}", "code": "SOME_CODE"},
        {"error": "SCREAMING_CODE", "message": f"human text with {KEY}"},
        f"not json {KEY}",
    ],
    ids=["error-shape", "code-shape", "raw"],
)
def test_every_status_maps_to_its_kind_without_the_key(
    status: int, kind: type[LizardIntegrationError], body: dict[str, Any] | str
) -> None:
    error = translate(sdk_error(status, body))
    assert type(error) is kind
    assert error.status_code == status
    assert KEY not in str(error)
    assert KEY not in repr(error)
    assert KEY not in error.message


@pytest.mark.parametrize("status", [401, 403])
def test_credentials_errors_carry_no_provider_text(status: int) -> None:
    body = {"error": "Key liz_abc belongs to bob@example.com", "code": "TRIAL_SANDBOX_SIZE"}
    error = translate(sdk_error(status, body))
    assert isinstance(error, CredentialsError)
    assert "bob" not in str(error)
    assert "liz_abc" not in str(error)
    assert str(status) in str(error)
    assert error.code == "TRIAL_SANDBOX_SIZE"  # a machine code is safe and useful


def test_free_text_codes_are_dropped() -> None:
    error = translate(sdk_error(403, {"error": "no", "code": "you are bob, key liz_123456789"}))
    assert error.code is None
    assert "bob" not in str(error)


def test_a_message_says_the_status_once() -> None:
    error = translate(sdk_error(503, {"error": "Upstream busy", "code": "BUSY"}))
    assert str(error) == "Lizard API error 503 (may be temporary): Upstream busy"


def test_quota_429_carries_retry_after_and_code() -> None:
    body = {"error": "Too many starts", "code": "SANDBOX_RATE_LIMITED", "retryAfterS": 7}
    error = translate(sdk_error(429, body))
    assert isinstance(error, QuotaError)
    assert error.retry_after == 7.0
    assert error.code == "SANDBOX_RATE_LIMITED"
    assert error.url is None
    assert "Too many starts" in str(error)


def test_quota_429_without_retry_after() -> None:
    error = translate(sdk_error(429, {"error": "limit", "code": "SANDBOX_LIMIT_REACHED"}))
    assert isinstance(error, QuotaError)
    assert error.retry_after is None


@pytest.mark.parametrize(
    ("body", "url"),
    [
        (
            {"error": "Start the trial", "status": "trial_available", "subscribeUrl": "https://s"},
            "https://s",
        ),
        (
            {"error": "Pay the invoice", "invoiceUrl": "https://i", "billingUrl": "https://b"},
            "https://i",
        ),
        ({"error": "Pay", "billingUrl": "https://b"}, "https://b"),
        ({"error": "Pay"}, None),
    ],
)
def test_payment_required_carries_the_url_to_open(body: dict[str, Any], url: str | None) -> None:
    error = translate(sdk_error(402, body))
    assert isinstance(error, QuotaError)
    assert error.url == url
    assert error.retry_after is None
    assert body["error"] in str(error)


def test_gone_names_the_sandbox() -> None:
    error = translate(sdk_error(404, {"error": "Sandbox not found"}), sandbox_id="sbx_1")
    assert isinstance(error, SandboxGoneError)
    assert error.sandbox_id == "sbx_1"
    assert "sbx_1" in str(error)


def _all_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    sub: type
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _all_subclasses(sub)
    return found


SDK_CLASS_KINDS: dict[type[lizard.LizardError], type[LizardIntegrationError]] = {
    lizard.LizardError: LizardIntegrationError,
    lizard.ConfigApplyError: LizardIntegrationError,
    lizard.AuthenticationError: CredentialsError,
    lizard.NotFoundError: SandboxGoneError,
    lizard.ConflictError: SandboxStateError,
    lizard.TimeoutError: TransientError,
    lizard.PaymentRequiredError: QuotaError,
    lizard.LimitExceededError: QuotaError,
}


def test_the_table_covers_every_sdk_exception_class() -> None:
    sdk_classes = {
        cls for cls in _all_subclasses(lizard.LizardError) if cls.__module__.startswith("lizard")
    }
    assert sdk_classes | {lizard.LizardError} == set(SDK_CLASS_KINDS)


@pytest.mark.parametrize(("sdk_class", "kind"), list(SDK_CLASS_KINDS.items()))
def test_every_sdk_class_raised_by_the_sdk_itself_is_translated(
    sdk_class: type[lizard.LizardError], kind: type[LizardIntegrationError]
) -> None:
    # Constructed the way the SDK constructs it outside handle_api_error (no status_code).
    exc = (
        sdk_class({"sideEffectFailures": [KEY]})
        if sdk_class is lizard.ConfigApplyError
        else sdk_class(f"detail {KEY}")
    )
    error = translate(exc)
    assert type(error) is kind
    assert KEY not in str(error)


def test_sdk_side_errors_keep_their_message() -> None:
    error = translate(lizard.LizardError('Project "nope" not found. Available: local.'))
    assert type(error) is LizardIntegrationError
    assert 'Project "nope" not found' in str(error)
    assert error.status_code is None


TRANSIENT_HTTPX = [
    httpx.ConnectError("connection refused"),
    httpx.ConnectTimeout("connect timeout"),
    httpx.ReadTimeout("read timeout"),
    httpx.WriteTimeout("write timeout"),
    httpx.PoolTimeout("pool timeout"),
    httpx.ReadError("connection reset"),
    httpx.WriteError("broken pipe"),
    httpx.CloseError("close failed"),
    httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
    httpx.ProxyError("proxy said no"),
]
PERMANENT_HTTPX = [
    httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."),
    httpx.LocalProtocolError("illegal header"),
    httpx.InvalidURL("Invalid URL"),
    httpx.DecodingError("bad gzip"),
    httpx.TooManyRedirects("redirect loop"),
]


@pytest.mark.parametrize("exc", TRANSIENT_HTTPX, ids=lambda e: type(e).__name__)
def test_httpx_transport_failures_are_transient(exc: Exception) -> None:
    assert type(translate(exc)) is TransientError


@pytest.mark.parametrize("exc", PERMANENT_HTTPX, ids=lambda e: type(e).__name__)
def test_httpx_errors_that_retrying_cannot_fix_are_not_transient(exc: Exception) -> None:
    error = translate(exc)
    assert type(error) is LizardIntegrationError


def test_every_httpx_error_class_is_covered() -> None:
    covered = {type(e) for e in TRANSIENT_HTTPX + PERMANENT_HTTPX}
    concrete = {
        cls
        for cls in _all_subclasses(httpx.HTTPError)
        if cls.__module__.startswith("httpx") and not cls.__subclasses__()
    }
    assert concrete - covered == {httpx.HTTPStatusError}


@pytest.mark.parametrize(
    ("status", "kind"), [(503, TransientError), (404, SandboxGoneError), (401, CredentialsError)]
)
def test_httpx_status_errors_map_by_status(status: int, kind: type[Exception]) -> None:
    request = httpx.Request("GET", "https://lizard.build/api/sandboxes/x")
    response = httpx.Response(status, request=request, text=f"body {KEY}")
    exc = httpx.HTTPStatusError("status", request=request, response=response)
    error = translate(exc)
    assert type(error) is kind
    assert error.status_code == status
    assert KEY not in str(error)


def test_integration_errors_pass_through_and_others_become_the_base() -> None:
    own = SandboxGoneError(sandbox_id="x")
    assert translate(own) is own
    other = translate(RuntimeError(f"boom {KEY}"))
    assert type(other) is LizardIntegrationError
    assert KEY not in str(other)


def test_command_errors_carry_partial_output() -> None:
    timeout = CommandTimeoutError(stdout=b"part\xff", stderr=b"err", timeout=2.5)
    assert (timeout.stdout, timeout.stderr, timeout.timeout) == (b"part\xff", b"err", 2.5)
    limit = OutputLimitError(stdout=b"a" * 10, limit=10)
    assert (limit.stdout, limit.stderr, limit.limit) == (b"a" * 10, b"", 10)
    assert isinstance(timeout, LizardIntegrationError)
    assert isinstance(limit, LizardIntegrationError)
    assert isinstance(GuestProtocolError("no final frame"), LizardIntegrationError)


# ── translated() ──────────────────────────────────────────────────────────


def test_translated_raises_from_the_sdk_exception_with_the_key_scrubbed() -> None:
    original = sdk_error(500, {"error": f"upstream said {KEY}"})
    with pytest.raises(TransientError) as caught, translated():
        raise original
    assert caught.value.__cause__ is original
    rendered = "".join(traceback.format_exception(caught.value))
    assert "upstream said" in rendered
    assert KEY not in rendered


def test_translated_cuts_the_chain_for_credentials() -> None:
    with pytest.raises(CredentialsError) as caught, translated():
        raise sdk_error(401, {"error": f"invalid key {KEY} for bob"})
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    rendered = "".join(traceback.format_exception(caught.value))
    assert "bob" not in rendered
    assert KEY not in rendered


def test_translated_leaves_other_exceptions_alone() -> None:
    with pytest.raises(KeyError), translated():
        raise KeyError("sandboxId")
    gone = SandboxGoneError()
    with pytest.raises(SandboxGoneError) as caught, translated():
        raise gone
    assert caught.value is gone


def test_translated_passthrough_keeps_the_sdk_exception() -> None:
    with pytest.raises(lizard.NotFoundError), translated(passthrough=(lizard.NotFoundError,)):
        raise lizard.NotFoundError("no such file")
    with pytest.raises(SandboxGoneError), translated(passthrough=(lizard.ConflictError,)):
        raise lizard.NotFoundError("sandbox gone")


def test_translated_names_the_sandbox() -> None:
    with pytest.raises(SandboxGoneError) as caught, translated(sandbox_id="sbx_9"):
        raise sdk_error(404, {"error": "Sandbox not found"})
    assert caught.value.sandbox_id == "sbx_9"


def test_translate_over_a_real_connection_failure() -> None:
    # Port 9 on loopback: nothing listens, so the SDK's own httpx call fails to connect.
    with pytest.raises(TransientError) as caught, translated():
        lizard.Sandbox.connect("sbx_x", api_key=KEY, api_url="http://127.0.0.1:9")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert KEY not in "".join(traceback.format_exception(caught.value))


def test_every_exception_class_of_lizard_core_is_defined_in_errors() -> None:
    import importlib
    import inspect
    import pkgutil

    import lizard_core

    elsewhere = []
    for info in pkgutil.iter_modules(lizard_core.__path__, "lizard_core."):
        if info.name == "lizard_core._guest":
            continue  # guest programs run in the sandbox; their exceptions never reach the host
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("lizard_core")
                and value.__module__ != "lizard_core.errors"
            ):
                elsewhere.append(f"{info.name}.{name}")
    assert elsewhere == []


def test_a_paused_sandbox_is_its_own_kind_of_conflict() -> None:
    paused = translate(sdk_error(409, {"error": "Sandbox is paused", "code": "SANDBOX_PAUSED"}))
    assert type(paused) is SandboxPausedError
    assert "resume" in paused.message
    refused = translate(sdk_error(409, {"error": "has a volume", "code": "FORK_VOLUME"}))
    assert type(refused) is SandboxStateError
    assert refused.code == "FORK_VOLUME"
    assert "has a volume" in refused.message
