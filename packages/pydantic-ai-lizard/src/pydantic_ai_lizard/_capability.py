"""`LizardSandbox`: the capability that supplies a Lizard sandbox as an agent run's workspace.

It selects the workspace and nothing else: compose it with tools that use one, such as harness
`Shell`, `FileSystem` or `Coder`. Selecting does no I/O; the backend creates or attaches on first
use. With `pause_after_run`, `wrap_run` pauses the run's sandbox when the run ends (also when it
fails or is cancelled), if the run used it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic_ai import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.workspaces import WorkspaceRef

from lizard_core.config import Size
from lizard_core.snapshots import check_snapshot_id
from lizard_core.volumes import check_volume_name

from ._backend import (
    DEFAULT_LIFETIME_MS,
    DEFAULT_SIZE,
    DEFAULT_TEMPLATE,
    DEFAULT_WORKING_DIR,
    PROVIDER,
    LizardSandboxBackend,
    check_ref,
)

__all__ = ["LizardSandbox"]

_log = logging.getLogger(__name__)

_VALIDATION_REF = WorkspaceRef(provider=PROVIDER, id="validation-only")
_VALIDATION_KEY = "liz_validation_only"  # stands in for a key not set yet; never sent


@dataclass(kw_only=True)
class LizardSandbox(AbstractCapability[AgentDepsT]):
    """Supply a Lizard sandbox (a Firecracker microVM) as the run's workspace.

    A run without a reference gets a fresh sandbox; a run continuing from a `WorkspaceRef` (passed
    as `workspace=` or found in `message_history`) attaches to that sandbox, and fails with
    `WorkspaceUnavailableError` if it is gone rather than starting a replacement. A run ending
    never destroys its sandbox: call `destroy(ref)` when it is no longer needed, or let its
    lifetime run out, or set `pause_after_run` to pause it (files kept, nothing billed but the
    disk) until a later run attaches and resumes it. Every field is validated here, with no API
    call.
    """

    project_id: str | None = None
    """Lizard project id, name or slug; `LIZARD_PROJECT_ID` when `None`. Needed only to create a
    sandbox: attaching to a `WorkspaceRef` and `destroy(ref)` work without one, and a run that
    would create one without a project fails with `ValueError` before any request."""

    size: Size = DEFAULT_SIZE
    """Machine size of a new sandbox: `nano`, `mini`, `small`, `medium`, `large` or `big`."""

    lifetime_ms: int = DEFAULT_LIFETIME_MS
    """Lifetime of a new sandbox in milliseconds; when it runs out, the sandbox and its files go."""

    working_dir: str = DEFAULT_WORKING_DIR
    """Absolute directory commands start in and relative paths resolve against; made if missing."""

    env: Mapping[str, str] | None = field(default=None, repr=False)
    """Variables every command gets, also on an attached sandbox. Nothing is read from the host."""

    api_key: str | None = field(default=None, repr=False)
    """Lizard API key; `LIZARD_API_KEY` when `None`. It stays on the host. Like the project, it
    is needed only when a run asks for its workspace: without one, that fails with `ValueError`
    before any request."""

    api_url: str | None = None
    """Lizard API URL; `LIZARD_API_URL`, else the cloud. HTTPS except for loopback addresses."""

    template: str = DEFAULT_TEMPLATE
    """Template of a new sandbox: `interpreter` (Python with the data stack) or `base`."""

    region: str | None = None
    """Region of a new sandbox; Lizard's default when `None`."""

    envs: Mapping[str, str] | None = field(default=None, repr=False)
    """Variables set on a new sandbox itself, for every process it runs."""

    internet_access: bool = True
    """Whether a new sandbox may reach the internet."""

    keep_alive: bool = True
    """Extend the sandbox's lifetime while the backend is in use (an idle sandbox still expires)."""

    snapshot: str | None = None
    """A snapshot id a new sandbox starts from (its files); an attached sandbox keeps its own."""

    volume: str | None = None
    """A project volume's name, mounted at `/workspace` of a new sandbox (made if absent); its
    files outlive every sandbox. An attached sandbox keeps its own disk."""

    idle_pause_s: float | None = None
    """Pause the sandbox after this many idle seconds; the next operation resumes it."""

    pause_after_run: bool = False
    """Pause the run's sandbox when the run ends (if the run used it), instead of leaving it
    running; a later run attaching by its `WorkspaceRef` resumes it. Processes started in it
    (servers, background jobs) end with the pause; files stay."""

    def __post_init__(self) -> None:
        if self.defer_loading:
            raise UserError(
                "LizardSandbox cannot defer loading: a run selects its workspace before deferred "
                "capabilities load."
            )
        # Validates every field; builds no sandbox and makes no request. Built as if attaching,
        # so that a missing project (needed only to create) does not refuse a capability used to
        # reattach or destroy; a run that would create checks it in `get_workspace`. Likewise
        # the key, as the harness's own sandboxes do: an agent may be defined before
        # LIZARD_API_KEY is set, and a run without one fails in `get_workspace`, before any
        # request.
        key = self.api_key
        if key is None and not os.environ.get("LIZARD_API_KEY"):
            key = _VALIDATION_KEY
        self._backend(_VALIDATION_REF, api_key=key)
        if type(self.pause_after_run) is not bool:
            raise TypeError("pause_after_run must be a bool")
        if self.snapshot is not None:
            check_snapshot_id(self.snapshot)
        if self.volume is not None:
            check_volume_name(self.volume)

    def _backend(
        self, ref: WorkspaceRef | None, *, api_key: str | None = None
    ) -> LizardSandboxBackend:
        return LizardSandboxBackend(
            ref=ref,
            project_id=self.project_id,
            api_key=api_key if api_key is not None else self.api_key,
            size=self.size,
            lifetime_ms=self.lifetime_ms,
            working_dir=self.working_dir,
            env=self.env,
            api_url=self.api_url,
            template=self.template,
            region=self.region,
            envs=self.envs,
            internet_access=self.internet_access,
            keep_alive=self.keep_alive,
            # For a new sandbox only: an attached one has its own files and disk.
            snapshot=self.snapshot if ref is None else None,
            volume=self.volume if ref is None else None,
            idle_pause_s=self.idle_pause_s,
        )

    def backend(self, ref: WorkspaceRef) -> LizardSandboxBackend:
        """A backend that attaches to the sandbox `ref` names on first use (no I/O here)."""
        check_ref(ref)
        return self._backend(ref)

    async def destroy(self, ref: WorkspaceRef) -> None:
        """Destroy the sandbox `ref` names; one already gone counts as destroyed.

        Nothing is created or attached to do it.
        """
        await self.backend(ref).destroy()

    def get_workspace(
        self, ctx: RunContext[AgentDepsT], *, ref: WorkspaceRef | None
    ) -> LizardSandboxBackend | None:
        """The backend for this run, or `None` for another provider's `ref`. No I/O here."""
        del ctx
        if ref is not None and ref.provider != PROVIDER:
            return None
        return self._backend(ref)

    async def wrap_run(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        handler: Callable[[], Awaitable[AgentRunResult[Any]]],  # the framework's WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Run, then pause the run's sandbox if `pause_after_run` (see the module docstring)."""
        if not self.pause_after_run:
            return await handler()
        try:
            result = await handler()
        except BaseException as ending:
            await _pause_run_workspace(ctx, ending)
            raise
        await _pause_run_workspace(ctx, None)
        return result


async def _pause_run_workspace(ctx: RunContext[Any], ending: BaseException | None) -> None:
    """Pause the run's Lizard workspace; a failure never hides the error that ended the run."""
    backend = ctx.workspace.backend
    if not isinstance(backend, LizardSandboxBackend):
        return
    try:
        with anyio.CancelScope(shield=True):  # a cancelled run must not leave it billing
            await backend._pause_if_used()
    except Exception as exc:
        if ending is None:
            raise
        note = f"pydantic-ai-lizard: pausing the workspace at the run's end failed: {exc}"
        _log.warning(note)
        ending.add_note(note)
