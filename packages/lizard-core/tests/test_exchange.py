"""``FileExchange`` against lizard-local: inputs placed once, outputs found and bounded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.exchange import FileExchange, TakenFile
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"


@pytest.fixture
def files(sandbox_config: SandboxConfig) -> Iterator[SandboxFiles]:
    with Session(sandbox_config) as session:
        yield SandboxFiles(session)


def _write(files: SandboxFiles, path: str, text: str) -> None:
    script = 'mkdir -p "$(dirname "$2")" && printf %s "$1" > "$2"'
    assert run_command(files.session, ["sh", "-c", script, "sh", text, path]).exit_code == 0


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (1.0, TypeError), (True, TypeError)]
)
def test_bad_limits_are_refused(files: SandboxFiles, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        FileExchange(files, "/tmp/x", max_bytes=value)


@pytest.mark.parametrize("name", ["a/b", "..", ".", "", "nul\0"])
def test_input_names_must_be_plain_and_nothing_is_sent(
    files: SandboxFiles, lizard_counters: LocalServer, name: str
) -> None:
    with pytest.raises(ValueError, match="plain file names"):
        FileExchange(files, "/tmp/x", max_bytes=100).put({name: b"x"})
    assert lizard_counters.counters()["total"] == 0


def test_inputs_are_placed_once_and_are_no_output(
    files: SandboxFiles, lizard_counters: LocalServer
) -> None:
    exchange = FileExchange(files, "/tmp/exchange", max_bytes=1000)
    _write(files, "/tmp/exchange/before.txt", "there before")
    exchange.put({"in.csv": b"a,b\n"})
    assert files.read_bytes("/tmp/exchange/in.csv") == b"a,b\n"
    _write(files, "/tmp/exchange/out.txt", "made")
    lizard_counters.reset_counters()
    exchange.put({"in.csv": b"a,b\n"})  # the same content: nothing sent
    assert lizard_counters.counters()["total"] == 0
    taken = exchange.take()
    assert taken.files == [TakenFile("out.txt", b"made", "text/plain")]
    assert taken.too_large == []
    assert lizard_counters.counters()["routes"] == {EXEC: 1, "GET /api/sandboxes/{id}/files": 1}
    assert exchange.take().files == []
    exchange.put({"in.csv": b"changed"})  # new content is written, and is still no output
    assert files.read_bytes("/tmp/exchange/in.csv") == b"changed"
    assert exchange.take().files == []


def test_files_past_the_budget_are_left_and_named(files: SandboxFiles) -> None:
    exchange = FileExchange(files, "/tmp/budget", max_bytes=10)
    exchange.put({})
    _write(files, "/tmp/budget/a.bin", "123456")
    _write(files, "/tmp/budget/b.bin", "7890123")
    taken = exchange.take()
    assert [(f.name, f.data, f.mime_type) for f in taken.files] == [
        ("a.bin", b"123456", "application/octet-stream")
    ]
    assert [(e.name, e.size) for e in taken.too_large] == [("b.bin", 7)]
