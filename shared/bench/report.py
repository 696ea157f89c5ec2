"""Results of a benchmark run, their statistics, and the tables and page made from them.

Pure functions over plain data (no I/O, no third-party imports), so ``tests/test_bench.py`` can
check them quickly. A cell holds one operation's repetitions on one side at one setting; times
are medians, request and connection counts are medians with their range when they vary (the
0.1.0 backend polls, so its counts can differ between repetitions).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, NamedTuple, TypeVar

from catalogue import (
    LIMIT,
    LIMIT_TARGETS,
    OPERATIONS,
    PROBES,
    RATIO_TARGETS,
    REFERENCE_TARGETS,
    REQUEST_TARGETS,
    SPEED_TARGETS,
    WIN_TARGETS,
    Operation,
    Setting,
    SpeedTarget,
    operation,
)

__all__ = [
    "OURS",
    "POOLED",
    "REF",
    "Cell",
    "ChartRow",
    "Run",
    "Sample",
    "SpeedResult",
    "acceptance_lines",
    "chart_rows",
    "format_count",
    "format_limit_ratio",
    "format_ms",
    "format_ratio",
    "format_routes",
    "limit_lines",
    "markdown_table",
    "memory_table",
    "pooled_table",
    "probe_table",
    "ratio",
    "ratio_lines",
    "reference_lines",
    "render_page",
    "route_name",
    "routes_table",
    "setting_table",
    "win_lines",
]

T = TypeVar("T")

REF: Final = "0.1.0"
OURS: Final = "ours"
POOLED: Final = "ours, pooled"
"""What-if: ours with lizard-sdk's exec and files requests on one pooled client."""


@dataclass(frozen=True)
class Sample:
    """One timed repetition and what lizard-local counted during it."""

    seconds: float
    requests: int
    connections: int
    routes: Mapping[str, int] = field(default_factory=dict)
    server_seconds: float = 0.0
    """lizard-local's time on the repetition's requests, latency excluded (summed)."""


@dataclass
class Cell:
    """Repetitions of one operation on one side at one setting, or why there are none."""

    samples: list[Sample] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether there is something to report."""
        return bool(self.samples) and self.error is None

    @property
    def seconds(self) -> float:
        """Median wall time."""
        return statistics.median(s.seconds for s in self.samples)

    @property
    def server_seconds(self) -> float:
        """Median server-side time."""
        return statistics.median(s.server_seconds for s in self.samples)

    @property
    def requests(self) -> tuple[float, int, int]:
        """(median, min, max) request count."""
        return _spread(s.requests for s in self.samples)

    @property
    def connections(self) -> tuple[float, int, int]:
        """(median, min, max) count of new connections."""
        return _spread(s.connections for s in self.samples)

    @property
    def routes(self) -> dict[str, int]:
        """Requests per route in the median-time repetition (a representative breakdown)."""
        if not self.samples:
            return {}
        ordered = sorted(self.samples, key=lambda s: s.seconds)
        return dict(ordered[(len(ordered) - 1) // 2].routes)


def _spread(values: Iterable[int]) -> tuple[float, int, int]:
    items = list(values)
    return statistics.median(items), min(items), max(items)


class SpeedResult(NamedTuple):
    """One speed target as measured: both cells, 0.1.0's time over ours, and the verdict."""

    ref: Cell
    ours: Cell
    speedup: float
    met: bool


