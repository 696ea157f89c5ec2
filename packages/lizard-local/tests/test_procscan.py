"""Finding and killing processes by their environment marker."""

from __future__ import annotations

import os
import subprocess

from lizard_local import procscan


def test_find_and_kill_marked_processes():
    marker = b"LIZARD_EMU_SANDBOX=sbx_procscan"
    env = dict(os.environ, LIZARD_EMU_SANDBOX="sbx_procscan")
    procs = [subprocess.Popen(["sleep", "60"], env=env) for _ in range(2)]
    other = subprocess.Popen(["sleep", "60"], env=dict(os.environ, LIZARD_EMU_SANDBOX="sbx_other"))
    try:
        assert sorted(procscan.find_marked(marker)) == sorted(p.pid for p in procs)
        assert procs[0].pid in procscan.children_of(os.getpid())
        assert procscan.kill_marked(marker, rounds=1) == 2
        for p in procs:
            assert p.wait(5) == -9
        assert procscan.find_marked(marker) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
