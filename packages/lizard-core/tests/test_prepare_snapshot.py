"""A prepared environment (``lizard_core.prepared``) through the real SDK into lizard-local."""

from __future__ import annotations

import uuid

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SetupFailedError
from lizard_core.prepared import aprepare_snapshot, prepare_snapshot
from lizard_core.session import Session
from lizard_core.snapshots import delete_snapshots, find_snapshots
from lizard_local import LocalServer


@pytest.fixture
def run_config(sandbox_config: SandboxConfig) -> SandboxConfig:
    return sandbox_config.replace(metadata={"run": uuid.uuid4().hex[:12]})


def test_a_setup_runs_once_and_every_restore_has_its_files(
    run_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    before = set(lizard_counters.sandboxes())
    record = prepare_snapshot(run_config, "mkdir -p /opt/app && echo ready > /opt/app/state", "app")
    try:
        assert record.label == "app"
        assert record.tags["run"] == run_config.metadata["run"]
        assert set(lizard_counters.sandboxes()) == before  # the setup's sandbox is gone
        for _ in range(2):
            with Session(run_config, snapshot_id=record.snapshot_id) as copy:
                assert run_command(copy, ["cat", "/opt/app/state"]).stdout == b"ready\n"
        routes = lizard_counters.counters()["routes"]
        assert routes["POST /api/sandboxes/{id}/exec"] == 3  # the setup once, then each cat
        found = find_snapshots(run_config, dict(run_config.metadata))
        assert [r.snapshot_id for r in found] == [record.snapshot_id]
    finally:
        delete_snapshots(run_config, [record.snapshot_id])


async def test_a_failed_setup_takes_no_snapshot_and_leaves_no_sandbox(
    run_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    before = set(lizard_local.sandboxes())
    with pytest.raises(SetupFailedError) as caught:
        await aprepare_snapshot(run_config, ["sh", "-c", "echo broken >&2; exit 3"])
    assert caught.value.exit_code == 3
    assert "broken" in caught.value.output
    assert find_snapshots(run_config, dict(run_config.metadata)) == []
    assert set(lizard_local.sandboxes()) == before


@pytest.mark.parametrize("setup", ["", "  ", [], ["ok", 3], b"ls", None])
def test_a_bad_setup_is_refused_before_any_request(
    run_config: SandboxConfig, setup: object
) -> None:
    with pytest.raises((TypeError, ValueError)):
        prepare_snapshot(run_config, setup)  # type: ignore[arg-type]
