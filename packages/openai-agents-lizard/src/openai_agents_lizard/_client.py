"""``LizardSandboxClient``: the OpenAI Agents SDK's sandbox client for Lizard Sandboxes.

Contract (proven against lizard-local in ``tests/``):

- **No I/O when built.** The client reads ``LIZARD_API_KEY`` / ``LIZARD_API_URL`` /
  ``LIZARD_PROJECT_ID`` (arguments win) and checks them (``TypeError`` / ``ValueError``); so
  does :meth:`create` with its options, before any request.
- **create** makes the sandbox (one request) and returns the SDK's session, unstarted: the
  runner's ``start()`` materializes the manifest or restores the snapshot. A create that fails
  or is cancelled leaves no sandbox behind.
- **delete** alone destroys the sandbox (pauses it with ``pause_on_exit``); a second delete,
  or one after ``shutdown()``, is harmless. The runner deletes the sessions it created and
  leaves a session passed in (``SandboxRunConfig(session=...)``) to its owner.
- **destroy** removes the sandbox whatever ``pause_on_exit`` says.
- **resume** reattaches to the state's sandbox while it lives (a paused one is resumed); a
  sandbox that is gone is never
  silently reused: a replacement is created with the same settings (started from the state's
  Lizard snapshot with ``workspace_persistence="snapshot"``), and ``start()`` hydrates it from
  ``state.snapshot``.
- **State** (``serialize_session_state`` / ``deserialize_session_state``) holds the sandbox id
  and settings, never the API key, URL or project.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Final

from agents.sandbox.manifest import Manifest
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.sandbox_client import BaseSandboxClient
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot

from lizard_core import errors as core
from lizard_core.checks import package_version
from lizard_core.config import SandboxConfig
from lizard_core.session import Session
from lizard_core.volumes import check_volume_name

from ._errors import failure_context
from ._options import LizardSandboxClientOptions, LizardSandboxSessionState, SandboxSettings
from ._session import LizardSandboxSession

__all__ = ["INTEGRATION", "LizardSandboxClient", "SandboxCreateError"]

INTEGRATION: Final = "openai-agents"
"""The integration's name in the metadata of every sandbox it creates."""

# The settings a Lizard sandbox is created with (the others are the session's own).
_SANDBOX_SETTINGS: Final = ("template", "size", "lifetime_ms", "envs", "metadata", "allowed_hosts")


class SandboxCreateError(RuntimeError):
    """Lizard could not create (or reattach) a sandbox; ``context`` says whether to retry."""

    def __init__(self, message: str, context: dict[str, object]) -> None:
        super().__init__(message)
        self.context = context


