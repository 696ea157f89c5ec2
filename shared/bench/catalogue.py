"""What the benchmark measures: the operations, the latency settings and the targets.

Standard library only: the orchestrator and the drivers in both environments import it (the 0.1.0
environment has none of this repository's packages).

Each operation is a user-visible call through an adapter's public API, run the same way against
the 0.1.0 packages and against this repository's: workspace operations through
``pydantic_ai_lizard.LizardSandboxBackend``, executor operations through
``smolagents_lizard.LizardExecutor``, Inspect operations through the
``inspect_lizard.LizardSandboxEnvironment`` that ``sample_init`` gives a sample, ADK operations
through the four tools of ``lizard_adk.LizardPlugin`` (0.1.1 on the reference side, the only
interface both versions have), Deep Agents operations through ``langchain_lizard.LizardSandbox``
wrapping a ``lizard.Sandbox`` (0.1.0's constructor), OpenAI Agents operations through the
``SandboxSession`` that ``openai_agents_lizard.LizardSandboxClient`` creates (ours only: no 0.1.x
release has it). Probes are raw HTTP requests (no adapter)
that price a new connection against a reused one; they run in this repository's environment
only, as do the limits: lizard-sdk's own exec of ``true`` over one kept-alive connection, the
least any operation that runs something in the sandbox can cost, and lizard-sdk's own create of
a sandbox and exec of ``true`` in it, the least a first use of a new sandbox can cost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "COLD_LIMIT",
    "LIMIT",
    "LIMIT_TARGETS",
    "OPERATIONS",
    "OURS_ONLY",
    "PROBES",
    "QUICK_OPERATIONS",
    "RATIO_TARGETS",
    "REFERENCE_TARGETS",
    "REQUEST_TARGETS",
    "SETTINGS",
    "SPEED_TARGETS",
    "WIN_TARGETS",
    "LimitTarget",
    "Operation",
    "RatioTarget",
    "ReferenceTarget",
    "Setting",
    "SpeedTarget",
    "WinTarget",
    "measurement_groups",
    "operation",
    "parse_settings",
    "repetitions",
]

Kind = Literal[
    "workspace",
    "executor",
    "inspect",
    "adk",
    "deepagents",
    "strands",
    "openai",
    "probe",
    "limit",
    "lifecycle",
]
OURS_ONLY: Final = ("probe", "limit", "lifecycle", "strands", "openai")
"""Kinds measured on this repository's side only: no adapter needed, or none in 0.1.x."""


@dataclass(frozen=True)
class Operation:
    """One measured operation."""

    name: str
    """Identifier used on the command line and in the driver protocol."""
    label: str
    """What a reader sees in the table."""
    kind: Kind
    cold: bool = False
    """Every repetition starts from nothing (a new sandbox), so no warm-up run precedes it."""


LIMIT: Final = Operation(
    "bare_exec", "limit: bare SDK exec of `true`, one kept-alive connection", "limit"
)
"""The floor every row is compared with: no adapter, no guest program, no new connection."""

COLD_LIMIT: Final = Operation(
    "sdk_first_use", "limit: the SDK's own create + exec of `true` (new sandbox)", "limit", True
)
"""The floor of a first use: lizard-sdk creates a sandbox and execs ``true`` in it, as it does
(a new connection per request), with nothing of ours."""

