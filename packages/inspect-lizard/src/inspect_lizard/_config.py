"""``LizardSandboxConfig``: what ``sandbox=("lizard", config)`` accepts.

Inspect writes the configuration into every eval log, so it holds no credential: the API key
comes from ``LIZARD_API_KEY`` (and the URL from ``LIZARD_API_URL``) on the host that runs the
eval. Every field of 0.1.0's ``LizardSandboxConfig`` (``project_id``, ``template``, ``size``,
``lifetime_ms``) is still accepted, with the same defaults; the others are new.
"""

from __future__ import annotations

import posixpath
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lizard_core.checks import check_absolute_path, package_version
from lizard_core.config import MAX_LIFETIME_MS, MIN_LIFETIME_MS, SandboxConfig, Size
from lizard_core.snapshots import check_snapshot_id

__all__ = ["INTEGRATION", "TASK_METADATA_KEY", "LizardSandboxConfig"]

INTEGRATION: Final = "inspect"
"""The ``integration`` tag of every sandbox this package creates (0.1.0 used the same)."""
TASK_METADATA_KEY: Final = "task"
"""Metadata key naming the Inspect task a sandbox was created for (as in 0.1.0)."""
_TASK_TAG_MAX: Final = 200
_SESSION_FIELDS: Final = {"working_dir", "keep_alive", "snapshot", "setup", "setup_timeout_s"}


class LizardSandboxConfig(BaseModel):
    """One Lizard sandbox per sample: where, from what, how big, for how long.

    Values are checked when the model is built (pydantic's ``ValidationError`` is a
    ``ValueError``); the template name, region and hosts are checked again, with the
    credentials, before any sandbox is created.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    project_id: str | None = None
    """Lizard project (id, slug or name); ``LIZARD_PROJECT_ID`` when None."""
    template: str = "interpreter"
    """Template of each sample's sandbox (0.1.0 allowed only ``interpreter``, the default)."""
    size: Size | None = "small"
    """Machine size, or None for the platform's default."""
    lifetime_ms: int = Field(default=1_800_000, ge=MIN_LIFETIME_MS, le=MAX_LIFETIME_MS)
    """Lifetime of each sandbox: it is destroyed at sample cleanup, or when this runs out
    (counted from its last use while ``keep_alive`` holds)."""
    keep_alive: bool = True
    """Extend the lifetime while the sample uses its sandbox, so a long agent sample keeps it
    (one request per half lifetime at most); an idle sandbox still expires."""
    region: str | None = None
    """Region to run in, or None for the platform's default."""
    internet_access: bool = True
    """False: the sandbox has no internet access."""
    allowed_hosts: tuple[str, ...] | None = None
    """With no internet, the hosts that stay reachable."""
    envs: dict[str, str] = Field(default_factory=dict)
    """Environment variables for every command; nothing else is copied from the host."""
    working_dir: str = "/workspace"
    """The sample's working directory: relative paths and ``cwd`` resolve against it."""
    snapshot: str | None = None
    """Start every sample's sandbox from this snapshot (its id) instead of an empty template."""
    setup: str | tuple[str, ...] | None = None
    """Prepare the task's environment once: a shell command (or an argv) run in ``task_init`` in
    a sandbox of its own (from ``snapshot`` if given), whose files are snapshotted; every sample
    starts from that snapshot, and the run's end deletes it."""
    setup_timeout_s: float = Field(default=1800.0, gt=0, le=86_400)
    """How long ``setup`` may run."""

    def __hash__(self) -> int:
        # Inspect keys its sandbox caches by the configuration; dicts are not hashable.
        fields = {**self.__dict__, "envs": tuple(sorted(self.envs.items()))}
        return hash(tuple(fields.items()))

    @field_validator("snapshot")
    @classmethod
    def _snapshot_id(cls, value: str | None) -> str | None:
        return None if value is None else check_snapshot_id(value)

    @field_validator("setup")
    @classmethod
    def _setup(cls, value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        if value is not None and not (value.strip() if isinstance(value, str) else value):
            raise ValueError("setup must be a non-empty command")
        return value

    @field_validator("working_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return posixpath.normpath(check_absolute_path(value, name="working_dir"))

    def sandbox_config(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        task_name: str | None = None,
    ) -> SandboxConfig:
        """The ``lizard_core`` configuration (credentials from the arguments or ``LIZARD_*``).

        No I/O; raises ``TypeError`` / ``ValueError`` for anything invalid.
        """
        labels = {} if task_name is None else {TASK_METADATA_KEY: task_name[:_TASK_TAG_MAX]}
        # The other fields are SandboxConfig settings of the same name.
        return SandboxConfig.from_env(
            api_key=api_key,
            api_url=api_url,
            metadata=labels,
            integration=INTEGRATION,
            integration_version=package_version("inspect-lizard"),
            **self.model_dump(exclude=_SESSION_FIELDS),
        )
