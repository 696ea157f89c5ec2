"""Long steps show their output while they run; short ones print nothing extra."""

from __future__ import annotations

import io
import time

from rich.console import Console
from smolagents.monitoring import AgentLogger, LogLevel

from smolagents_lizard._live_log import LiveLog


def logger() -> tuple[AgentLogger, io.StringIO]:
    out = io.StringIO()
    return AgentLogger(LogLevel.INFO, Console(file=out, width=200, highlight=False)), out


def test_short_step_prints_nothing_live() -> None:
    log, out = logger()
    with LiveLog(log, after=5.0, limit=1000) as live:
        live.write("quick\n")
    assert out.getvalue() == ""


def test_long_step_prints_earlier_and_later_output_as_it_comes() -> None:
    log, out = logger()
    with LiveLog(log, after=0.2, limit=1000) as live:
        live.write("first [bold]not markup[/bold]\n")
        deadline = time.monotonic() + 5
        while "first" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "first [bold]not markup[/bold]" in out.getvalue()  # shown before the step ends
        live.write("second\n")
        assert "second" in out.getvalue()
    assert "still running after 0.2 s" in out.getvalue()


def test_live_output_stops_at_the_limit_with_a_marker() -> None:
    log, out = logger()
    with LiveLog(log, after=0.0, limit=100) as live:
        time.sleep(0.2)
        live.write("x" * 500)
        live.write("after the limit")
    text = out.getvalue()
    assert text.count("x") == 100
    assert "live output stops here" in text
    assert "after the limit" not in text


def test_none_turns_live_output_off() -> None:
    log, out = logger()
    with LiveLog(log, after=None, limit=100) as live:
        live.write("never shown")
    assert out.getvalue() == ""