OPERATIONS: Final = (
    LIMIT,
    COLD_LIMIT,
    Operation(
        "first_use", "first use of a sandbox (new backend, `run(['true'])`)", "workspace", True
    ),
    Operation("command_true", "command `true`", "workspace"),
    Operation("command_1mib", "command printing 1 MiB (16,384 lines)", "workspace"),
    Operation("write_1k", "write 1 KiB", "workspace"),
    Operation("read_1k", "read 1 KiB", "workspace"),
    Operation("write_8m", "write 8 MiB", "workspace"),
    Operation("read_8m", "read 8 MiB", "workspace"),
    Operation("stat", "stat", "workspace"),
    Operation("list_dir", "list_dir of 1,000 entries", "workspace"),
    Operation("exists", "exists", "workspace"),
    Operation("realpath", "realpath (through a symlink)", "workspace"),
    Operation(
        "executor_start", "executor start (new executor, CodeAgent's set-up)", "executor", True
    ),
    Operation("step_trivial", "warm step: `x = 1 + 1`", "executor"),
    Operation("step_print_100", "warm step printing 100 lines", "executor"),
    Operation("step_final_answer", "warm step: `final_answer(42)`", "executor"),
    Operation(
        "code_agent_3_steps",
        "3-step CodeAgent run, scripted model (new executor)",
        "executor",
        True,
    ),
    Operation("inspect_exec", "Inspect `exec(['true'])`", "inspect"),
    Operation("inspect_write_1k", "Inspect `write_file` 1 KiB", "inspect"),
    Operation("inspect_read_1k", "Inspect `read_file` 1 KiB", "inspect"),
    Operation("adk_execute", "ADK tool: `lizard_execute_command('true')`", "adk"),
    Operation("adk_code_block", "ADK tool: `lizard_execute_code('x = 1 + 1')`", "adk"),
    Operation("adk_write_1k", "ADK tool: `lizard_write_file` of 1 KiB of text", "adk"),
    Operation("adk_read_1k", "ADK tool: `lizard_read_file` of 1 KiB of text", "adk"),
    Operation("deepagents_execute", "Deep Agents `execute('true')`", "deepagents"),
    Operation("deepagents_upload_1k", "Deep Agents `upload_files`, 1 KiB", "deepagents"),
    Operation("deepagents_download_1k", "Deep Agents `download_files`, 1 KiB", "deepagents"),
    Operation(
        "create_setup",
        "new session + setup step (100 files of 10 KiB) + first command",
        "lifecycle",
        True,
    ),
    Operation(
        "restore", "new session from a snapshot of that setup + first command", "lifecycle", True
    ),
    Operation(
        "inspect_sample_setup",
        "Inspect sample init (a new sandbox) + the setup + first command",
        "lifecycle",
        True,
    ),
    Operation(
        "inspect_sample_snapshot",
        "Inspect sample init from the task's setup snapshot + first command",
        "lifecycle",
        True,
    ),
    Operation("pause_resume", "pause + resume + first command", "lifecycle"),
    Operation("fork_warm", "fork of a warm executor + first cell in the copy", "lifecycle", True),
    Operation("strands_execute", "Strands `execute('true')`", "strands"),
    Operation(
        "strands_first_chunk",
        "Strands `execute_streaming`: first chunk of a line every 200 ms for 2 s",
        "strands",
    ),
    Operation("openai_exec", "OpenAI Agents `session.exec('true')`", "openai"),
    Operation("openai_write_1k", "OpenAI Agents `session.write`, 1 KiB", "openai"),
    Operation("openai_read_1k", "OpenAI Agents `session.read`, 1 KiB", "openai"),
    Operation("openai_write_8m", "OpenAI Agents `session.write`, 8 MiB", "openai"),
    Operation("openai_read_8m", "OpenAI Agents `session.read`, 8 MiB", "openai"),
    Operation(
        "openai_resume", "OpenAI Agents `client.resume` of a live sandbox, then `start()`", "openai"
    ),
    Operation(
        "openai_create",
        "OpenAI Agents `client.create`, then `start()` (new sandbox)",
        "openai",
        True,
    ),
)

PROBES: Final = (
    Operation(
        "probe_new_connection", "new connection and SSL context per request (lizard-sdk)", "probe"
    ),
    Operation("probe_new_connection_cached_ssl", "new connection, one SSL context", "probe"),
    Operation("probe_pooled", "one kept-alive connection (a pooled client)", "probe"),
)

QUICK_OPERATIONS: Final = (
    "bare_exec",
    "first_use",
    "command_true",
    "read_1k",
    "stat",
    "step_trivial",
)
"""``--quick`` runs these (plus the probes) with fewer repetitions."""


