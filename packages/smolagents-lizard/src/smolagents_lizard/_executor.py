"""``LizardExecutor``: smolagents' ``RemotePythonExecutor`` on the lizard_core kernel.

What this module maps, and what it leaves to the base class:

- Each step is one ``Kernel.execute`` (one streaming exec request) into a persistent namespace in
  the sandbox; no Jupyter is needed, so the ``base`` template works as well as ``interpreter``.
- The final-answer patch and the serialization of tools and variables are smolagents' own.
  ``send_tools`` refuses managed agents, installs only the requirements the sandbox lacks (none for
  ``final_answer``: see ``_final_answer``), and the executor remembers what it sent so that a
  restarted kernel gets it back.
- Construction validates every option and makes no request; the sandbox is created at the first
  operation (``send_variables``, ``send_tools``, a step), or attached to with ``sandbox_id``.
- A step's outcome, as ``CodeAgent`` sees it: a ``CodeOutput`` (final expression, capped logs), a
  final answer (safe JSON only), or a ``StepError`` carrying the output printed before the error,
  the exception name and an ANSI-free traceback. A timeout interrupts the cell and says so; a cell
  that will not stop gets the kernel restarted, tools and variables re-sent, and the model is told
  its state was lost. A kernel found dead or replaced while checking or installing packages is
  handled the same way, and the model is told on the next step; so is a step stopped with
  Ctrl-C whose cell would not stop (the next step restarts the kernel after the cell's grace). A
  sandbox that is gone ends the run (``SandboxUnavailableError``).
- ``cleanup()`` (and its alias ``delete()``, as the built-in executors have) deletes a sandbox
  the executor created (an attached one is left running; ``keep`` chooses otherwise); so does
  dropping the executor without it, or the process exiting, as a last resort. When a deletion
  fails the handle is kept so ``cleanup()`` can be retried; while another exception is
  propagating (the one that ended the run), the failure is logged and noted on that exception
  instead of replacing it. Otherwise it is raised, unlike the built-in executors, which log it
  and go on: a sandbox that could not be deleted keeps running (and billing) until its
  lifetime ends, and a caller who asked for the deletion must learn that it did not happen.
- Sessions across runs: ``keep=True`` leaves the sandbox at cleanup, ``pause()`` stops its
  billing (files kept, processes ended) and a later ``LizardExecutor(sandbox_id=...)`` resumes
  it; the first step after a fresh boot runs in a fresh kernel, tools and variables defined
  again, and the model is told. ``fork(n)`` makes n executors on copies of the sandbox (the
  kernel's state carries over where the platform keeps memory; otherwise the same notice).
  ``upload`` and ``download`` stream one file each way (``lizard_core.transfers``).
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from rich.text import Text
from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.serialization import SafeSerializer
from smolagents.tools import Tool, get_tools_definition_code
from smolagents.utils import BASE_BUILTIN_MODULES

from lizard_core import PackageCheck, missing_requirements, requirements
from lizard_core.checks import package_version
from lizard_core.config import SandboxConfig, Size
from lizard_core.files import SandboxFiles
from lizard_core.forks import fork_sessions
from lizard_core.kernel import DEFAULT_MAX_OUTPUT_BYTES, ExecutionResult, Kernel
from lizard_core.session import Session
from lizard_core.transfers import download_file, upload_file
from smolagents_lizard._errors import PackageInstallError, StepError, mapped_errors
from smolagents_lizard._final_answer import (
    FINAL_ANSWER_EXCEPTION,
    LAZY_MODULES,
    OPTIONAL_MODULES,
    FinalAnswerError,
    decode_final_answer,
    drop_optional_imports,
    hoisted_imports,
)
from smolagents_lizard._live_log import LiveLog
from smolagents_lizard._outputs import (
    cap_logs,
    is_uninformative,
    last_image,
    strip_ansi,
    value_from_bundle,
)
from smolagents_lizard._tool_code import patch_final_answer, tool_dict

__all__ = ["LizardExecutor"]

_log = logging.getLogger(__name__)

INTEGRATION: Final = "smolagents"
MAX_STEP_TIMEOUT_MS: Final = 3_600_000
DEFAULT_INSTALL_TIMEOUT_MS: Final = 600_000
SETUP_TIMEOUT_S: Final = 60.0
"""Floor of the timeout for the cells that define tools and variables (the lifetime caps it)."""

_MANAGED_AGENTS_REFUSED: Final = (
    "LizardExecutor does not support managed agents ({names}): a managed agent needs the host "
    "(its model and memory), while the code that would call it runs in the sandbox. Run the "
    "managed agents with a local executor, or give this agent tools instead."
)
_STATE_LOST: Final = (
    "The Python kernel in the sandbox was restarted, so every variable, import and function "
    "defined in earlier steps is gone. Tools and the agent's initial variables are defined "
    "again; recompute anything else you need."
)


class LizardExecutor(RemotePythonExecutor):  # type: ignore[misc]  # smolagents is untyped
    """Run a ``CodeAgent``'s Python in a Lizard sandbox: ``CodeAgent(executor=LizardExecutor())``.

    Positional arguments and the first six keywords are those of 0.1.0: ``additional_imports``
    (packages to install in the sandbox, missing ones only), ``logger`` (a smolagents
    ``AgentLogger``), ``project_id``, ``api_key``, ``api_url`` (default: ``LIZARD_PROJECT_ID``,
    ``LIZARD_API_KEY``, ``LIZARD_API_URL``), ``size``, ``lifetime_ms`` (sandbox lifetime) and
    ``command_timeout_ms`` (per step; the cells that define tools and variables get at least
    :data:`SETUP_TIMEOUT_S`, since they run the framework's code, not the model's).

    Newer keywords: ``template`` (default ``interpreter``; ``base`` works too), ``region``,
    ``envs`` (environment variables for the sandbox, e.g. secrets that tools need; nothing from
    the host is copied otherwise), ``internet_access`` and ``allowed_hosts``, ``sandbox_id``
    (attach to a running sandbox and leave it running at cleanup), ``keep_alive`` (on by
    default: extend the lifetime while steps run, also during one step longer than the
    lifetime, so a long agent keeps its sandbox and an idle one still expires),
    ``install_timeout_ms`` (pip, separate from the step timeout; default 10 minutes, or the
    lifetime if shorter), ``max_print_outputs_length`` (log cap per step, characters),
    ``max_final_answer_bytes`` and ``live_logs_after`` (seconds before a running step's output
    is shown live; None: never).

    Across runs: ``keep`` (None, the default: ``cleanup()`` deletes a sandbox this executor
    created and leaves an attached one; True: it leaves either, for a later
    ``LizardExecutor(sandbox_id=executor.sandbox_id)``; False: it deletes either) and
    ``idle_pause_s`` (pause the sandbox after that many idle seconds; the next step resumes it).

    With ``keep_alive=False`` (and without ``sandbox_id``), a step or install timeout longer than
    ``lifetime_ms`` is a ValueError: the sandbox would expire before such a step could end.

    Use it as a context manager, or call ``cleanup()`` (``CodeAgent`` does on exit).
    """

    def __init__(
        self,
        additional_imports: Sequence[str] | None = None,
        logger: AgentLogger | None = None,
        *,
        project_id: str | None = None,
        api_key: str | None = None,
        api_url: str | None = None,
        size: str | None = "small",
        lifetime_ms: int = 900_000,
        command_timeout_ms: int = 60_000,
        template: str = "interpreter",
        region: str | None = None,
        envs: Mapping[str, str] | None = None,
        internet_access: bool = True,
        allowed_hosts: Sequence[str] | None = None,
        sandbox_id: str | None = None,
        keep_alive: bool = True,
        install_timeout_ms: int | None = None,
        max_print_outputs_length: int = 50_000,
        max_final_answer_bytes: int = 16_000_000,
        live_logs_after: float | None = 2.0,
        allow_pickle: bool = False,
        keep: bool | None = None,
        idle_pause_s: float | None = None,
    ) -> None:
        if allow_pickle is not False:
            raise ValueError(
                "LizardExecutor never unpickles sandbox output (it would run sandbox code on the "
                "host); return plain data from final_answer instead of passing allow_pickle."
            )
        if isinstance(additional_imports, str):
            raise TypeError("additional_imports must be a list of package names, not a str")
        imports = requirements(additional_imports or [])
        _check_ms("command_timeout_ms", command_timeout_ms, MAX_STEP_TIMEOUT_MS)
        if install_timeout_ms is not None:
            _check_ms("install_timeout_ms", install_timeout_ms, MAX_STEP_TIMEOUT_MS)
        _check_positive_int("max_print_outputs_length", max_print_outputs_length)
        _check_positive_int("max_final_answer_bytes", max_final_answer_bytes)
        if live_logs_after is not None:
            if isinstance(live_logs_after, bool) or not isinstance(live_logs_after, int | float):
                raise TypeError("live_logs_after must be a number of seconds, or None")
            if not live_logs_after >= 0:  # also refuses NaN
                raise ValueError("live_logs_after must be >= 0 seconds, or None")
        if keep is not None and type(keep) is not bool:
            raise TypeError("keep must be a bool or None")
        if logger is not None and not callable(getattr(logger, "log", None)):
            raise TypeError("logger must be a smolagents AgentLogger")
        config = SandboxConfig.from_env(
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=cast("Size | None", size),  # validated by SandboxConfig
            lifetime_ms=lifetime_ms,
            region=region,
            envs=envs,
            internet_access=internet_access,
            allowed_hosts=allowed_hosts,
            integration=INTEGRATION,
            integration_version=package_version("smolagents-lizard"),
        )
        if install_timeout_ms is None:
            install_timeout_ms = min(DEFAULT_INSTALL_TIMEOUT_MS, lifetime_ms)
        if not keep_alive and sandbox_id is None:
            _check_covered("command_timeout_ms", command_timeout_ms, lifetime_ms)
            _check_covered("install_timeout_ms", install_timeout_ms, lifetime_ms)
        session = Session(
            config, sandbox_id=sandbox_id, keep_alive=keep_alive, idle_pause_s=idle_pause_s
        )
        super().__init__(imports, logger or AgentLogger(), allow_pickle=False)
        self._session = session
        # The kernel keeps at least 4x our cap (bytes against characters), so our head-and-tail
        # cut applies first; beyond the kernel's cap the rest is dropped in the sandbox, and
        # the kernel's own marker says so.
        self._max_output_bytes = max(4 * max_print_outputs_length, DEFAULT_MAX_OUTPUT_BYTES)
        self._kernel = Kernel(session, max_output_bytes=self._max_output_bytes)
        self._attached = sandbox_id is not None
        # What cleanup() does: delete the sandbox, or leave it for a later run.
        self._keep = keep
        self._destroys = keep is False or (keep is None and not self._attached)
        self._step_timeout = command_timeout_ms / 1000
        # Setup cells (tools, variables) are the framework's code, not the model's: a step
        # timeout tuned for model code (1 s, say) must not fail the run while imports load.
        self._setup_timeout = max(self._step_timeout, min(SETUP_TIMEOUT_S, lifetime_ms / 1000))
        self._install_timeout = install_timeout_ms / 1000
        self._max_logs = max_print_outputs_length
        self._max_answer = max_final_answer_bytes
        self._live_after = None if live_logs_after is None else float(live_logs_after)
        self._pending_imports = imports
        self._tools_code: str | None = None
        self._variables_code: str | None = None
        # A loss found outside a step (by install_packages), told to the model by the next step.
        self._lost_notice: str | None = None
        self._closed = False
        # A sandbox nobody can reach any more (the executor was dropped without cleanup(), or
        # the process is exiting) is deleted rather than left running until its lifetime ends.
        self._finalizer = weakref.finalize(self, _destroy, session) if self._destroys else None

    # ── public surface ───────────────────────────────────────────────────

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it exists (or the id given to attach to), else None."""
        return self._session.sandbox_id

    @property
    def sandbox(self) -> Any:
        """Deprecated: the lizard-sdk sandbox object (0.1.0 exposed its ``CodeSandbox`` here).

        None once the executor is closed; otherwise the sandbox, created on first access. Use
        :attr:`sandbox_id`; this attribute goes away in a later release.
        """
        warnings.warn(
            "LizardExecutor.sandbox is deprecated; use LizardExecutor.sandbox_id",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._closed:
            return None
        with mapped_errors("opening the sandbox"):
            return self._session.sandbox()

    # Host-side operations (not a model's step): they raise lizard_core's errors
    # (``lizard_core.errors``) and builtin ``OSError``s as they are.

    def pause(self) -> None:
        """Pause the sandbox now: files kept, processes (the kernel) ended, compute not billed.

        The next step resumes it, in a fresh kernel (the model is told). With ``keep=True``,
        ``cleanup()`` then leaves it paused for a later ``LizardExecutor(sandbox_id=...)``.
        """
        self._check_open()
        self._session.pause()

    def resume(self) -> None:
        """Resume a paused sandbox now rather than at the next step (which would do it)."""
        self._check_open()
        self._session.resume()

    def upload(self, local: str | os.PathLike[str], remote: str) -> int:
        """Copy the local file ``local`` to the absolute path ``remote`` in the sandbox.

        Streamed in chunks (host memory stays bounded whatever the size); parents are created
        and an existing file replaced atomically. Returns the number of bytes copied.
        """
        self._check_open()
        return upload_file(SandboxFiles(self._session), local, remote)

    def download(
        self, remote: str, local: str | os.PathLike[str], *, max_bytes: int | None = None
    ) -> int:
        """Copy the sandbox file ``remote`` to the local path ``local``; return the byte count.

        Streamed; ``local`` is replaced only once every byte arrived (a failure leaves it as it
        was). A file larger than ``max_bytes`` is a ValueError.
        """
        self._check_open()
        return download_file(SandboxFiles(self._session), remote, local, max_bytes=max_bytes)

    def fork(self, n: int) -> list[LizardExecutor]:
        """``n`` executors on copies of this sandbox (files, and memory where kept), all or none.

        Each continues from this kernel's variables where the platform copies memory; where it
        does not, its kernel starts fresh with the tools and variables defined again, and its
        first step tells the model. If any copy fails to start, all are deleted. Each copy is a
        sandbox of its own, billed as one: ``cleanup()`` each (or use them as context
        managers); ``keep`` applies to them too.
        """
        self._check_open()
        forks = [self._adopt(session) for session in fork_sessions(self._session, n)]
        try:
            for forked in forks:
                # One cell finds whether the kernel came along; if not, the fork gets the tools
                # and variables before its first step, and that step tells the model.
                result, _ = forked._execute(
                    "pass", live=False, doing="starting the fork", timeout=self._setup_timeout
                )
                forked._after_loss(result)
        except BaseException:
            for forked in forks:
                forked._session.destroy()  # a copy nobody holds must not keep billing
            raise
        return forks

    def _adopt(self, session: Session) -> LizardExecutor:
        """This executor's settings, tools and variables on a forked session."""
        forked = copy.copy(self)
        forked._session = session
        forked._kernel = Kernel(session, max_output_bytes=self._max_output_bytes)
        forked._attached = False
        forked._destroys = self._keep is not True  # a fork is a sandbox this executor made
        forked.installed_packages = list(self.installed_packages)
        forked._pending_imports = list(self._pending_imports)
        forked._lost_notice = self._lost_notice
        forked._finalizer = (
            weakref.finalize(forked, _destroy, session) if forked._destroys else None
        )
        return forked

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"LizardExecutor(sandbox_id={self.sandbox_id!r}, {state})"

    def __enter__(self) -> LizardExecutor:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        self.cleanup()

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        """Run one step's code in the sandbox; see the module docstring for the outcomes."""
        self._check_open()
        self._install_pending()
        result, logs = self._execute(code, live=True, doing="running the step")
        return self._outcome(result, logs)

    def send_tools(self, tools: dict[str, Any]) -> None:
        """Define the agent's tools in the sandbox; refuse managed agents."""
        managed = sorted(name for name, tool in tools.items() if not isinstance(tool, Tool))
        if managed:
            raise ValueError(_MANAGED_AGENTS_REFUSED.format(names=", ".join(managed)))
        self._check_open()
        final_answer = tools.get("final_answer")
        # Patch once: patching an already patched tool makes its forward call itself.
        if final_answer is not None and not hasattr(final_answer, "_forward"):
            patch_final_answer(self, final_answer)
        serialized = {name: tool_dict(tool) for name, tool in tools.items()}
        # The tools serialized (so a bad one has raised, with nothing created): the sandbox is
        # created while smolagents writes their definitions again below.
        self._session.open_ahead()
        needs = {name: set(d["requirements"]) - {"smolagents"} for name, d in serialized.items()}
        # What only final_answer needs is optional there (see drop_optional_imports).
        others = set().union(*(reqs for name, reqs in needs.items() if name != "final_answer"))
        optional = (OPTIONAL_MODULES & needs.get("final_answer", set())) - others
        if "final_answer" in serialized:
            hoisted = {name: hoisted_imports(d["code"]) for name, d in serialized.items()}
            kept = set(BASE_BUILTIN_MODULES).union(
                *(mods for name, mods in hoisted.items() if name != "final_answer")
            )
            optional |= (LAZY_MODULES & hoisted["final_answer"]) - kept
        wanted = requirements(sorted(set().union(*needs.values()) - optional))
        # One check (and at most one pip run) for the constructor's packages and the tools'.
        self._install_pending([req for req in wanted if req not in self.installed_packages])
        code = drop_optional_imports(get_tools_definition_code(tools), optional)
        self._run_setup(code, "defining the tools")
        self._tools_code = code

    def send_variables(self, variables: dict[str, Any]) -> None:
        """Define ``variables`` in the sandbox (safe JSON serialization only, as smolagents)."""
        if not variables:
            return
        self._check_open()
        # Serialized before any request: an unsupported type fails here, with nothing sent.
        serialized = SafeSerializer.dumps(variables, allow_pickle=False)
        code = (
            f"{SafeSerializer.get_deserializer_code(False)}\n"
            f"vars_dict = _deserialize({serialized!r})\n"
            "locals().update(vars_dict)\n"
        )
        self._install_pending()
        self._run_setup(code, "defining the variables")
        self._variables_code = code

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """Install the packages the sandbox lacks with pip; return the requirements handled.

        Bare names already importable in the sandbox are skipped; pinned requirements always go
        to pip. Runs under ``install_timeout_ms``, not the step timeout. Raises
        ``PackageInstallError`` with pip's output when pip fails.
        """
        self._check_open()
        reqs = requirements(additional_imports)
        if not reqs:
            return []
        with mapped_errors("checking installed packages"):
            check = missing_requirements(self._kernel, reqs, timeout=self._step_timeout)
        self._after_loss(check)
        missing = list(check.missing)
        if missing:
            self.logger.log(
                f"Installing {', '.join(missing)} in the sandbox...", level=LogLevel.INFO
            )
            with mapped_errors("installing packages"):
                outcome = self._kernel.install(missing, timeout=self._install_timeout)
            self._after_loss(outcome)
            pip_output = strip_ansi(outcome.stdout + outcome.stderr)
            if outcome.error is not None:
                detail = pip_output if pip_output.strip() else outcome.error.traceback
                raise PackageInstallError(missing, _join(detail, outcome.error.message))
            self.logger.log(Text(cap_logs(pip_output, self._max_logs)), level=LogLevel.DEBUG)
        return reqs

    def cleanup(self) -> None:
        """Delete the sandbox, or leave it as ``keep`` says; safe to call more than once.

        If deleting fails, the executor keeps the sandbox's handle so that ``cleanup()`` can be
        called again. While another exception is propagating, the failure is logged and added
        as a note to that exception rather than raised over it.
        """
        if self._closed:
            return
        ending = sys.exc_info()[1]
        try:
            if not self._destroys:
                self._session.close()  # no request: the sandbox (paused or not) stays
            else:
                self._session.destroy()
                if self._finalizer is not None:
                    self._finalizer.detach()
        except Exception as exc:
            if ending is None:
                raise
            note = f"smolagents-lizard: deleting sandbox {self.sandbox_id} failed: {exc}"
            self.logger.log_error(note + " (call cleanup() again to retry)")
            ending.add_note(note)
            return
        self._closed = True

    def delete(self) -> None:
        """Alias of :meth:`cleanup`, as smolagents' built-in executors have it."""
        self.cleanup()

    # ── internals ────────────────────────────────────────────────────────

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("The Lizard executor is closed; create a new LizardExecutor.")

    def _install_pending(self, extra: Sequence[str] = ()) -> None:
        """Install ``additional_imports`` (and ``extra``) before the first code runs."""
        pending = [
            *self._pending_imports,
            *(req for req in extra if req not in self._pending_imports),
        ]
        if not pending:
            return
        self.installed_packages += self.install_packages(pending)
        self._pending_imports = []

    def _execute(
        self, code: str, *, live: bool, doing: str, timeout: float | None = None
    ) -> tuple[ExecutionResult, str]:
        """One request: run ``code`` under ``timeout`` (default: the step's); return its logs too.

        The logs are both streams in the order they arrived, ANSI-free, not yet capped.
        """
        chunks: list[str] = []
        after = self._live_after if live else None
        with LiveLog(self.logger, after=after, limit=self._max_logs) as live_log:

            def on_output(stream: str, text: str) -> None:
                chunks.append(text)
                live_log.write(text)

            with mapped_errors(doing):
                result = self._kernel.execute(
                    code, timeout=timeout or self._step_timeout, on_output=on_output
                )
        return result, strip_ansi("".join(chunks))

    def _run_setup(self, code: str, doing: str) -> None:
        """Run a setup cell (tools, variables); an error in it is raised, never hidden."""
        result, logs = self._execute(code, live=False, doing=doing, timeout=self._setup_timeout)
        if result.state_lost:
            # Found at a run's start (send_variables, then send_tools): this cell and the next
            # define what the run needs in the fresh kernel; the model is told on its first step.
            self._lost_notice = _join(result.notice or "", _STATE_LOST)
        try:
            output = self._outcome(result, logs, restore=False, timeout=self._setup_timeout)
        except StepError as exc:
            raise StepError(f"{doing.capitalize()} in the sandbox failed:\n{exc.message}") from exc
        if output.logs:
            self.logger.log(Text(output.logs), level=LogLevel.INFO)

    def _restore(self) -> None:
        """Give a fresh kernel the tools and variables the agent sent to the old one."""
        if self._tools_code is not None:
            self._run_setup(self._tools_code, "defining the tools again")
        if self._variables_code is not None:
            self._run_setup(self._variables_code, "defining the variables again")

    def _after_loss(self, result: ExecutionResult | PackageCheck) -> None:
        """After a loss found outside a step: restore, and keep the notice for the next step."""
        if result.state_lost:
            self._lost_notice = _join(result.notice or "", _STATE_LOST)
            self._restore()

    def _outcome(
        self,
        result: ExecutionResult,
        logs: str,
        *,
        restore: bool = True,
        timeout: float | None = None,
    ) -> CodeOutput:
        logs = cap_logs(logs, self._max_logs)
        # For error messages: the output printed before the error, labelled as smolagents does.
        printed = f"Execution logs:\n{logs}" if logs.strip() else ""
        notice = ""
        if result.state_lost:
            if restore:
                self._restore()
            notice = _join(result.notice or "", _STATE_LOST)
        if restore:  # a step: it also tells a loss install_packages found
            notice, self._lost_notice = notice or self._lost_notice or "", None
        error = result.error
        if error is not None and error.name == FINAL_ANSWER_EXCEPTION and not result.timed_out:
            try:
                answer = decode_final_answer(error.message, max_bytes=self._max_answer)
            except FinalAnswerError as exc:
                raise StepError(_join(printed, f"{type(exc).__name__}: {exc}", notice)) from exc
            return CodeOutput(
                output=answer, logs=_join(notice, logs) if notice else logs, is_final_answer=True
            )
        if result.timed_out:
            kept = "" if notice else " Variables from earlier steps are kept."
            raise StepError(
                _join(
                    printed,
                    f"TimeoutError: the code ran longer than the {timeout or self._step_timeout:g}"
                    f" s step timeout and was interrupted.{kept} Make it faster, or split the "
                    "work into smaller steps.",
                    notice,
                )
            )
        if error is not None:
            trace = strip_ansi(error.traceback).rstrip()
            headline = f"{error.name}: {error.message}" if error.message else error.name
            if not trace.endswith(headline):
                trace = _join(trace, headline)
            raise StepError(_join(printed, "Executing code yielded an error:", trace, notice))
        main = result.main_result
        output = value_from_bundle(main.data) if main is not None else None
        if output is None or (isinstance(output, str) and is_uninformative(output)):
            output = last_image([r.data for r in result.results if not r.is_main_result]) or output
        return CodeOutput(
            output=output, logs=_join(notice, logs) if notice else logs, is_final_answer=False
        )


def _destroy(session: Session) -> None:
    """Delete an unreachable executor's sandbox; best effort (it may run at interpreter exit)."""
    try:
        session.destroy()
    except Exception as exc:
        _log.warning("could not delete sandbox %s: %s", session.sandbox_id, exc)


def _join(*parts: str) -> str:
    return "\n".join(part.rstrip("\n") for part in parts if part)


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {value}")


def _check_covered(name: str, value: int, lifetime_ms: int) -> None:
    # Without keep-alive the sandbox expires lifetime_ms after its create, whatever runs.
    if value > lifetime_ms:
        raise ValueError(
            f"{name} ({value} ms) is longer than lifetime_ms ({lifetime_ms} ms): the sandbox "
            "would expire before such a step could end. Raise lifetime_ms, lower the timeout, "
            "or leave keep_alive on (the default: it extends the lifetime while a step runs)."
        )


def _check_ms(name: str, value: object, maximum: int) -> None:
    _check_positive_int(name, value)
    assert isinstance(value, int)
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum} ms; got {value}")