@dataclass
class Run:
    """Everything one run measured, and where."""

    settings: list[Setting]
    operations: list[Operation]
    sides: list[str]
    reps: int
    cells: dict[str, dict[str, dict[str, Cell]]] = field(default_factory=dict)
    """setting name -> operation name -> side -> cell."""
    memory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """side -> one measurement per file size (or ``{"size_mib", "error"}``)."""
    machine: dict[str, Any] = field(default_factory=dict)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """side -> ``{"python", "versions"}`` as its driver reported them."""
    duration_s: float = 0.0

    def cell(self, setting: Setting, op: str, side: str) -> Cell:
        """The cell, created empty on first access."""
        by_op = self.cells.setdefault(setting.name, {})
        return by_op.setdefault(op, {}).setdefault(side, Cell())

    def get(self, setting: Setting, op: str, side: str) -> Cell | None:
        """The cell if it holds samples, else None."""
        cell = self.cells.get(setting.name, {}).get(op, {}).get(side)
        return cell if cell is not None and cell.ok else None

    def compared(self, setting: Setting, op: str) -> tuple[Cell, Cell] | None:
        """The (0.1.0, ours) cells when both sides measured ``op``, else None."""
        ref, ours = self.get(setting, op, REF), self.get(setting, op, OURS)
        return (ref, ours) if ref is not None and ours is not None else None

    def speed_results(self) -> list[tuple[SpeedTarget, SpeedResult | None]]:
        """Each speed target with what was measured for it (None: not both sides)."""
        results: list[tuple[SpeedTarget, SpeedResult | None]] = []
        for target in SPEED_TARGETS:
            both = self.compared(target.setting, target.operation)
            if both is None:
                results.append((target, None))
                continue
            ref, ours = both
            speedup = ref.seconds / ours.seconds
            results.append((target, SpeedResult(ref, ours, speedup, target.met(speedup))))
        return results

    def failures(self) -> list[str]:
        """One line per cell that failed."""
        lines = []
        for setting_name, by_op in self.cells.items():
            for op_name, by_side in by_op.items():
                for side, cell in by_side.items():
                    if cell.error:
                        lines.append(f"{setting_name} ms, {op_name}, {side}: {cell.error}")
        return lines


# ── formatting ───────────────────────────────────────────────────────────────


def format_ms(seconds: float) -> str:
    """Milliseconds with sensible precision: ``0.8``, ``12.3``, ``142``, ``1,234``."""
    ms = seconds * 1000
    return f"{ms:.1f}" if ms < 100 else f"{ms:,.0f}"


def format_count(spread: tuple[float, int, int]) -> str:
    """``3``, or ``7 (6–9)`` when repetitions differed."""
    median, low, high = spread
    text = f"{median:g}"
    return text if low == high else f"{text} ({low}–{high})"


def ratio(ours: float, ref: float) -> float:
    """The ratio ours / 0.1.0 (below 1: ours is faster)."""
    if ref <= 0:
        raise ValueError("the 0.1.0 time must be positive")
    return ours / ref


def format_ratio(value: float) -> str:
    """``0.18 (5.6× faster)`` or ``1.30 (slower)``."""
    if value <= 1:
        return f"{value:.2f} ({1 / value:.1f}× faster)"
    return f"{value:.2f} ({value:.1f}× slower)"


