"""The "Reading" section of the page: what the numbers of one run say, in sentences.

Generated from the data, so it stays true when the page is regenerated: every claim is computed
here (request counts, speed-ups, the share of time spent on connection set-up, memory growth)
and worded conditionally.
"""

from __future__ import annotations

from catalogue import LIMIT, LIMIT_TARGETS, OPERATIONS, SPEED_TARGETS, Setting, operation
from report import OURS, POOLED, REF, Run, format_ms

__all__ = ["reading_lines"]


def _slowest(run: Run) -> Setting | None:
    """The setting with the most latency: where the targets are judged."""
    return max(run.settings, key=lambda s: (s.connection_ms, s.response_ms), default=None)


def _requests_line(run: Run, setting: Setting) -> str | None:
    changed, same = [], []
    for op in OPERATIONS:
        both = run.compared(setting, op.name)
        if both is None:
            continue
        ref, ours = both
        if ref.requests[0] == ours.requests[0]:
            same.append(op.label)
        else:
            changed.append(f"{op.label}: {ref.requests[0]:g} → {ours.requests[0]:g}")
    if not changed and not same:
        return None
    text = "- Requests, 0.1.0 → ours: " + "; ".join(changed) + "."
    if same:
        text += f" The same count on both sides ({len(same)} operations): " + ", ".join(same) + "."
    return text


def _slower_line(run: Run, setting: Setting) -> str | None:
    slower = []
    for op in OPERATIONS:
        both = run.compared(setting, op.name)
        if both is None:
            continue
        ref, ours = both
        if ours.seconds > ref.seconds:
            slower.append(
                f"{op.label} ({ours.seconds / ref.seconds:.1f}× the time, "
                f"{ours.requests[0]:g} requests against {ref.requests[0]:g})"
            )
    if not slower:
        return None
    return f"- Slower than 0.1.0 at {setting.description}: " + "; ".join(slower) + "."


def _target_lines(run: Run) -> list[str]:
    return [
        f"- At {target.setting.description}, {target.what} takes "
        f"{format_ms(r.ours.seconds)} ms with {r.ours.requests[0]:g} request(s) against "
        f"{format_ms(r.ref.seconds)} ms with {r.ref.requests[0]:g}: {r.speedup:.1f}×, "
        f"which {'meets' if r.met else 'misses'} the {target.factor:g}× target."
        for target, r in run.speed_results()
        if r is not None
    ]


def _connection_lines(run: Run) -> list[str]:
    lines = []
    for setting in run.settings:
        parts = []
        fresh = run.get(setting, "probe_new_connection", OURS)
        cached = run.get(setting, "probe_new_connection_cached_ssl", OURS)
        kept = run.get(setting, "probe_pooled", OURS)
        if fresh is not None and kept is not None:
            text = (
                f"a request pays {format_ms(fresh.seconds - kept.seconds)} ms for a new connection "
                f"({format_ms(fresh.seconds)} ms against {format_ms(kept.seconds)} ms on a "
                "kept-alive one)"
            )
            if cached is not None:
                ssl_ms = max(fresh.seconds - cached.seconds, 0.0)
                text += f", {format_ms(ssl_ms)} ms of it building the SSL context"
            parts.append(text)
        for target in SPEED_TARGETS:
            ours = run.get(setting, target.operation, OURS)
            pooled = run.get(setting, target.operation, POOLED)
            if ours is None or pooled is None:
                continue
            text = (
                f"{target.what} goes from {format_ms(ours.seconds)} to "
                f"{format_ms(pooled.seconds)} ms with one pooled client"
            )
            ref = run.get(setting, target.operation, REF)
            if ref is not None:
                text += (
                    f" ({ref.seconds / pooled.seconds:.1f}× faster than 0.1.0 instead of "
                    f"{ref.seconds / ours.seconds:.1f}×)"
                )
            parts.append(text)
        if parts:
            lines.append(f"- At {setting.description}: " + "; ".join(parts) + ".")
    return lines


def _memory_line(run: Run) -> str | None:
    ours = [m for m in run.memory.get(OURS, []) if "error" not in m]
    if len(ours) < 2:
        return None
    small, large = min(ours, key=lambda m: m["size_mib"]), max(ours, key=lambda m: m["size_mib"])
    grow_write = large["write_peak_mib"] - small["write_peak_mib"]
    # A negative "beyond" (memory the write left behind, reused by the read) counts as none, as
    # in the table.
    grow_read = max(large["read_beyond_file_mib"], 0) - max(small["read_beyond_file_mib"], 0)
    scale = large["size_mib"] - small["size_mib"]
    bounded = max(grow_write, grow_read) < scale / 4
    return (
        f"- Host memory: going from {small['size_mib']} MiB to {large['size_mib']} MiB, the peak "
        f"beyond the data grows by {grow_write:.1f} MiB when writing and {grow_read:.1f} MiB "
        f"when reading (the file grew by {scale} MiB): "
        + (
            "the transfer overhead is bounded by the chunk size, not the file size."
            if bounded
            else "the overhead grows with the file size."
        )
    )


def _limit_lines(run: Run) -> list[str]:
    """Per setting: how far the limit targets are from a bare exec, on the server and in all."""
    lines = []
    for setting in run.settings:
        limit = run.get(setting, LIMIT.name, OURS)
        if limit is None:
            continue
        measured = [
            (target.what, cell)
            for target in LIMIT_TARGETS
            if (cell := run.get(setting, target.operation, OURS)) is not None
        ]
        if not measured:
            continue
        extra = "; ".join(
            f"{what} {format_ms(cell.server_seconds - limit.server_seconds)} ms more on the "
            f"server, {cell.seconds / limit.seconds:.1f}× its wall time"
            for what, cell in measured
        )
        lines.append(
            f"- At {setting.description} the bare exec of `true` takes "
            f"{format_ms(limit.seconds)} ms, {format_ms(limit.server_seconds)} ms of it on the "
            f"server; against it, {extra}. Time on the server beyond the bare exec's is spent "
            "inside the sandbox, not on the network."
        )
    return lines


def reading_lines(run: Run) -> list[str]:
    """Bullet lines for the page's "Reading" section."""
    lines: list[str] = []
    setting = _slowest(run)
    if setting is not None:
        for line in (_requests_line(run, setting), _slower_line(run, setting)):
            if line:
                lines.append(line)
    lines += _target_lines(run)
    lines += _limit_lines(run)
    lines += _connection_lines(run)
    memory = _memory_line(run)
    if memory:
        lines.append(memory)
    big = [run.get(s, name, OURS) for s in run.settings[-1:] for name in ("write_8m", "read_8m")]
    if all(cell is not None for cell in big) and big:
        counts = ", ".join(
            f"{operation(name).label}: {cell.requests[0]:g}"  # type: ignore[union-attr]
            for name, cell in zip(("write_8m", "read_8m"), big, strict=True)
        )
        lines.append(
            f"- Writes past the inline limit move in chunks, an upload per chunk and one exec that "
            f"assembles them; a read is one `GET files` of the whole file ({counts} requests for "
            "ours)."
        )
    if not lines:
        lines.append("- Nothing was measured on both sides; see the tables.")
    return lines
