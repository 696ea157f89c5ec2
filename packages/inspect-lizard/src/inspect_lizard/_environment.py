"""``LizardSandboxEnvironment``: Inspect's ``SandboxEnvironment`` on ``lizard_core``.

Contract (Inspect's own ``self_check`` suite and ``tests/`` prove it against lizard-local):

- **One sandbox per sample.** ``sample_init`` creates it (samples run concurrently, so their
  sandboxes are created concurrently; a 429 that says when to retry is waited out, up to
  :data:`CREATE_WAIT_S`); ``sample_cleanup`` destroys it, also when the sample was interrupted
  or the cleanup itself is cancelled. Every sandbox is recorded in Inspect's lifecycle state of
  the run (``sandbox_lifecycle_state()``), and ``task_cleanup`` (Inspect calls it with
  ``"shutdown"`` at the end of the run) destroys what a failed sample cleanup left, or, with
  ``--no-sandbox-cleanup``, pauses the sandboxes it keeps (their files stay, only their disk
  bills) and logs each id with the shell command that resumes it. ``inspect sandbox cleanup
  lizard`` destroys what this machine's crashed runs left (the ``integration``,
  ``integration_machine`` tags); ``... lizard all`` what any machine left in the project;
  ``... lizard ID`` one sandbox.
- **Prepared environment** (:attr:`LizardSandboxConfig.setup`). ``task_init`` runs the setup
  once in a sandbox of its own and snapshots its files; every sample's sandbox starts from that
  snapshot (a restore, not a create plus the setup), as from
  :attr:`LizardSandboxConfig.snapshot`. The run's ``task_cleanup`` deletes the snapshots it
  made, and those of the run a lost record left (found by the run's tags); the ``cleanup``
  command deletes those crashed runs left, as it destroys their sandboxes.
- **Keep-alive** (:attr:`LizardSandboxConfig.keep_alive`, on by default): a sandbox in use
  outlives ``lifetime_ms``; an idle one still expires.
- **No I/O when built.** The constructor (and ``task_init``, once per task) checks the
  configuration and the credentials (``TypeError`` / ``ValueError``) and makes no request;
  outside an eval the first operation creates the sandbox.
- **exec** runs the argv with no shell, in the sample's working directory
  (:attr:`LizardSandboxConfig.working_dir`, created on demand; a relative ``cwd`` resolves
  against it, and a missing one is ``FileNotFoundError``), with ``input`` on stdin (text as
  UTF-8), ``env`` added to the sandbox's environment and ``user`` as the account (exit 126
  for an unknown one;
  ``SandboxUserUnsupportedError`` when the sandbox cannot switch users). A ``timeout`` kills
  the command's process group and raises ``TimeoutError`` with the partial output; passing
  Inspect's output limit kills it and raises ``OutputLimitExceededError``. A program that
  cannot be executed raises ``PermissionError``; a missing one is exit code 127. Output is
  decoded as UTF-8 with replacement characters. A command is never retried.
- **Files.** ``write_file`` creates parent directories; ``read_file`` returns exact bytes (or
  strict UTF-8 text, newlines untouched) and raises ``OutputLimitExceededError`` past Inspect's
  read limit without holding more than that limit plus one chunk. Both raise the builtin
  ``OSError``s Inspect names.
- **Cost.** Each exec and each small file operation is one request (``lizard_core``'s guest
  protocol); large input and files move in 4 MiB pieces.
- **Errors** are mapped in one place, ``_errors.inspect_errors``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import threading
from collections.abc import Iterable
from typing import Any, Final, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
)
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_state
from pydantic import BaseModel

from lizard_core import errors as core
from lizard_core.commands import CommandResult, arun_command
from lizard_core.config import (
    METADATA_INTEGRATION_KEY,
    METADATA_MACHINE_KEY,
    METADATA_RUN_KEY,
    SandboxConfig,
)
from lizard_core.files import SandboxFiles
from lizard_core.inventory import adestroy_sandboxes, afind_sandboxes
from lizard_core.prepared import prepare_snapshot
from lizard_core.session import Session
from lizard_core.snapshots import adelete_snapshots, afind_snapshots

from ._config import INTEGRATION, LizardSandboxConfig
from ._errors import decode_output, inspect_errors
from .shell import command_for

__all__ = [
    "CLEANUP_ALL",
    "CREATE_WAIT_S",
    "DEFAULT_CONCURRENCY",
    "POLL_INTERVAL_S",
    "SETUP_LABEL",
    "LizardSandboxEnvironment",
]

DEFAULT_CONCURRENCY: Final = 10
"""Sandboxes at once unless ``--max-sandboxes`` says otherwise. Past an account's limit the
platform answers 429 with a retry time, which ``sample_init`` waits out."""
CREATE_WAIT_S: Final = 600.0
"""How long ``sample_init`` waits out rate limits (429 with a retry time) before failing."""

POLL_INTERVAL_S: Final = 0.2
"""How often Inspect's ``exec_remote`` polls a running process (as for its docker sandboxes):
each poll is one exec, about as cheap as a docker exec."""
SETUP_LABEL: Final = "inspect task setup"
"""The name (before its tags) of each snapshot a ``setup`` made, which cleanup deletes."""
CLEANUP_ALL: Final = "all"
"""``inspect sandbox cleanup lizard all``: every Inspect sandbox of the project, any machine's."""