def format_limit_ratio(ours: float, limit: float) -> str:
    """``3.1×``: how many times the limit's time ours takes (``–`` without a limit)."""
    return f"{ours / limit:.1f}×" if limit > 0 else "–"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table whose columns are padded, so it also reads well in a terminal."""
    widths = [len(h) for h in header]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {row!r} does not have {len(header)} columns")
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [all(_numeric(row[i]) for row in rows) and bool(rows) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if num else "-" * (w + 2)
            for w, num in zip(widths, numeric, strict=True)
        )
        + "|"
    )
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def _numeric(text: str) -> bool:
    head = text.split(" ")[0].rstrip("×").replace(",", "").replace(".", "", 1)
    return head.isdigit() or text == "–"


def _dash(cell: Cell | None, show: str) -> str:
    if cell is None:
        return "–"
    if not cell.ok:
        return "failed"
    if show == "ms":
        return format_ms(cell.seconds)
    if show == "requests":
        return format_count(cell.requests)
    return format_count(cell.connections)


def setting_table(run: Run, setting: Setting) -> str:
    """Per operation: requests, new connections, median ms on each side, and ours / 0.1.0."""
    header = [
        "operation",
        f"requests {REF}",
        f"requests {OURS}",
        f"new conns {REF}",
        f"new conns {OURS}",
        f"ms {REF}",
        f"ms {OURS}",
        f"{OURS} / {REF}",
        f"server ms {OURS}",
        f"{OURS} / limit",
        f"server {OURS} / limit",
    ]
    rows = []
    limit = run.get(setting, LIMIT.name, OURS)
    for op in run.operations:
        if op.kind == "probe":
            continue
        by_side = run.cells.get(setting.name, {}).get(op.name)
        if not by_side:
            continue
        both = run.compared(setting, op.name)
        ours = run.get(setting, op.name, OURS)
        rows.append(
            [
                op.label,
                _dash(by_side.get(REF), "requests"),
                _dash(by_side.get(OURS), "requests"),
                _dash(by_side.get(REF), "connections"),
                _dash(by_side.get(OURS), "connections"),
                _dash(by_side.get(REF), "ms"),
                _dash(by_side.get(OURS), "ms"),
                format_ratio(ratio(both[1].seconds, both[0].seconds)) if both else "–",
                "–" if ours is None else format_ms(ours.server_seconds),
                "–"
                if ours is None or limit is None
                else format_limit_ratio(ours.seconds, limit.seconds),
                "–"
                if ours is None or limit is None
                else format_limit_ratio(ours.server_seconds, limit.server_seconds),
            ]
        )
    return markdown_table(header, rows)


_ROUTE_NAMES: Final = {
    "POST /api/sandboxes": "create",
    "GET /api/sandboxes/{id}": "get info",
    "DELETE /api/sandboxes/{id}": "kill",
    "GET /api/projects": "list projects",
    "POST /api/sandboxes/{id}/exec": "exec",
    "POST /api/sandboxes/{id}/files": "upload",
    "GET /api/sandboxes/{id}/files": "download",
}


def route_name(route: str) -> str:
    """A short name for a counter key: ``POST /api/sandboxes/{id}/exec`` -> ``exec``."""
    return _ROUTE_NAMES.get(route, route.replace("/api/sandboxes/{id}", "").strip())


def format_routes(routes: Mapping[str, int]) -> str:
    """``exec 3, upload 1, download 2`` (most used first)."""
    ordered = sorted(routes.items(), key=lambda item: (-item[1], route_name(item[0])))
    return ", ".join(f"{route_name(route)} {n}" for route, n in ordered) or "none"


def routes_table(run: Run, setting: Setting) -> str:
    """Where each operation's requests go, on each side (the median-time repetition)."""
    rows = []
    for op in run.operations:
        if op.kind == "probe":
            continue
        cells = [run.get(setting, op.name, side) for side in (REF, OURS)]
        if all(cell is None for cell in cells):
            continue
        rows.append([op.label, *("–" if c is None else format_routes(c.routes) for c in cells)])
    return markdown_table(["operation", REF, OURS], rows)


def probe_table(run: Run, setting: Setting) -> str | None:
    """The three ways to send one small exec request, and what each costs over a pooled one."""
    cells = {p.name: run.get(setting, p.name, OURS) for p in PROBES}
    pooled = cells.get("probe_pooled")
    rows = []
    for probe in PROBES:
        cell = cells[probe.name]
        if cell is None:
            continue
        extra = "–" if pooled is None else format_ms(cell.seconds - pooled.seconds)
        rows.append([probe.label, format_ms(cell.seconds), format_count(cell.connections), extra])
    if not rows:
        return None
    return markdown_table(["one exec request (`true`)", "ms", "new conns", "ms over pooled"], rows)


def pooled_table(run: Run, setting: Setting) -> str | None:
    """Ours as it is against ours with exec and files on one pooled client (measured)."""
    rows = []
    for op in run.operations:
        if op.kind == "probe":
            continue
        ours = run.get(setting, op.name, OURS)
        pooled = run.get(setting, op.name, POOLED)
        if ours is None or pooled is None:
            continue
        ref = run.get(setting, op.name, REF)
        rows.append(
            [
                op.label,
                format_count(ours.connections),
                format_count(pooled.connections),
                format_ms(ours.seconds),
                format_ms(pooled.seconds),
                f"{pooled.seconds / ours.seconds:.2f}",
                "–" if ref is None else f"{ref.seconds / ours.seconds:.1f}×",
                "–" if ref is None else f"{ref.seconds / pooled.seconds:.1f}×",
            ]
        )
    if not rows:
        return None
    header = [
        "operation",
        "new conns ours",
        "new conns pooled",
        "ms ours",
        "ms pooled",
        "pooled / ours",
        f"speed-up vs {REF}",
        f"pooled vs {REF}",
    ]
    return markdown_table(header, rows)


