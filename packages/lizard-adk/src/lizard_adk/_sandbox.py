"""The sandbox options every ``lizard_adk`` object takes, turned into a ``lizard_core`` session."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Final

from lizard_core.config import SandboxConfig, Size
from lizard_core.session import Session

__all__ = ["INTEGRATION", "check_dir", "make_session"]

INTEGRATION: Final = "adk"
"""The integration's name in the metadata of every sandbox it creates (0.1.1's tag too)."""


def _version() -> str:
    try:
        return metadata.version("lizard-adk")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def check_dir(name: str, value: object) -> str:
    """An absolute POSIX directory for the sandbox, or TypeError/ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.startswith("/") or "\0" in value:
        raise ValueError(f"{name} must be an absolute path without NUL, not {value!r}")
    return value


def make_session(
    *,
    api_key: str | None,
    api_url: str | None,
    project_id: str | None,
    template: str,
    size: Size | None,
    lifetime_ms: int,
    envs: Mapping[str, str] | None,
    sandbox_id: str | None = None,
    keep_alive: bool = True,
) -> Session:
    """Validate the options (no I/O) and return a session that creates or attaches lazily."""
    config = SandboxConfig.from_env(
        api_key=api_key,
        api_url=api_url,
        project_id=project_id,
        template=template,
        size=size,
        lifetime_ms=lifetime_ms,
        envs=envs,
        integration=INTEGRATION,
        integration_version=_version(),
    )
    return Session(config, sandbox_id=sandbox_id, keep_alive=keep_alive)
