"""The sandbox options every ``lizard_adk`` class takes, turned into a ``lizard_core`` session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from lizard_core.checks import package_version
from lizard_core.config import BasicSandboxOptions, SandboxConfig
from lizard_core.session import Session

__all__ = ["DEFAULT_LIFETIME_MS", "INTEGRATION", "SandboxOptions", "check_dir", "make_session"]

DEFAULT_LIFETIME_MS: Final = 1_800_000
"""Lifetime of a sandbox, from its last use while ``keep_alive`` holds: 30 minutes."""
INTEGRATION: Final = "adk"
"""The integration's name in the metadata of every sandbox it creates (0.1.1's tag too)."""


class SandboxOptions(BasicSandboxOptions, total=False):
    """Keyword arguments of every ``lizard_adk`` class; each is checked when it is built.

    ``api_key``, ``api_url``, ``project_id``, ``template`` (``base``, or ``interpreter`` with the
    data stack), ``size`` and ``lifetime_ms`` (default 30 minutes, extended while in use with
    ``keep_alive``) are
    ``lizard_core``'s :class:`~lizard_core.config.BasicSandboxOptions`; the rest are ADK's own.
    """

    env_vars: Mapping[str, str] | None
    """Environment variables for the sandbox; nothing is copied from the host."""
    sandbox_id: str | None
    """Attach to this sandbox instead of creating one (a paused one is resumed, its lifetime
    renewed); ``close()`` leaves it as it is."""
    snapshot_id: str | None
    """Create the sandbox from this snapshot (its files) instead of an empty template."""
    volume: str | None
    """Mount this volume (by name, made if absent) at ``/workspace`` of a created sandbox."""
    idle_pause_s: float | None
    """Pause the sandbox after this many idle seconds; the next operation resumes it."""
    keep_alive: bool
    """Extend the lifetime while in use (default True; one request per half lifetime at most)."""
    region: str | None
    """Region to run in, or None for the platform's default."""
    metadata: Mapping[str, str] | None
    """Labels of your own on the sandbox; the integration tags are added."""
    internet_access: bool
    """False: the sandbox has no internet access."""
    allowed_hosts: Sequence[str] | None
    """With no internet, the hosts that stay reachable (at most 50)."""


def check_dir(name: str, value: object) -> str:
    """An absolute POSIX directory for the sandbox, or TypeError/ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.startswith("/") or "\0" in value:
        raise ValueError(f"{name} must be an absolute path without NUL, not {value!r}")
    return value


def make_session(options: Mapping[str, Any], **defaults: Any) -> Session:
    """Validate ``options`` over ``defaults`` (no I/O); the session creates or attaches lazily."""
    unknown = sorted(set(options) - set(SandboxOptions.__annotations__))
    if unknown:
        raise TypeError(f"unexpected keyword arguments: {', '.join(unknown)}")
    merged = {"lifetime_ms": DEFAULT_LIFETIME_MS, **defaults, **options}
    session = {k: merged.pop(k, None) for k in ("sandbox_id", "snapshot_id", "volume")}
    idle_pause_s, keep_alive = merged.pop("idle_pause_s", None), merged.pop("keep_alive", True)
    merged["envs"] = merged.pop("env_vars", None)
    config = SandboxConfig.from_env(
        **merged, integration=INTEGRATION, integration_version=package_version("lizard-adk")
    )
    return Session(config, keep_alive=keep_alive, idle_pause_s=idle_pause_s, **session)