def repetitions(op: Operation, reps: int) -> int:
    """Timed repetitions of ``op`` for a run asked for ``reps``.

    A cold operation (a new sandbox each time) gets ``reps``, or ``2 * reps + 1`` (11 for 5)
    where a ratio or win target compares it with another of ours: a cold start varies by a third
    from one repetition to the next on a small machine, and its median then decides a target. A
    warm one is cheap and short, so machine noise weighs more: it gets ``2 * reps - 1`` (9 for
    5). A probe is one small request compared with other probes: ``4 * reps``.
    """
    if op.kind == "probe":
        return 4 * reps
    if not op.cold:
        return 2 * reps - 1
    return 2 * reps + 1 if op.name in _target_links() else reps


def operation(name: str) -> Operation:
    """The operation or probe called ``name``; ``ValueError`` when there is none."""
    for candidate in OPERATIONS + PROBES:
        if candidate.name == name:
            return candidate
    known = ", ".join(op.name for op in OPERATIONS + PROBES)
    raise ValueError(f"unknown operation {name!r}; known: {known}")


@dataclass(frozen=True)
class Setting:
    """Latency lizard-local adds: per response, and once more per new connection."""

    response_ms: float
    connection_ms: float = 0.0

    @property
    def name(self) -> str:
        """``0``, ``20`` or ``20+40``: how the command line and the tables spell it."""
        base = f"{self.response_ms:g}"
        return f"{base}+{self.connection_ms:g}" if self.connection_ms else base

    @property
    def description(self) -> str:
        """A heading for the setting's table."""
        if not self.response_ms and not self.connection_ms:
            return "0 ms added (loopback)"
        text = f"{self.response_ms:g} ms per response"
        if self.connection_ms:
            text += f" + {self.connection_ms:g} ms per new connection"
        return text


SETTINGS: Final = (Setting(0), Setting(20), Setting(20, 40))

_SETTING: Final = re.compile(r"(\d+(?:\.\d+)?)(?:\+(\d+(?:\.\d+)?))?")


def parse_settings(text: str) -> list[Setting]:
    """``"0,20,20+40"`` -> settings; ``ValueError`` on anything else."""
    settings: list[Setting] = []
    for part in text.split(","):
        match = _SETTING.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"bad setting {part!r}: use MS or MS+CONNECTION_MS, e.g. 20+40")
        settings.append(Setting(float(match[1]), float(match[2] or 0)))
    if not settings:
        raise ValueError("no settings given")
    return settings


REQUEST_TARGETS: Final = (
    "command_true",
    "command_1mib",
    "write_1k",
    "read_1k",
    "stat",
    "list_dir",
    "exists",
    "realpath",
    "inspect_exec",
    "inspect_write_1k",
    "inspect_read_1k",
    "strands_execute",
    "strands_first_chunk",
)
"""Operations that must cost this repository's packages at most one request."""


@dataclass(frozen=True)
class SpeedTarget:
    """At ``setting``, ours must be at least ``factor`` times faster on ``operation``."""

    operation: str
    factor: float
    what: str
    setting: Setting = Setting(20, 40)

    def met(self, speedup: float) -> bool:
        """Whether ``speedup`` (0.1.0's time over ours) reaches the target."""
        return speedup >= self.factor


SPEED_TARGETS: Final = (
    SpeedTarget("command_true", 5, "a workspace command"),
    SpeedTarget("step_trivial", 4, "a warm smolagents step"),
    SpeedTarget("code_agent_3_steps", 3, "a 3-step CodeAgent run"),
)


@dataclass(frozen=True)
class LimitTarget:
    """Ours on ``operation`` close to the limit: server time and wall time."""

    operation: str
    what: str
    server_margin_s: float = 0.006
    """Server-side time at most this much above the limit's (at every setting measured)."""
    wall_factor: float = 1.3
    """Wall time at most this many times the limit's, at ``wall_setting``."""
    wall_setting: Setting = Setting(20)

    def server_met(self, ours_s: float, limit_s: float) -> bool:
        """Whether ours' server-side time is within the margin of the limit's."""
        return ours_s - limit_s <= self.server_margin_s

    def wall_met(self, ours_s: float, limit_s: float) -> bool:
        """Whether ours' wall time is within the factor of the limit's."""
        return ours_s <= self.wall_factor * limit_s


LIMIT_TARGETS: Final = (
    LimitTarget("command_true", "`run(['true'])`"),
    LimitTarget("stat", "stat"),
    LimitTarget("step_trivial", "a warm `x = 1 + 1` step"),
)
"""Operations whose guest-side cost should come close to a bare exec."""


