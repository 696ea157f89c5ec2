"""The client's options and the session's serializable state.

Both are pydantic models the SDK registers by their ``type`` (``"lizard"``), so a saved
``RunState`` finds them again. Neither holds a credential: the API key, URL and project live on
the client that resumes the state, never in the payload.
"""

from __future__ import annotations

from typing import Literal

from agents.sandbox.session.sandbox_client import BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from pydantic import BaseModel, ConfigDict

__all__ = [
    "LizardSandboxClientOptions",
    "LizardSandboxSessionState",
    "Size",
    "WorkspacePersistence",
]

Size = Literal["nano", "mini", "small", "medium", "large", "big"]
WorkspacePersistence = Literal["tar", "snapshot"]


class SandboxSettings(BaseModel):
    """The sandbox settings that options and state share (a replacement is built from them)."""

    template: str | None = None
    """Template to create from (``base``, ``interpreter``, ...); None: lizard-core's default."""
    size: Size | None = None
    """Machine size; None: the platform's default."""
    lifetime_ms: int | None = None
    """Sandbox lifetime in milliseconds from create; None: lizard-core's default."""
    envs: dict[str, str] | None = None
    """Environment of every command (the manifest's environment wins on a clash)."""
    metadata: dict[str, str] | None = None
    """Your labels on the sandbox (the integration's tags are added)."""
    internet_access: bool = True
    """False: no internet for the sandbox's whole life."""
    allowed_hosts: tuple[str, ...] | None = None
    """With no internet, the hosts that stay reachable (implies ``internet_access=False``)."""
    exposed_ports: tuple[int, ...] = ()
    """Ports ``session.resolve_exposed_port(port)`` may publish (needs internet access)."""
    pause_on_exit: bool = False
    """Pause the sandbox, not destroy it, when the run ends; ``resume(state)`` resumes it."""
    workspace_persistence: WorkspacePersistence = "tar"
    """``"tar"``: the workspace travels through the host; ``"snapshot"``: a Lizard snapshot."""
    volume: str | None = None
    """A volume's name, made if absent, mounted at ``/workspace`` (the default manifest root)."""


class LizardSandboxClientOptions(BaseSandboxClientOptions, SandboxSettings):
    """Options for :meth:`LizardSandboxClient.create` (``SandboxRunConfig(options=...)``).

    Frozen; every value is checked by ``lizard_core.config`` when a session is created, before
    any request.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["lizard"] = "lizard"


class LizardSandboxSessionState(SandboxSessionState, SandboxSettings):
    """A Lizard session's state: its sandbox id, and the settings to build a replacement.

    Holds no credential: the API key, URL and project come from the client that resumes it.
    """

    type: Literal["lizard"] = "lizard"
    sandbox_id: str = ""
    snapshot_id: str | None = None
    """The Lizard snapshot this session last persisted to (deleted when a newer one is made)."""
