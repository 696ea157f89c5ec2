from __future__ import annotations

from typing import Any

import pytest

from lizard_core import SandboxConfig, Session
from lizard_core._jobs import JOBS_ROOT, is_job_file, schedule_cleanup, take_cleanup


class _Handle:
    sandbox_id = "sbx_jobs_test"


def test_only_job_directories_are_scheduled_and_taken_once() -> None:
    with pytest.raises(ValueError, match="not a job directory"):
        schedule_cleanup(_Handle(), "/tmp/elsewhere")
    schedule_cleanup(_Handle(), f"{JOBS_ROOT}/b")
    schedule_cleanup(_Handle(), f"{JOBS_ROOT}/a")
    assert take_cleanup("sbx_jobs_test") == [f"{JOBS_ROOT}/a", f"{JOBS_ROOT}/b"]
    assert take_cleanup("sbx_jobs_test") == []


def test_job_files_are_files_directly_in_a_job_directory() -> None:
    assert is_job_file(f"{JOBS_ROOT}/job/frames")
    assert not is_job_file(f"{JOBS_ROOT}/job")
    assert not is_job_file(f"{JOBS_ROOT}/job/../../etc/passwd")
    assert not is_job_file(7)


def test_a_destroyed_session_leaves_nothing_pending(sandbox_config: SandboxConfig) -> None:
    session = Session(sandbox_config)
    sandbox: Any = session.sandbox()
    schedule_cleanup(sandbox, f"{JOBS_ROOT}/left-behind")
    session.destroy()
    assert take_cleanup(str(sandbox.sandbox_id)) == []