_log = logging.getLogger(__name__)


class _Started:
    """The sandboxes one Inspect run created and has not destroyed yet.

    Kept on Inspect's lifecycle state of the run (one instance per run scope), so that the
    ``task_cleanup("shutdown", ...)`` that ends the run finds every sandbox of it.
    """

    def __init__(self) -> None:
        self.environments: set[LizardSandboxEnvironment] = set()
        self.prepared: dict[LizardSandboxConfig, str] = {}  # setup snapshots by configuration
        self.preparing = threading.Lock()  # one setup per configuration, whoever asks first

    def snapshot_for(self, config: LizardSandboxConfig) -> str | None:
        """The snapshot a sample of ``config`` starts from; runs its setup if not done yet."""
        if config.setup is None:
            return config.snapshot
        with self.preparing:
            if config not in self.prepared:
                record = prepare_snapshot(
                    config.sandbox_config(),
                    config.setup,
                    SETUP_LABEL,
                    timeout=config.setup_timeout_s,
                    snapshot_id=config.snapshot,
                )
                self.prepared[config] = record.snapshot_id
            return self.prepared[config]


_outside_a_run = _Started()  # sandboxes made outside Inspect's run scope (direct use, tests)


def _started() -> _Started:
    state = sandbox_lifecycle_state()
    return _outside_a_run if state is None else state.get(_Started)


def _lizard_config(config: SandboxEnvironmentConfigType | None) -> LizardSandboxConfig:
    if config is None:
        return LizardSandboxConfig()
    if isinstance(config, LizardSandboxConfig):
        return config
    raise ValueError(
        f"The lizard sandbox takes a LizardSandboxConfig, not {config!r}: Dockerfiles and "
        "compose files are not supported."
    )


def exec_result(result: CommandResult, program: str, user: str | None) -> ExecResult[str]:
    """Inspect's result for a finished command, or the error its contract names."""
    if result.start_errno == errno.EPERM and user is not None:
        raise SandboxUserUnsupportedError(decode_output(result.stderr).strip())
    if result.start_errno in (errno.EACCES, errno.EPERM):
        raise PermissionError(result.start_errno, os.strerror(result.start_errno), program)
    return ExecResult(
        success=result.exit_code == 0,
        returncode=result.exit_code,
        stdout=decode_output(result.stdout),
        stderr=decode_output(result.stderr),
    )


