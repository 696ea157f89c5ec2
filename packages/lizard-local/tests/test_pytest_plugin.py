"""The pytest plugin: fixtures, LIZARD_* variables, and a failed session on leaks."""

from __future__ import annotations

import os

import pytest

from lizard_local import LocalServer

CLEAN = """
import os
from lizard import Sandbox

def test_clean(lizard_counters):
    assert os.environ["LIZARD_API_URL"] == lizard_counters.url
    sb = Sandbox.create("base", project_id=os.environ["LIZARD_PROJECT_ID"])
    assert sb.process.exec_("echo $((6 * 7))").stdout == "42"
    sb.kill()
    assert lizard_counters.counters()["total"] == 3
"""

LEAKY_SANDBOX = """
import os
from lizard import Sandbox

def test_forgets_to_kill(lizard_local):
    Sandbox.create("base", project_id=os.environ["LIZARD_PROJECT_ID"])
"""

LEAKY_PROCESS = """
import subprocess

def test_starts_a_marked_process_outside_the_server(lizard_local):
    env = dict(os.environ, LIZARD_EMU_INSTANCE=lizard_local.instance)
    subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
"""


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makepyfile(source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lizard-local-isolation=host")


def test_clean_session_passes(pytester: pytest.Pytester):
    result = run(pytester, CLEAN)
    result.assert_outcomes(passed=1)
    assert result.ret == 0


def test_leaked_sandboxes_and_processes_fail_the_session(pytester: pytest.Pytester):
    result = run(pytester, LEAKY_SANDBOX + LEAKY_PROCESS)
    result.assert_outcomes(passed=2, errors=1)  # the failure is reported at session teardown
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*sandboxes left alive at the end*processes started by lizard-local outlived it*"]
    )


def test_session_fixture_environment(lizard_local: LocalServer):
    assert os.environ["LIZARD_API_KEY"] == lizard_local.api_key
