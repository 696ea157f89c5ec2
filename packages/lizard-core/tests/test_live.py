"""The guest protocol against the Lizard cloud: what lizard-local can only assume.

Runs only with LIZARD_LIVE_TESTS=1 and LIZARD_API_KEY / LIZARD_PROJECT_ID set (`nox -s live --
lizard-core`); it creates one billed sandbox and destroys it. The account comes from lizard-local's
pytest plugin (``lizard_cloud``).

What it settles, which lizard-local only emulates: whether exact bytes survive the platform's
stream cap and line splitting, what the files endpoint does with a FIFO, a device and a
directory (whatever it does, the contract must hold), and whether it sends a ``Content-Length``,
which is what keeps a read at one request.
"""

from __future__ import annotations

import errno
import os
import random
import time
from collections.abc import Iterator

import httpx
import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.files import READ_GUARD_S, SandboxFiles
from lizard_core.session import Session
from lizard_local.pytest_plugin import LIVE, Cloud

pytestmark = [*LIVE, pytest.mark.enable_socket]

MiB = 1024 * 1024
SCRATCH = "/tmp/lizard-core-live"


@pytest.fixture(scope="module")
def cloud(lizard_cloud: Cloud) -> Iterator[Session]:
    # Short-lived on purpose: a lost connection cannot leave a sandbox billing for long.
    config = SandboxConfig.from_env(
        api_key=lizard_cloud.api_key,
        project_id=lizard_cloud.project_id,
        api_url=lizard_cloud.api_url,
        lifetime_ms=900_000,
        integration="lizard-core-live-tests",
    )
    session = Session(config)
    try:
        run_command(session, ["mkdir", "-p", SCRATCH])
        yield session
    finally:
        session.destroy()


def test_binary_and_large_output_come_back_exact(cloud: Session) -> None:
    binary = run_command(cloud, ["sh", "-c", "printf 'a\\377\\000\\r\\n'; printf '\\376' >&2"])
    assert (binary.stdout, binary.stderr) == (b"a\xff\x00\r\n", b"\xfe")
    # Past the platform's 512 KiB stream cap, incompressible: the spill path.
    code = "import random, sys; sys.stdout.buffer.write(random.Random(8).randbytes(3 * 2**20))"
    noise = run_command(cloud, ["python3", "-c", code])
    assert noise.stdout == random.Random(8).randbytes(3 * MiB)
    # Lines longer than the platform's 64 KiB split, deflated into one request.
    long_lines = run_command(cloud, ["python3", "-c", "print('x' * 200000); print('y' * 70000)"])
    assert long_lines.stdout == b"x" * 200_000 + b"\n" + b"y" * 70_000 + b"\n"


def test_reads_are_exact_and_special_files_fail_without_blocking(cloud: Session) -> None:
    files = SandboxFiles(cloud)
    data = os.urandom(MiB)
    files.write_bytes(f"{SCRATCH}/random", data)
    assert files.read_bytes(f"{SCRATCH}/random") == data
    run_command(cloud, ["mkfifo", f"{SCRATCH}/fifo"])
    for path in (f"{SCRATCH}/fifo", "/dev/zero"):
        started = time.monotonic()
        with pytest.raises(OSError, match="Not a regular file") as caught:
            files.read_bytes(path)
        assert caught.value.errno == errno.EINVAL, caught.value
        assert time.monotonic() - started < READ_GUARD_S + 15
    with pytest.raises(IsADirectoryError):
        files.read_bytes(SCRATCH)
    with pytest.raises(FileNotFoundError):
        files.read_bytes(f"{SCRATCH}/missing")


def test_the_files_endpoint_sends_a_length(cloud: Session, lizard_cloud: Cloud) -> None:
    # Without a Content-Length a read cannot tell a file from a device streamed without end, so
    # lizard_core asks the guest first: two requests per read instead of one.
    SandboxFiles(cloud).write_bytes(f"{SCRATCH}/sized", b"12345")
    response = httpx.get(
        f"{lizard_cloud.api_url}/api/sandboxes/{cloud.sandbox_id}/files",
        params={"path": f"{SCRATCH}/sized"},
        headers={"X-API-Key": lizard_cloud.api_key},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.content == b"12345"
    assert response.headers.get("content-length") == "5", dict(response.headers)