class LizardSandboxEnvironment(SandboxEnvironment):
    """A Lizard sandbox (a Firecracker microVM) as an Inspect sandbox environment.

    Inspect builds it through ``sample_init``; build it yourself to use a sandbox outside an
    eval (``api_key`` / ``api_url`` default to ``LIZARD_API_KEY`` / ``LIZARD_API_URL``) and
    :meth:`close` it when done. See the module docstring for the contract.
    """

    def __init__(
        self,
        config: LizardSandboxConfig | None = None,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        task_name: str | None = None,
        snapshot_id: str | None = None,
    ) -> None:
        super().__init__()
        self.config = _lizard_config(config)
        settings = self.config.sandbox_config(api_key=api_key, api_url=api_url, task_name=task_name)
        self._session = Session(
            settings,
            keep_alive=self.config.keep_alive,
            snapshot_id=snapshot_id or self.config.snapshot,
        )
        self._files = SandboxFiles(self._session)
        self._task = task_name
        self._registry: _Started | None = None

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once created, else None."""
        return self._session.sandbox_id

    def __repr__(self) -> str:
        return f"LizardSandboxEnvironment(sandbox_id={self.sandbox_id!r})"

    def _path(self, path: str) -> str:
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        return posixpath.normpath(posixpath.join(self.config.working_dir, path))

    # ── commands and files ──────────────────────────────────────────────

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109  (the command's own limit, in the guest)
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        """Run ``cmd`` in the sandbox; see the module docstring."""
        data = input.encode("utf-8") if isinstance(input, str) else input
        with inspect_errors():
            result = await arun_command(
                self._session,
                cmd,
                cwd=self.config.working_dir if cwd is None else self._path(cwd),
                create_cwd=cwd is None,
                env=env,
                timeout=timeout,
                output_limit=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
                input=data,
                user=user,
            )
        return exec_result(result, cmd[0], user)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write text (as UTF-8) or bytes, creating missing parent directories."""
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        with inspect_errors():
            await self._files.awrite_bytes(self._path(file), data)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read a file's exact bytes, or its strict UTF-8 text; refuse one past the limit."""
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        pieces: list[bytes] = []
        size = 0
        with inspect_errors():
            # An async generator: closing it early schedules its job directory's removal.
            reader = self._files.aiter_bytes(self._path(file))
            async with contextlib.aclosing(reader) as chunks:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        limit_str = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR
                        raise OutputLimitExceededError(limit_str, None)
                    pieces.append(chunk)
        data = b"".join(pieces)
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        """How a person reaches the sandbox: :mod:`inspect_lizard.shell`, a line-by-line shell.

        Lizard sandboxes have no terminal to attach to; the command runs each line through the
        API (no full-screen programs). Raises ``ConnectionError`` when the sandbox is not
        running (not created yet, or destroyed).
        """
        if self._session.sandbox_id is None or self._session.destroyed:
            raise ConnectionError("The Lizard sandbox is not running.")
        command = command_for(self._session.sandbox_id, user=user, cwd=self.config.working_dir)
        return SandboxConnection(type="lizard", command=command)

    def default_polling_interval(self) -> float:
        """Seconds between the polls of Inspect's ``exec_remote``: :data:`POLL_INTERVAL_S`."""
        return POLL_INTERVAL_S

    # ── lifecycle ───────────────────────────────────────────────────────

    async def _create(self) -> None:
        waited = 0.0
        while True:
            with inspect_errors():
                try:
                    await self._session.asandbox()
                    return
                except core.QuotaError as error:
                    retry = error.retry_after
                    if retry is None or waited + retry > CREATE_WAIT_S:
                        raise
            _log.info("Lizard is rate limiting sandbox creation; retrying in %g s", retry)
            await anyio.sleep(retry)
            waited += retry

    async def close(self) -> None:
        """Destroy the sandbox (idempotent), even when the calling task is being cancelled."""
        with anyio.CancelScope(shield=True), inspect_errors():
            await self._session.adestroy()
        if self._registry is not None:
            self._registry.environments.discard(self)

    async def _keep_paused(self) -> None:
        """Pause the sandbox and leave it (``--no-sandbox-cleanup``): only its disk bills."""
        state = "paused"
        with anyio.CancelScope(shield=True):
            try:
                await self._session.apause()
            except core.LizardIntegrationError as error:
                state = f"running (the pause failed: {error})"
            await self._session.aclose()
        sandbox_id = self.sandbox_id
        _log.warning(
            "Kept Lizard sandbox %s %s (--no-sandbox-cleanup): reach it with `%s` (which resumes "
            "it), destroy it with `inspect sandbox cleanup lizard %s`",
            sandbox_id,
            state,
            command_for(str(sandbox_id), cwd=self.config.working_dir),
            sandbox_id,
        )

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        """A :class:`LizardSandboxConfig` from its serialized form (0.1.0's fields included)."""
        return LizardSandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        """Samples with a sandbox at once by default: :data:`DEFAULT_CONCURRENCY`."""
        return DEFAULT_CONCURRENCY

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        """Check the configuration and credentials; run the ``setup``, if any, and snapshot it.

        Without a ``setup`` no request is made.
        """
        lizard = _lizard_config(config)
        lizard.sandbox_config(task_name=task_name).require_project()
        if lizard.setup is not None:
            await _snapshot_for(lizard)

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        """Create the sample's sandbox, from the task's snapshot if any.

        A cancelled or failed create leaves none behind.
        """
        lizard = _lizard_config(config)
        snapshot_id = await _snapshot_for(lizard)
        environment = cls(lizard, task_name=task_name, snapshot_id=snapshot_id)
        environment._registry = _started()
        environment._registry.environments.add(environment)
        try:
            await environment._create()
        except BaseException:
            with contextlib.suppress(Exception):
                await environment.close()
            raise
        return {"default": environment}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        """Destroy the sample's sandbox, interrupted or not.

        A destroy that fails is logged, not raised (the sample's result stands): the sandbox
        stays recorded, and the run's ``task_cleanup("shutdown", ...)`` tries again.
        """
        with contextlib.suppress(ExceptionGroup):  # each failure is logged by _close_all
            await _close_all(e for e in environments.values() if isinstance(e, cls))

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        """Destroy what sample cleanup left of the run's sandboxes (unless told to keep them).

        Inspect calls it with ``task_name="shutdown"`` once the run ends: every sandbox the
        run still holds is destroyed (or, with ``cleanup=False``, logged as kept). Called with
        a task's name, only that task's are. The snapshots the run's ``setup`` made are deleted
        (kept, and logged, with ``cleanup=False``).
        """
        registry = _started()
        left = [e for e in registry.environments if task_name == "shutdown" or e._task == task_name]
        with anyio.CancelScope(shield=True):
            await _delete_prepared(registry, _lizard_config(config), task_name, cleanup)
        if not cleanup:
            for environment in left:
                if environment.sandbox_id is not None:
                    await environment._keep_paused()
                registry.environments.discard(environment)
            return
        with contextlib.suppress(ExceptionGroup):  # each failure is logged; the rest go on
            await _close_all(left)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """Destroy Inspect's sandboxes that runs left: this machine's, ``all``, or one ``id``.

        With no id, only the sandboxes this machine's runs created (their ``integration_machine``
        tag); with :data:`CLEANUP_ALL`, every Inspect sandbox of the project, teammates' runs in
        progress included; with an id, that sandbox, if Inspect created it.
        """
        settings = SandboxConfig.from_env(integration=INTEGRATION)
        with inspect_errors():
            if id is None:
                found = await afind_sandboxes(
                    settings, integration=INTEGRATION, machine_id=settings.machine_id
                )
            else:
                found = await afind_sandboxes(settings, integration=INTEGRATION)
            ids = [record.sandbox_id for record in found]
            if id is not None and id != CLEANUP_ALL:
                if id not in ids:
                    raise ValueError(f"No running Lizard sandbox {id!r} was created by Inspect.")
                ids = [id]
            destroyed = await adestroy_sandboxes(settings, ids)
            if id is None or id == CLEANUP_ALL:
                tags = {METADATA_INTEGRATION_KEY: INTEGRATION}
                if id is None:
                    tags[METADATA_MACHINE_KEY] = settings.machine_id
                prepared = await afind_snapshots(settings, tags)
                await adelete_snapshots(
                    settings, [r.snapshot_id for r in prepared if r.label == SETUP_LABEL]
                )
        scope = "" if id is not None else " (this machine's; `all` for the whole project)"
        print(f"Destroyed {len(destroyed)} Lizard sandbox(es){scope}: {' '.join(destroyed) or '-'}")


