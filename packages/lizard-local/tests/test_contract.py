"""The adapter contract, proven both ways.

A minimal reference adapter on lizard_core (a shell tool, in a blocking and an async flavour)
passes every rule; adapters broken in one way each (the key in a command's environment or in a
file, the key in an error, the wrong error type, I/O in the constructor, a cleanup that keeps
the sandbox, work that survives cancellation) fail the rule that covers it.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from lizard_core import errors as core
from lizard_core.commands import CommandResult, arun_command, run_command
from lizard_core.config import SandboxConfig
from lizard_core.session import Session
from lizard_local import LocalServer, contract
from lizard_local.contract import AdapterContract, ExpectedErrors

CONTRACT_FAILED = (AssertionError, pytest.fail.Exception)


class Unavailable(Exception):
    """The reference framework's "this sandbox cannot be used any more"."""


class Retryable(Exception):
    """The reference framework's "this failed, try again"."""


@contextmanager
def mapped() -> Iterator[None]:
    try:
        yield
    except (core.SandboxGoneError, core.CredentialsError, core.QuotaError) as error:
        raise Unavailable(str(error)) from error
    except core.LizardIntegrationError as error:
        raise Retryable(str(error)) from error


class ReferenceShell:
    """The smallest adapter: run an argv in a sandbox through lizard_core."""

    def __init__(self, **settings: Any) -> None:
        config = SandboxConfig.from_env(
            **settings, lifetime_ms=300_000, integration="contract-reference"
        )
        self.session = Session(config)

    def run(self, argv: Sequence[str]) -> CommandResult:
        with mapped():
            return run_command(self.session, argv)

    async def arun(self, argv: Sequence[str]) -> CommandResult:
        with mapped():
            return await arun_command(self.session, argv)

    def close(self) -> None:
        with mapped():
            self.session.destroy()

    async def aclose(self) -> None:
        with mapped():
            await self.session.adestroy()


def run_python(shell: ReferenceShell, code: str) -> CommandResult:
    return shell.run(["python3", "-c", code])


async def arun_python(shell: ReferenceShell, code: str) -> CommandResult:
    return await shell.arun(["python3", "-c", code])


def close(shell: ReferenceShell) -> None:
    shell.close()


async def aclose(shell: ReferenceShell) -> None:
    await shell.aclose()


EXPECTED = ExpectedErrors(
    sandbox_gone=Unavailable, credentials_rejected=Unavailable, transient=Retryable
)


