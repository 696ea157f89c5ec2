"""Find and destroy the sandboxes an integration left running, by their metadata tags.

Every sandbox a :class:`~lizard_core.session.Session` creates carries its integration's name
(``integration``) and version in its metadata (:attr:`SandboxConfig.sandbox_metadata
<lizard_core.config.SandboxConfig.sandbox_metadata>`), plus the caller's own labels. That is
what a process that crashed before destroying its sandboxes leaves for a later cleanup to find.

Contract (proven against lizard-local in ``tests/test_inventory.py``):

- :func:`find_sandboxes` lists the account's running sandboxes with one ``GET /api/sandboxes``
  (retried on transient failures) and keeps those whose metadata holds every given pair; the
  configuration's project is not needed. Records are checked as untrusted input: an entry
  without a usable id is skipped, and metadata that is not a map of strings counts as none.
- :func:`destroy_sandboxes` kills each id with one ``DELETE`` (retried on transient
  failures); a sandbox already gone counts as destroyed. It returns the ids it destroyed and
  raises the first error only after trying them all.
- Both raise only :class:`~lizard_core.errors.LizardIntegrationError` kinds, and have ``a``-
  prefixed coroutines that run the blocking calls in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lizard import Sandbox

from lizard_core._bridge import run_blocking
from lizard_core._retry import RetryPolicy
from lizard_core.config import SandboxConfig
from lizard_core.errors import LizardIntegrationError, translated
from lizard_core.session import Session

__all__ = [
    "SandboxRecord",
    "adestroy_sandboxes",
    "afind_sandboxes",
    "destroy_sandboxes",
    "find_sandboxes",
]


@dataclass(frozen=True)
class SandboxRecord:
    """A running sandbox as the platform lists it."""

    sandbox_id: str
    """The sandbox's id."""
    template: str | None = None
    """The template it was created from, if the platform said."""
    status: str | None = None
    """Its status (``running``, ``paused``, ...), if the platform said."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """The metadata set at create: the integration tags and the caller's labels."""


def _record(info: object) -> SandboxRecord | None:
    sandbox_id = getattr(info, "sandbox_id", None)
    if not isinstance(sandbox_id, str) or not sandbox_id:
        return None
    raw = getattr(info, "metadata", None)
    metadata = (
        {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(raw, dict)
        else {}
    )
    template, status = getattr(info, "template", None), getattr(info, "status", None)
    return SandboxRecord(
        sandbox_id,
        template if isinstance(template, str) else None,
        status if isinstance(status, str) else None,
        metadata,
    )


def find_sandboxes(config: SandboxConfig, metadata: Mapping[str, str]) -> list[SandboxRecord]:
    """The running sandboxes whose metadata holds every pair in ``metadata`` (blocking)."""
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    wanted = dict(metadata)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in wanted.items()):
        raise TypeError("metadata must map str to str")
    policy = RetryPolicy()
    retry = 1
    while True:
        try:
            with translated():
                infos = Sandbox.list(**config.api_kwargs())
            break
        except LizardIntegrationError as error:
            delay = policy.delay(error, retry)
            if delay is None:
                raise
        time.sleep(delay)
        retry += 1
    records = [record for record in map(_record, infos or ()) if record is not None]
    return [r for r in records if all(r.metadata.get(k) == v for k, v in wanted.items())]


def destroy_sandboxes(config: SandboxConfig, sandbox_ids: Iterable[str]) -> list[str]:
    """Kill each sandbox in ``sandbox_ids`` (blocking); return the ids now destroyed."""
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    ids = list(sandbox_ids)
    sessions = [Session(config, sandbox_id=sandbox_id) for sandbox_id in ids]  # validates ids
    destroyed: list[str] = []
    errors: list[LizardIntegrationError] = []
    for sandbox_id, session in zip(ids, sessions, strict=True):
        try:
            session.destroy()
        except LizardIntegrationError as error:
            errors.append(error)
        else:
            destroyed.append(sandbox_id)
    if errors:
        raise errors[0]
    return destroyed


async def afind_sandboxes(
    config: SandboxConfig, metadata: Mapping[str, str]
) -> list[SandboxRecord]:
    """Async :func:`find_sandboxes`."""
    return await run_blocking(find_sandboxes, config, metadata)


async def adestroy_sandboxes(config: SandboxConfig, sandbox_ids: Iterable[str]) -> list[str]:
    """Async :func:`destroy_sandboxes`; a cancellation waits for the kill already sent."""
    return await run_blocking(destroy_sandboxes, config, list(sandbox_ids))