async def _snapshot_for(config: LizardSandboxConfig) -> str | None:
    registry = _started()
    if config.setup is None or config in registry.prepared:  # no thread needed
        return registry.prepared.get(config, config.snapshot)
    with inspect_errors():
        return await anyio.to_thread.run_sync(registry.snapshot_for, config)


async def _delete_prepared(
    registry: _Started, config: LizardSandboxConfig, task_name: str, cleanup: bool
) -> None:
    """Delete the setup snapshots of ``config`` (of the whole run at ``"shutdown"``)."""
    shutdown = task_name == "shutdown"
    made = {c: i for c, i in registry.prepared.items() if shutdown or c == config}
    if not cleanup:
        for snapshot_id in made.values():
            _log.warning("Kept the task's setup snapshot %s (--no-sandbox-cleanup)", snapshot_id)
        return
    settings = config.sandbox_config()
    ids = set(made.values())
    try:
        if shutdown:  # and any of this run a lost record left
            run_tags = {METADATA_INTEGRATION_KEY: INTEGRATION, METADATA_RUN_KEY: settings.run_id}
            found = await afind_snapshots(settings, run_tags)
            ids |= {r.snapshot_id for r in found if r.label == SETUP_LABEL}
        await adelete_snapshots(settings, sorted(ids))
    except core.LizardIntegrationError as error:
        _log.warning("Could not delete the setup snapshots %s: %s", " ".join(sorted(ids)), error)
        return
    for key in made:
        registry.prepared.pop(key, None)


async def _close_all(environments: Iterable[LizardSandboxEnvironment]) -> None:
    errors: list[Exception] = []
    for environment in list(environments):
        try:
            await environment.close()
        except Exception as error:
            _log.warning(
                "Could not destroy Lizard sandbox %s (`inspect sandbox cleanup lizard %s` can): %s",
                environment.sandbox_id,
                environment.sandbox_id,
                error,
            )
            errors.append(error)
    if errors:
        raise ExceptionGroup("Destroying Lizard sandboxes failed", errors)