@dataclass(frozen=True)
class WinTarget:
    """At ``setting``, ours on ``operation`` must take less wall time than ours on ``versus``."""

    operation: str
    versus: str
    what: str
    setting: Setting = Setting(20)

    def met(self, ours_s: float, versus_s: float) -> bool:
        """Whether ``operation`` (``ours_s``) beat ``versus`` (``versus_s``)."""
        return ours_s < versus_s


WIN_TARGETS: Final = (
    WinTarget("restore", "create_setup", "restore from a snapshot beats create + setup"),
    WinTarget(
        "inspect_sample_snapshot",
        "inspect_sample_setup",
        "an Inspect sample from the task's snapshot beats one that runs the setup",
    ),
)
"""Pairs of our own operations where the first must win."""


@dataclass(frozen=True)
class RatioTarget:
    """Ours on ``operation`` takes at most ``factor`` times ours on ``versus``, in wall time.

    Judged at every setting measured.
    """

    operation: str
    versus: str
    factor: float
    what: str

    def met(self, ours_s: float, versus_s: float) -> bool:
        """Whether ``ours_s`` (``operation``) is within the factor of ``versus_s`` (``versus``)."""
        return ours_s <= self.factor * versus_s


RATIO_TARGETS: Final = (
    RatioTarget("first_use", COLD_LIMIT.name, 1.6, "a first use within 1.6× of the SDK's own"),
    RatioTarget(
        "executor_start", "first_use", 1.3, "a new executor's start within 1.3× of a first use"
    ),
)
"""Cold operations held close to the cold floor, and to each other."""


def _target_links() -> dict[str, set[str]]:
    """Each operation a ratio or win target compares -> every operation linked to it by one."""
    links: dict[str, set[str]] = {}
    for target in (*RATIO_TARGETS, *WIN_TARGETS):
        joined = links.get(target.operation, {target.operation}) | links.get(
            target.versus, {target.versus}
        )
        for name in joined:
            links[name] = joined
    return links


def measurement_groups(operations: Sequence[Operation]) -> list[list[Operation]]:
    """``operations`` in the groups a run measures together, interleaved within a repetition.

    Those a ratio or win target compares share a group (and so do targets that share an
    operation), so that a drift in machine speed between them cannot decide the target: measured
    one after the other, minutes apart, a first use and a new executor's start were seen at 1.3×
    and 2.0× of each other on the same machine. The probes share one; every other operation is
    measured alone. A group stands where its first operation is.
    """
    links = _target_links()
    groups: list[list[Operation]] = []
    placed: dict[str, list[Operation]] = {}
    for op in operations:
        key = "probe" if op.kind == "probe" else min(links.get(op.name, {op.name}))
        group = placed.get(key)
        if group is None:
            group = placed[key] = []
            groups.append(group)
        group.append(op)
    return groups


@dataclass(frozen=True)
class ReferenceTarget:
    """Ours on ``operation`` at least ``factor`` times faster than a published reference time.

    ``reference_ms`` maps a setting's name to the median ours had on the page of ``source``;
    judged at every measured setting that has one.
    """

    operation: str
    factor: float
    what: str
    source: str
    reference_ms: tuple[tuple[str, float], ...]

    def reference_s(self, setting: Setting) -> float | None:
        """The reference time at ``setting``, in seconds, or None when the page had none."""
        for name, ms in self.reference_ms:
            if name == setting.name:
                return ms / 1000
        return None

    def met(self, ours_s: float, reference_s: float) -> bool:
        """Whether ``ours_s`` is at least ``factor`` times faster than ``reference_s``."""
        return ours_s * self.factor <= reference_s


REFERENCE_TARGETS: Final = (
    ReferenceTarget(
        "code_agent_3_steps",
        1.5,
        "a 3-step CodeAgent run (new executor)",
        "the performance page of 2026-12-01",
        (("0", 419.0), ("20", 496.0), ("20+40", 575.0)),
    ),
)
"""Cold starts measured against what this repository's page showed before they were worked on:
a new executor started a Python kernel and imported numpy before its first step."""
