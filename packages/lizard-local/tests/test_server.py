"""Server start-up helpers: where state lives and how stale state is cleared."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lizard_local.server import _remove_stale_state, _state_parent


def test_stale_state_of_dead_servers_is_removed(tmp_path: Path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "lizard-local-stale"
    live = tmp_path / "lizard-local-live"
    starting = tmp_path / "lizard-local-starting"
    unrelated = tmp_path / "other"
    for d in (stale, live, starting, unrelated):
        d.mkdir()
    (stale / "server.pid").write_text(str(dead.pid))
    (live / "server.pid").write_text(str(os.getpid()))
    (unrelated / "server.pid").write_text(str(dead.pid))
    _remove_stale_state(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lizard-local-live",
        "lizard-local-starting",
        "other",
    ]


def test_state_parent_avoids_sandbox_private_paths(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("LIZARD_LOCAL_STATE_DIR", str(tmp_path / "state"))
    assert _state_parent() == str(tmp_path / "state")
    monkeypatch.delenv("LIZARD_LOCAL_STATE_DIR")
    monkeypatch.setenv("TMPDIR", "/tmp")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    parent = _state_parent()
    if os.access("/var/tmp", os.W_OK):
        assert parent == "/var/tmp"
