"""The adapter's one mapping from lizard_core failures to what smolagents expects.

Contract:
- A failure the model can act on (a Python error, a timeout, a lost namespace, a refused final
  answer, a dropped connection or a lost answer, after which the step's effects are unknown, or
  a request the sandbox could not start, after which nothing of the step ran) is a
  ``StepError``: an ``AgentError``, so code that caught the 0.1.0
  package's ``AgentError`` still does. ``CodeAgent`` wraps it in ``AgentExecutionError``, which logs
  it; ``StepError`` itself does not log, so each error is printed once.
- A rate limit (HTTP 429) whose ``retry_after`` is at most :data:`RATE_LIMIT_STEP_S` is a
  ``StepError`` that says when to retry: the sandbox is fine and the run goes on.
- A sandbox that is gone (deleted, expired), credentials that are refused, an exhausted quota
  (402, or a 429 without a short ``retry_after``), or a kernel that cannot start cannot be fixed
  by the model. smolagents 1.26 turns every
  ``Exception`` raised by an executor into a step error and lets the model try again until
  ``max_steps``, so ``SandboxUnavailableError`` derives from ``BaseException`` (as
  ``KeyboardInterrupt`` does): it ends ``agent.run`` at once, with the lizard_core error as its
  ``__cause__``.
- Messages never contain the API key (lizard_core's errors are already redacted).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from smolagents.utils import AgentError

from lizard_core import GuestNotStartedError, KernelUnavailableError
from lizard_core import errors as core_errors


class StepError(AgentError):  # type: ignore[misc]  # smolagents ships no type information
    """A step failed in a way the model sees and can recover from; the run goes on."""

    def __init__(self, message: str) -> None:
        # AgentError.__init__ would log the message; CodeAgent logs the wrapping error already.
        Exception.__init__(self, message)
        self.message = message


class SandboxUnavailableError(BaseException):
    """The sandbox cannot run code any more (gone, credentials refused, quota); the run ends.

    A ``BaseException`` on purpose: an ``Exception`` would become one more step error for the model
    to retry, failing every remaining step the same way.
    """


class PackageInstallError(RuntimeError):
    """pip failed in the sandbox; ``packages`` were requested and ``output`` is pip's output."""

    def __init__(self, packages: list[str], output: str) -> None:
        super().__init__(
            f"Installing {', '.join(packages)} in the sandbox failed; pip said:\n{output.rstrip()}"
        )
        self.packages = packages
        self.output = output


# The model cannot fix these, and every later step would fail the same way. A QuotaError is
# among them unless it is a rate limit that lifts within RATE_LIMIT_STEP_S.
_FATAL = (
    core_errors.SandboxGoneError,
    core_errors.CredentialsError,
    core_errors.QuotaError,
    KernelUnavailableError,
)

RATE_LIMIT_STEP_S = 60.0
"""A 429 whose ``retry_after`` is at most this many seconds is a step error, not the run's end."""


def _unavailable(exc: BaseException, doing: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"The Lizard sandbox can no longer run code ({type(exc).__name__} while {doing}): "
        f"{str(exc).rstrip('.')}. The agent run stops here."
    )


@contextmanager
def mapped_errors(doing: str) -> Iterator[None]:
    """Run a block that talks to the sandbox; re-raise lizard_core errors as smolagents expects.

    ``doing`` completes "...failed while {doing}" in messages, e.g. "running the step".
    """
    try:
        yield
    except core_errors.QuotaError as exc:
        wait = exc.retry_after
        if wait is None or wait > RATE_LIMIT_STEP_S:
            raise _unavailable(exc, doing) from exc
        # A rate limit that lifts soon: the sandbox is fine and the refused request did not
        # run; the model's next step comes later than that anyway.
        raise StepError(
            f"Lizard refused a request while {doing}: rate limited (HTTP 429); retry after "
            f"{wait:g} s. A refused request did not run; if the step's code was already sent, "
            "check the state you need before running it again."
        ) from exc
    except _FATAL as exc:
        raise _unavailable(exc, doing) from exc
    except GuestNotStartedError as exc:
        raise StepError(
            f"The sandbox could not start the code while {doing}, so nothing of it ran ({exc})."
        ) from exc
    except (core_errors.TransientError, core_errors.GuestProtocolError) as exc:
        raise StepError(
            f"The connection to the sandbox failed while {doing} ({exc}). Whether the code ran "
            "is unknown: check the state you need before running it again."
        ) from exc
    except core_errors.LizardIntegrationError as exc:
        raise StepError(f"The sandbox failed while {doing}: {type(exc).__name__}: {exc}") from exc