def acceptance_lines(run: Run) -> list[str]:
    """One line per acceptance target: measured value and whether it is met."""
    lines = []
    for name in REQUEST_TARGETS:
        counts = [
            sample.requests
            for by_op in run.cells.values()
            for sample in (by_op.get(name, {}).get(OURS) or Cell()).samples
        ]
        label = operation(name).label
        if not counts:
            lines.append(f"- ⚪ {label}: at most 1 request — not measured")
            continue
        worst = max(counts)
        mark = "✅" if worst <= 1 else "❌"
        lines.append(f"- {mark} {label}: at most 1 request — ours: at most {worst} in every run")
    for target, result in run.speed_results():
        wanted = f"{target.what} at least {target.factor:g}× faster at {target.setting.description}"
        if result is None:
            lines.append(f"- ⚪ {wanted} — not measured")
            continue
        mark = "✅" if result.met else "❌"
        lines.append(
            f"- {mark} {wanted} — {result.speedup:.1f}× ({format_ms(result.ours.seconds)} ms vs "
            f"{format_ms(result.ref.seconds)} ms)"
        )
    return lines


def _measured(
    run: Run, operation: str, counterpart: Callable[[Setting], T | None]
) -> list[tuple[Setting, Cell, T]]:
    """Per setting where both were measured: ours on ``operation`` and its counterpart there."""
    return [
        (setting, ours, other)
        for setting in run.settings
        if (ours := run.get(setting, operation, OURS)) is not None
        and (other := counterpart(setting)) is not None
    ]


def limit_lines(run: Run) -> list[str]:
    """One line per limit target: ours against the bare exec, server time and wall time."""
    lines = []
    for target in LIMIT_TARGETS:
        label = f"{target.what}: server-side time within {target.server_margin_s * 1000:g} ms"
        measured = _measured(run, target.operation, partial(run.get, op=LIMIT.name, side=OURS))
        if not measured:
            lines.append(f"- ⚪ {label} of the bare exec's — not measured")
        else:
            met = all(
                target.server_met(ours.server_seconds, limit.server_seconds)
                for _, ours, limit in measured
            )
            values = "; ".join(
                f"{format_ms(ours.server_seconds)} ms vs {format_ms(limit.server_seconds)} ms "
                f"at {setting.name} ms"
                for setting, ours, limit in measured
            )
            lines.append(f"- {'✅' if met else '❌'} {label} of the bare exec's — {values}")
        wall = f"{target.what}: wall time at most {target.wall_factor:g}× the bare exec's"
        where = f"at {target.wall_setting.description}"
        ours = run.get(target.wall_setting, target.operation, OURS)
        limit = run.get(target.wall_setting, LIMIT.name, OURS)
        if ours is None or limit is None:
            lines.append(f"- ⚪ {wall} {where} — not measured")
            continue
        mark = "✅" if target.wall_met(ours.seconds, limit.seconds) else "❌"
        lines.append(
            f"- {mark} {wall} {where} — {format_limit_ratio(ours.seconds, limit.seconds)} "
            f"({format_ms(ours.seconds)} ms vs {format_ms(limit.seconds)} ms)"
        )
    return lines


def win_lines(run: Run) -> list[str]:
    """One line per win target: our operation against another of ours, in wall time."""
    lines = []
    for target in WIN_TARGETS:
        label = f"{target.what} at {target.setting.description}"
        ours = run.get(target.setting, target.operation, OURS)
        versus = run.get(target.setting, target.versus, OURS)
        if ours is None or versus is None:
            lines.append(f"- ⚪ {label} — not measured")
            continue
        mark = "✅" if target.met(ours.seconds, versus.seconds) else "❌"
        lines.append(
            f"- {mark} {label} — {format_ms(ours.seconds)} ms vs {format_ms(versus.seconds)} ms"
        )
    return lines


