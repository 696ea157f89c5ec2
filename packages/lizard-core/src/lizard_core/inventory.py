"""Find and destroy the sandboxes an integration left running, by their metadata tags.

Every sandbox a :class:`~lizard_core.session.Session` creates carries its integration's name
(``integration``) and version, the run (process) and the machine that created it
(:mod:`lizard_core.origin`) in its metadata (:attr:`SandboxConfig.sandbox_metadata
<lizard_core.config.SandboxConfig.sandbox_metadata>`), plus the caller's own labels. That is
what a process that crashed before destroying its sandboxes leaves for a later cleanup to find,
and what keeps that cleanup to this machine's (or one run's) sandboxes: a project is shared, and
a teammate's run in progress is not ours to end.

Contract (proven against lizard-local in ``tests/test_inventory.py``):

- :func:`find_sandboxes` lists the account's running sandboxes with one ``GET /api/sandboxes``
  (retried on transient failures) and keeps those whose metadata holds every given pair; the
  configuration's project is not needed. ``integration``, ``run_id``, ``machine_id`` and
  ``older_than_s`` narrow the search (a sandbox whose start time cannot be read is never
  "older"). Records are checked as untrusted input: an entry without a usable id is skipped,
  metadata that is not a map of strings counts as none, an unreadable start time as unknown.
- :func:`destroy_sandboxes` kills each id with one ``DELETE`` (retried on transient
  failures); a sandbox already gone counts as destroyed. It returns the ids it destroyed and
  raises the first error only after trying them all.
- Both raise only :class:`~lizard_core.errors.LizardIntegrationError` kinds, and have ``a``-
  prefixed coroutines that run the blocking calls in a worker thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lizard import Sandbox

from lizard_core._bridge import run_blocking
from lizard_core._platform_calls import retried
from lizard_core.config import (
    METADATA_INTEGRATION_KEY,
    METADATA_MACHINE_KEY,
    METADATA_RUN_KEY,
    SandboxConfig,
    wanted_tags,
)
from lizard_core.errors import LizardIntegrationError
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
    started_at: datetime | None = None
    """When it started (timezone-aware), if the platform said in a form that can be read."""

    @property
    def integration(self) -> str | None:
        """The integration that created it (its ``integration`` tag), if tagged."""
        return self.metadata.get(METADATA_INTEGRATION_KEY)

    @property
    def run_id(self) -> str | None:
        """The run that created it (:func:`lizard_core.origin.run_id`), if tagged."""
        return self.metadata.get(METADATA_RUN_KEY)

    @property
    def machine_id(self) -> str | None:
        """The machine that created it (:func:`lizard_core.origin.machine_id`), if tagged."""
        return self.metadata.get(METADATA_MACHINE_KEY)

    def age_s(self, now: datetime | None = None) -> float | None:
        """Seconds since it started, or None when the start time is unknown."""
        if self.started_at is None:
            return None
        return ((now or datetime.now(UTC)) - self.started_at).total_seconds()


def _started_at(value: object) -> datetime | None:
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


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
        _started_at(getattr(info, "started_at", None)),
    )


def find_sandboxes(
    config: SandboxConfig,
    metadata: Mapping[str, str] | None = None,
    *,
    integration: str | None = None,
    run_id: str | None = None,
    machine_id: str | None = None,
    older_than_s: float | None = None,
) -> list[SandboxRecord]:
    """The running sandboxes that match every filter given (blocking).

    ``metadata``: pairs the sandbox's metadata must hold. ``integration``, ``run_id``,
    ``machine_id``: its tags (e.g. ``machine_id=config.machine_id`` for this machine's).
    ``older_than_s``: started at least that many seconds ago.
    """
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    wanted = wanted_tags(
        metadata, integration=integration, run_id=run_id, machine_id=machine_id, name="metadata"
    )
    if older_than_s is not None:
        if isinstance(older_than_s, bool) or not isinstance(older_than_s, int | float):
            raise TypeError("older_than_s must be a number of seconds or None")
        if not math.isfinite(older_than_s) or older_than_s < 0:
            raise ValueError(f"older_than_s must be a finite number >= 0, not {older_than_s}")
    infos = retried(Sandbox.list, kwargs=config.api_kwargs())
    records = [record for record in map(_record, infos or ()) if record is not None]
    now = datetime.now(UTC)
    return [
        r
        for r in records
        if all(r.metadata.get(k) == v for k, v in wanted.items())
        and (older_than_s is None or _older(r.age_s(now), older_than_s))
    ]


def _older(age: float | None, than: float) -> bool:
    return age is not None and age >= than


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
    config: SandboxConfig,
    metadata: Mapping[str, str] | None = None,
    *,
    integration: str | None = None,
    run_id: str | None = None,
    machine_id: str | None = None,
    older_than_s: float | None = None,
) -> list[SandboxRecord]:
    """Async :func:`find_sandboxes`."""
    return await run_blocking(
        find_sandboxes,
        config,
        metadata,
        integration=integration,
        run_id=run_id,
        machine_id=machine_id,
        older_than_s=older_than_s,
    )


async def adestroy_sandboxes(config: SandboxConfig, sandbox_ids: Iterable[str]) -> list[str]:
    """Async :func:`destroy_sandboxes`; a cancellation waits for the kill already sent."""
    return await run_blocking(destroy_sandboxes, config, list(sandbox_ids))