class LizardSandboxClient(BaseSandboxClient[LizardSandboxClientOptions]):
    """Creates, resumes and deletes Lizard sandbox sessions for a ``SandboxAgent``.

    Use it in ``RunConfig(sandbox=SandboxRunConfig(client=LizardSandboxClient(),
    options=LizardSandboxClientOptions(...)))``. See the module docstring for the contract.
    """

    backend_id = "lizard"
    supports_default_options = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        project_id: str | None = None,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        super().__init__()
        self._config = SandboxConfig.from_env(
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            integration=INTEGRATION,
            integration_version=package_version("openai-agents-lizard"),
        )
        self._instrumentation = instrumentation or Instrumentation()
        self._dependencies = dependencies

    def __repr__(self) -> str:
        return f"LizardSandboxClient(api_url={self._config.api_url!r})"

    def _config_for(
        self, settings: LizardSandboxClientOptions | LizardSandboxSessionState
    ) -> SandboxConfig:
        changes: dict[str, Any] = {}
        for name in _SANDBOX_SETTINGS:
            value = getattr(settings, name)
            if value is not None:
                changes[name] = value
        changes["internet_access"] = settings.internet_access and settings.allowed_hosts is None
        return self._config.replace(**changes)

    async def _new_sandbox(
        self, config: SandboxConfig, *, volume: str | None, snapshot_id: str | None = None
    ) -> Session:
        config.require_project()
        session = Session(config, volume=volume, snapshot_id=snapshot_id)
        try:
            await session.aopen()  # one that fails or is cancelled is destroyed
        except core.LizardIntegrationError as error:
            context = failure_context(error)
            raise SandboxCreateError(str(context["detail"]), context) from error
        return session

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: LizardSandboxClientOptions | None = None,
    ) -> SandboxSession:
        """Create a sandbox and its unstarted session (see the module docstring)."""
        options = options if options is not None else LizardSandboxClientOptions()
        if not isinstance(options, LizardSandboxClientOptions):
            raise TypeError("options must be LizardSandboxClientOptions")
        manifest = manifest if manifest is not None else Manifest()
        validate = getattr(self, "_validate_manifest_for_create", None)  # openai-agents >= 0.20
        if validate is not None:
            manifest = validate(manifest)
        config = self._config_for(options)
        if options.volume is not None:
            check_volume_name(options.volume)
        if options.exposed_ports and not config.internet_access:
            raise ValueError("exposed_ports need internet access (the platform refuses them)")
        session_id = uuid.uuid4()
        state = LizardSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            **{name: getattr(options, name) for name in SandboxSettings.model_fields},
        )
        session = await self._new_sandbox(config, volume=options.volume)
        state.sandbox_id = session.sandbox_id or ""
        inner = LizardSandboxSession(state=state, session=session)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Destroy the session's sandbox; a second call is harmless."""
        inner = session._inner
        if not isinstance(inner, LizardSandboxSession):
            raise TypeError("LizardSandboxClient.delete expects a session it created")
        await inner.shutdown()
        return session

    async def destroy(self, session: SandboxSession) -> None:
        """Destroy the session's sandbox even with ``pause_on_exit`` (paused or running)."""
        inner = session._inner
        if not isinstance(inner, LizardSandboxSession):
            raise TypeError("LizardSandboxClient.destroy expects a session it created")
        await inner.pty_terminate_all()
        await inner._session.aclose()
        with contextlib.suppress(core.SandboxGoneError):
            await Session(self._config, sandbox_id=inner.state.sandbox_id).adestroy()

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Reattach to ``state``'s sandbox, or create a replacement hydrated from its snapshot."""
        if not isinstance(state, LizardSandboxSessionState):
            raise TypeError("LizardSandboxClient.resume expects a LizardSandboxSessionState")
        check = getattr(state, "assert_path_grants_rebound", None)  # openai-agents >= 0.20
        if check is not None:
            check()
        config = self._config_for(state)
        session: Session | None = None
        if state.sandbox_id:
            # One GET attaches (resuming a paused sandbox); a gone one is replaced below.
            session = Session(config, sandbox_id=state.sandbox_id)
            try:
                await session.aopen()
            except core.SandboxGoneError:
                session = None
            except core.LizardIntegrationError as error:
                context = failure_context(error)
                raise SandboxCreateError(str(context["detail"]), context) from error
        preserved = session is not None
        from_snapshot: str | None = None
        if session is None:
            # A snapshot-persisted workspace starts the replacement from that snapshot;
            # hydrate_workspace then finds it restored.
            from_snapshot = state.snapshot_id if state.workspace_persistence == "snapshot" else None
            session = await self._new_sandbox(
                config, volume=state.volume, snapshot_id=from_snapshot
            )
            state.sandbox_id = session.sandbox_id or ""
            state.workspace_root_ready = False
        inner = LizardSandboxSession(state=state, session=session)
        inner._restored_from = None if preserved else from_snapshot
        inner._set_start_state_preserved(preserved)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        """The state :meth:`serialize_session_state` wrote."""
        parse = getattr(self, "_deserialize_session_state_payload", None)  # >= 0.20
        if parse is not None:
            return parse(payload, LizardSandboxSessionState)  # type: ignore[no-any-return]
        return LizardSandboxSessionState.model_validate(payload)