def ratio_lines(run: Run) -> list[str]:
    """One line per ratio target: our operation's wall time against another of ours."""
    lines = []
    for target in RATIO_TARGETS:
        label = operation(target.versus).label
        measured = _measured(run, target.operation, partial(run.get, op=target.versus, side=OURS))
        if not measured:
            lines.append(f"- ⚪ {target.what} ({label}) — not measured")
            continue
        met = all(target.met(ours.seconds, versus.seconds) for _, ours, versus in measured)
        values = "; ".join(
            f"{format_limit_ratio(ours.seconds, versus.seconds)} ({format_ms(ours.seconds)} ms "
            f"vs {format_ms(versus.seconds)} ms) at {setting.name} ms"
            for setting, ours, versus in measured
        )
        lines.append(f"- {'✅' if met else '❌'} {target.what} ({label}) — {values}")
    return lines


def reference_lines(run: Run) -> list[str]:
    """One line per reference target: ours against the time a published page showed."""
    lines = []
    for target in REFERENCE_TARGETS:
        label = f"{target.what} at least {target.factor:g}× faster than on {target.source}"
        measured = _measured(run, target.operation, target.reference_s)
        if not measured:
            lines.append(f"- ⚪ {label} — not measured")
            continue
        met = all(target.met(ours.seconds, reference) for _, ours, reference in measured)
        values = "; ".join(
            f"{reference / ours.seconds:.1f}× ({format_ms(ours.seconds)} ms vs "
            f"{format_ms(reference)} ms) at {setting.name} ms"
            for setting, ours, reference in measured
        )
        lines.append(f"- {'✅' if met else '❌'} {label} — {values}")
    return lines


@dataclass(frozen=True)
class ChartRow:
    """One operation in the chart: median wall ms on each side and of the limit."""

    label: str
    ref_ms: float | None
    ours_ms: float
    limit_ms: float


def chart_rows(run: Run, setting: Setting) -> list[ChartRow]:
    """The operations ours measured at ``setting``, in table order, when the limit was measured."""
    limit = run.get(setting, LIMIT.name, OURS)
    if limit is None:
        return []
    rows = []
    for op in run.operations:
        if op.kind in ("probe", "limit", "lifecycle"):
            continue
        ours = run.get(setting, op.name, OURS)
        if ours is None:
            continue
        ref = run.get(setting, op.name, REF)
        rows.append(
            ChartRow(
                op.label,
                None if ref is None else ref.seconds * 1000,
                ours.seconds * 1000,
                limit.seconds * 1000,
            )
        )
    return rows


def memory_table(run: Run) -> str | None:
    """Peak RSS growth while writing and reading each size, per side."""
    rows = []
    for side in (OURS, REF):
        for item in run.memory.get(side, []):
            size = f"{item['size_mib']} MiB"
            if "error" in item:
                rows.append([side, size, "failed", "failed", str(item["error"])[:80]])
                continue
            rows.append(
                [
                    side,
                    size,
                    f"{item['write_peak_mib']:.1f}",
                    f"{item['read_peak_mib']:.1f}",
                    # Freed memory the allocator kept can be reused: growth below 0 reads as 0.
                    f"{max(item['read_beyond_file_mib'], 0.0):.1f}",
                ]
            )
    if not rows:
        return None
    header = [
        "packages",
        "file",
        "write: peak MiB above start",
        "read: peak MiB above start",
        "read: beyond the file itself",
    ]
    return markdown_table(header, rows)


# ── the page ─────────────────────────────────────────────────────────────────


def _fmt_versions(env: Mapping[str, Any]) -> str:
    versions = env.get("versions", {})
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def _latency_paragraph(latency_at: str) -> str:
    if latency_at == "link":
        return (
            "Latency comes from an emulated link between the clients and lizard-local "
            "(`shared/bench/link.py`, which also terminates TLS): every chunk the server sends "
            "reaches the client that many ms later, and the first request of every new connection "
            "reaches the server that many ms later, which is what a client that never reuses "
            "connections pays for TCP and TLS handshakes on a real link. Both add to the work, as "
            "on a real network. lizard-local's own injection (`--latency-at lizard-local`) "
            "delays each request before its handler runs instead, rather than each chunk of the "
            "answer."
        )
    return (
        "Latency comes from lizard-local's own injection (`--latency-at lizard-local`): every "
        "request waits that many ms before its handler runs (the first request of a new "
        "connection waits the connection delay too), so the delay adds to the work of every "
        "answer, a streaming exec's included."
    )