class TestBlockingReferenceAdapter(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return ReferenceShell

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return close

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return EXPECTED


class TestAsyncReferenceAdapter(TestBlockingReferenceAdapter):
    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return arun_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return aclose


# ── broken adapters fail the rule that covers them ──────────────────────────


@pytest.fixture
def sandboxes_killed(lizard_local: LocalServer) -> Iterator[None]:
    """A broken adapter leaves its sandbox behind: kill what the test created."""
    before = set(lizard_local.sandboxes())
    yield
    for sandbox_id in set(lizard_local.sandboxes()) - before:
        lizard_local.expire(sandbox_id)


RULES = TestBlockingReferenceAdapter()


def kit(
    make: Callable[..., Any],
    run: Callable[[Any, str], object] = run_python,
    cleanup: Callable[[Any], object] = close,
) -> contract._AdapterKit:
    """The fixtures a rule would get for an adapter built by ``make``."""
    operate = contract.quick_operation(run_python)
    return contract._AdapterKit(make, run, operate, cleanup, EXPECTED, contract.EXEC_ROUTE)


class KeyInCommandEnvironment(ReferenceShell):
    def run(self, argv: Sequence[str]) -> CommandResult:
        key = self.session.config.api_key.reveal()
        return run_command(self.session, argv, env={"LEAKED": key})


class KeyInFile(ReferenceShell):
    def run(self, argv: Sequence[str]) -> CommandResult:
        # base64 in argv (a short-lived process), the raw key in a file that stays.
        encoded = base64.b64encode(self.session.config.api_key.reveal().encode()).decode()
        script = 'printf %s "$1" | base64 -d > "$HOME/.lizard-leak"'
        run_command(self.session, ["sh", "-c", script, "sh", encoded])
        return super().run(argv)


def leaky_run_python(shell: ReferenceShell, code: str) -> CommandResult:
    return shell.run(["python3", "-c", code])


@pytest.mark.usefixtures("sandboxes_killed")
@pytest.mark.parametrize("adapter", [KeyInCommandEnvironment, KeyInFile])
def test_a_key_in_the_sandbox_fails_the_credentials_rule(
    lizard_local: LocalServer,
    adapter: type[ReferenceShell],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(CONTRACT_FAILED, match="the API key"):
        RULES.test_credentials_never_reach_the_sandbox(
            lizard_local, kit(adapter, leaky_run_python), monkeypatch, caplog
        )


class KeyInErrors(ReferenceShell):
    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            return run_command(self.session, argv)
        except core.SandboxGoneError as error:
            key = self.session.config.api_key.reveal()
            raise Unavailable(f"sandbox gone (key {key})") from error


class WrongErrorType(ReferenceShell):
    def run(self, argv: Sequence[str]) -> CommandResult:
        return run_command(self.session, argv)  # lizard_core's errors, unmapped


@pytest.mark.usefixtures("sandboxes_killed")
def test_a_key_in_an_error_fails_the_killed_sandbox_rule(lizard_local: LocalServer) -> None:
    with pytest.raises(CONTRACT_FAILED, match="shows the API key"):
        RULES.test_a_killed_sandbox_raises_the_frameworks_error_and_is_not_replaced(
            lizard_local, kit(KeyInErrors)
        )


@pytest.mark.usefixtures("sandboxes_killed")
def test_the_wrong_error_type_fails_the_killed_sandbox_rule(lizard_local: LocalServer) -> None:
    with pytest.raises(core.SandboxGoneError):
        RULES.test_a_killed_sandbox_raises_the_frameworks_error_and_is_not_replaced(
            lizard_local, kit(WrongErrorType)
        )


class EagerConstructor(ReferenceShell):
    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.session.sandbox()


@pytest.mark.usefixtures("sandboxes_killed")
def test_io_in_the_constructor_fails_the_construction_rule(lizard_local: LocalServer) -> None:
    lizard_local.reset_counters()
    with pytest.raises(CONTRACT_FAILED, match="made requests"):
        RULES.test_construction_makes_no_request(lizard_local, EagerConstructor)


def close_without_destroying(shell: ReferenceShell) -> None:
    shell.session.close()


@pytest.mark.usefixtures("sandboxes_killed")
def test_a_cleanup_that_keeps_the_sandbox_fails_the_cleanup_rule(
    lizard_local: LocalServer,
) -> None:
    with pytest.raises(CONTRACT_FAILED, match="left the sandbox alive"):
        RULES.test_cleanup_destroys_the_sandbox_and_everything_in_it(
            lizard_local, kit(ReferenceShell, cleanup=close_without_destroying)
        )


async def detached_run_python(shell: ReferenceShell, code: str) -> CommandResult:
    # setsid -w: the work runs in a session of its own, out of reach of the cancellation.
    return await shell.arun(["setsid", "-w", "python3", "-c", code])


@pytest.mark.usefixtures("sandboxes_killed")
def test_work_that_survives_cancellation_fails_the_cancellation_rule(
    lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contract, "STOP_TIMEOUT_S", 3.0)
    with pytest.raises(CONTRACT_FAILED, match="still running"):
        RULES.test_cancellation_stops_the_work_and_leaves_the_adapter_usable(
            lizard_local, kit(ReferenceShell, detached_run_python)
        )


# ── the pieces ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("before", [b"", b"x", b"xy", b'{"k": "', b"abcd"])
def test_needles_find_a_key_in_base64_at_every_alignment(before: bytes) -> None:
    key = "lzl_" + secrets.token_hex(16)
    encoded = base64.b64encode(before + key.encode() + b'"}')
    assert contract._leaked(encoded, {"key": contract._needles(key)}) == ["key"]
    urlsafe = base64.urlsafe_b64encode(before + key.encode())
    assert contract._leaked(urlsafe, {"key": contract._needles(key)}) == ["key"]


def test_needles_do_not_match_another_key() -> None:
    key, other = ("lzl_" + secrets.token_hex(16) for _ in range(2))
    text = (other + base64.b64encode(other.encode()).decode()).encode()
    assert contract._leaked(text, {"key": contract._needles(key)}) == []


def test_needles_find_a_key_cut_short() -> None:
    key = "lzl_" + secrets.token_hex(16)
    assert contract._leaked(f"key …{key[-20:]}".encode(), {"key": contract._needles(key)})


def test_exception_text_covers_the_chain_and_notes() -> None:
    try:
        try:
            raise ValueError("inner detail")
        except ValueError as inner:
            error = RuntimeError("outer")
            error.add_note("a note")
            raise error from inner
    except RuntimeError as caught:
        text = contract._exception_text(caught)
    assert "inner detail" in text
    assert "a note" in text
    assert "outer" in text


def test_shown_blanks_every_secret() -> None:
    key = "lzl_" + secrets.token_hex(16)
    shown = contract._shown(f"python3\0-c\0{key}".encode(), {"key": contract._needles(key)})
    assert key not in shown
    assert shown == "python3 -c <secret>"


def test_an_opt_out_needs_a_reason() -> None:
    class NoReason(TestBlockingReferenceAdapter):
        skip_cancellation = " "

    with pytest.raises(TypeError, match="reason"):
        NoReason()._opt_out("skip_cancellation")

    class WithReason(TestBlockingReferenceAdapter):
        skip_cancellation = "the framework cannot cancel a step"

    with pytest.raises(pytest.skip.Exception, match="cannot cancel a step"):
        WithReason()._opt_out("skip_cancellation")


class Replacing(ReferenceShell):
    """Replaces a sandbox that is gone with a new one, as a long-lived executor may."""

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            return super().run(argv)
        except Unavailable:
            self.session = Session(self.session.config)
            return super().run(argv)


class TestReplacingReferenceAdapter(TestBlockingReferenceAdapter):
    replaces_gone_sandbox = "the reference of an adapter that replaces an expired sandbox"

    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return Replacing


@pytest.mark.usefixtures("sandboxes_killed")
def test_an_adapter_that_claims_to_replace_but_raises_fails_the_rule(
    lizard_local: LocalServer,
) -> None:
    with pytest.raises(Unavailable):
        TestReplacingReferenceAdapter().test_a_killed_sandbox_raises_the_frameworks_error_and_is_not_replaced(
            lizard_local, kit(ReferenceShell)
        )
