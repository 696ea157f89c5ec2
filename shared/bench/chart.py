"""The chart that opens ``docs/performance.md``: per operation, 0.1.x, ours and the limit.

One panel per latency setting without connection latency (0 ms and 20 ms per response), one
group of horizontal bars per operation, on a log scale so a 5 ms limit and a 5 s cold start read
on one axis. The data comes from :func:`report.chart_rows`; matplotlib is imported only here and
only when a chart is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from catalogue import Setting
from report import ChartRow, Run, chart_rows

__all__ = ["chart_settings", "render_chart"]

LEFT_MS: Final = 1.0
"""Bars start at 1 ms: on a log scale a bar's length then reads as its time's magnitude."""
COLOURS: Final = {"0.1.x": "#b0b0b0", "ours": "#2b6cb0", "limit": "#e07b00"}


def chart_settings(run: Run) -> list[Setting]:
    """The settings to draw: those without connection latency that have chart rows."""
    return [s for s in run.settings if not s.connection_ms and chart_rows(run, s)]


def render_chart(run: Run, path: Path) -> bool:
    """Draw the chart into ``path`` (PNG); False, writing nothing, when there is nothing to draw."""
    panels = [(setting, chart_rows(run, setting)) for setting in chart_settings(run)]
    if not panels:
        return False
    # The panels share their operation axis: keep the operations every panel has.
    common = set.intersection(*({row.label for row in rows} for _, rows in panels))
    panels = [(setting, [row for row in rows if row.label in common]) for setting, rows in panels]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    labels = [_short(row.label) for row in panels[0][1]]
    figure, axes = plt.subplots(
        1,
        len(panels),
        figsize=(6.5 * len(panels), 0.42 * len(labels) + 1.6),
        sharey=True,
        squeeze=False,
    )
    plain = FuncFormatter(lambda value, _position: f"{value:,.0f}")
    for axis, (setting, rows) in zip(axes[0], panels, strict=True):
        _panel(axis, setting, rows)
        axis.xaxis.set_major_formatter(plain)
    first = axes[0][0]
    first.set_yticks(range(len(labels)))
    first.set_yticklabels(labels, fontsize=8)
    first.invert_yaxis()  # shared by every panel: once, so the first operation is on top
    handles, names = first.get_legend_handles_labels()
    figure.legend(handles, names, loc="upper center", ncol=3, frameon=False)
    figure.tight_layout(rect=(0, 0, 1, 0.95))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _panel(axis: Any, setting: Setting, rows: list[ChartRow]) -> None:
    height = 0.27
    series: tuple[tuple[str, list[float | None], float], ...] = (
        ("0.1.x", [row.ref_ms for row in rows], -height),
        ("ours", [row.ours_ms for row in rows], 0.0),
        ("limit", [row.limit_ms for row in rows], height),
    )
    for name, values, offset in series:
        drawn = [(i + offset, v) for i, v in enumerate(values) if v]
        if not drawn:
            continue  # e.g. no 0.1.x side in this run: no bars and no legend entry
        axis.barh(
            [y for y, _ in drawn],
            [v - LEFT_MS for _, v in drawn],
            height,
            left=LEFT_MS,
            label=name,
            color=COLOURS[name],
        )
    axis.set_xscale("log")
    axis.set_xlim(left=LEFT_MS)
    axis.set_xlabel("median wall time, ms (log scale)")
    axis.set_title(setting.description, fontsize=10)
    axis.grid(axis="x", which="major", alpha=0.3)


def _short(label: str, width: int = 48) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