def render_page(run: Run, reading: Sequence[str], chart: str | None = None) -> str:
    """The whole ``docs/performance.md``; ``chart`` is the file name of its chart, if drawn."""
    machine = run.machine
    parts = [
        "# Performance",
        "",
        "<!-- Generated by `nox -s bench` (shared/bench/run.py). Do not edit by hand: rerun. -->",
        "",
    ]
    if chart:
        parts += [
            f"![Median wall time per operation: 0.1.x, this repository, and the limit (a bare "
            f"SDK exec of `true` on a kept-alive connection)]({chart})",
            "",
            "Median wall time per operation (log scale): the published 0.1.x packages, this "
            "repository's, and the limit, a bare lizard-sdk exec of `true` on one kept-alive "
            "connection, which no operation that runs something in the sandbox can beat.",
            "",
        ]
    parts += [
        "Every request to Lizard is a network round trip, and an agent makes hundreds, so this "
        "page counts requests and new connections per operation and times them, for the "
        "published 0.1.0 packages and for this repository's, in one run against one lizard-local "
        "server. Both sides run the same benchmark code through the adapters' public APIs "
        "(`pydantic_ai_lizard.LizardSandboxBackend` for workspace operations, "
        "`smolagents_lizard.LizardExecutor` for executor operations, "
        "`inspect_lizard.LizardSandboxEnvironment` from `sample_init` for Inspect operations, "
        "the four tools of `lizard_adk.LizardPlugin` for ADK operations, "
        "`langchain_lizard.LizardSandbox` on a `lizard.Sandbox` for Deep Agents operations), "
        "over HTTPS because 0.1.0 "
        "requires it, trusting certifi's roots plus lizard-local's CA as a client of the cloud "
        "would.",
        "",
        _latency_paragraph(machine.get("latency_at", "link")),
        "",
        "lizard-local's request counters are reset before and read after every repetition. Times "
        f"are medians of {run.reps} repetitions of a cold operation (one that starts a new "
        f"sandbox; {2 * run.reps + 1} of one that a ratio or win target below compares with "
        f"another), {2 * run.reps - 1} of a warm one and {4 * run.reps} of a probe. Settings and "
        "sides alternate within each repetition, and so do the operations a target compares "
        "(the probes among themselves too), so a drift in machine load reaches all of them "
        "alike, and every warm operation gets one untimed warm-up. Absolute times depend on the "
        "machine and its load; compare within a table.",
        "",
        "## Machine",
        "",
        f"- {machine.get('cpu', 'unknown CPU')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gib', '?')} GiB memory; {machine.get('os', 'unknown OS')}",
        f"- load average {machine.get('load_before', '?')} before the run, "
        f"{machine.get('load_after', '?')} after (other work was running; ratios hold, "
        "absolute times are inflated)",
        f"- lizard-local {machine.get('lizard_local', '?')}, isolation "
        f"`{machine.get('isolation', '?')}`; latency and TLS from "
        + ("the emulated link" if machine.get("latency_at", "link") == "link" else "lizard-local"),
    ]
    for side in (REF, OURS):
        env = run.environments.get(side)
        if env:
            parts.append(f"- {side}: Python {env.get('python', '?')}; {_fmt_versions(env)}")
    parts += [
        f"- run took {run.duration_s / 60:.1f} min, {machine.get('date', '')}",
        "",
        "## Reproduce",
        "",
        "```sh",
        "nox -s bench                          # everything: 5-15 minutes on 2 cores",
        "nox -s bench -- --quick               # a few operations, fewer repetitions",
        "nox -s bench -- --settings 20+40 --reps 9 --output perf.md",
        "```",
        "",
        "The session installs smolagents-lizard 0.1.0, pydantic-ai-lizard 0.1.0, "
        "inspect-lizard 0.1.0, lizard-adk 0.1.1 and langchain-lizard 0.1.0 from PyPI "
        "(with the lizard-sdk 0.1.x they pin) in one environment and this repository's packages "
        "in another, starts lizard-local behind the emulated link, and drives each environment "
        "with `shared/bench/driver.py`; `shared/bench/memory_probe.py` measures host memory in a "
        "fresh process.",
        "",
        "## Results",
        "",
        "Requests and new connections are lizard-local's counts for one repetition (median, with "
        "the range when repetitions differed); ms is the median wall time; the last column is "
        "ours / 0.1.0 (below 1: ours is faster). Server ms is lizard-local's own time on the "
        "operation's requests (from the end of the added latency to the end of the response, "
        "a streamed exec's whole run included); ours / limit divides ours by the limit row, the "
        "bare SDK exec of `true` on one kept-alive connection, in wall time and in server time.",
    ]
    parts += _setting_sections("", [(s, setting_table(run, s)) for s in run.settings])
    slowest = max(run.settings, key=lambda s: (s.connection_ms, s.response_ms))
    parts += [
        "",
        f"### Requests by route ({slowest.description})",
        "",
        "exec is `POST …/exec`, upload `POST …/files`, download `GET …/files`.",
        "",
        routes_table(run, slowest),
    ]
    parts += [
        "",
        "## Acceptance targets",
        "",
        *acceptance_lines(run),
        *limit_lines(run),
        *win_lines(run),
        *ratio_lines(run),
        *reference_lines(run),
    ]
    probes = [(s, probe_table(run, s)) for s in run.settings]
    pooled = [(s, pooled_table(run, s)) for s in run.settings]
    if any(table for _, table in probes + pooled):
        parts += [
            "",
            "## What a connection costs",
            "",
            "lizard-sdk sends every request on a new connection with a new SSL context. "
            "lizard_core therefore sends its create, exec and files requests over one pooled "
            "connection per session, on one SSL context per process (same requests, the SDK's "
            "own error handling; kill, pause and the other lifecycle calls stay on the SDK), "
            "which is why our new-connection counts above are 0 for warm operations and 1 for a "
            "new sandbox's create and first call. "
            "`nox -s bench -- --pooled` adds the what-if that justified it: a third driver with "
            "lizard-sdk's own exec and files code routed through one `httpx.Client`.",
        ]
        parts += _setting_sections("Pooled, ", pooled)
        if any(table for _, table in probes):
            parts += [
                "",
                "What one request pays for its connection: the same small exec request (JSON mode, "
                "`true`) sent three ways, without an adapter, interleaved. The first row minus the "
                "last is the set-up a pooled client saves per request.",
                *_setting_sections("One request, ", probes),
            ]
    memory = memory_table(run)
    if memory:
        parts += [
            "",
            "## Host memory",
            "",
            "Peak RSS growth of a fresh process (at 0 ms) while `write_bytes` and `read_bytes` "
            "move one file through the workspace backend, measured from the RSS each phase starts "
            "with. The backend's API holds whole files (the data passed in was already resident "
            "when the write started; the bytes returned are part of the read's peak), so what "
            "must depend on the chunk size rather than the file size is the write peak and the "
            "read peak beyond the file itself.",
            "",
            memory,
        ]
    parts += ["", "## Reading", "", *reading]
    failures = run.failures()
    if failures:
        parts += ["", "## Failures", "", *(f"- {line}" for line in failures)]
    return "\n".join(parts) + "\n"


def _setting_sections(prefix: str, tables: list[tuple[Setting, str | None]]) -> list[str]:
    """A ``### {prefix}{setting}`` section for each setting that has a table."""
    return [
        line
        for setting, table in tables
        if table
        for line in ("", f"### {prefix}{setting.description}", "", table)
    ]


def all_operations() -> list[Operation]:
    """Every operation and probe, in table order."""
    return [*OPERATIONS, *PROBES]
