"""Snapshots (``lizard_core.snapshots``) through the real lizard-sdk into lizard-local."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from lizard_core._pausing import RESTORED_NOTICE
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.inventory import destroy_sandboxes, find_sandboxes
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_core.snapshots import (
    TAG_MARK,
    afind_snapshots,
    atake_snapshot,
    delete_snapshots,
    find_snapshots,
    snapshot_name,
    take_snapshot,
)
from lizard_local import LocalServer


@pytest.fixture
def run_config(sandbox_config: SandboxConfig) -> SandboxConfig:
    """A configuration tagged with a run of its own, so tests never see each other's leftovers."""
    return sandbox_config.replace(metadata={"run": uuid.uuid4().hex[:12]})


@pytest.fixture
def session(run_config: SandboxConfig) -> Iterator[Session]:
    with Session(run_config) as s:
        yield s
    delete_snapshots(
        run_config, [r.snapshot_id for r in find_snapshots(run_config, dict(run_config.metadata))]
    )


def test_a_session_started_from_a_snapshot_has_its_files_and_a_fresh_kernel(
    session: Session, run_config: SandboxConfig
) -> None:
    run_command(session, "mkdir -p /opt/app && echo prepared > /opt/app/state", shell=True)
    kernel = Kernel(session)
    assert kernel.execute("z = 1", timeout=30).error is None
    snap = take_snapshot(session, "prepared env")
    assert snap.status == "ready"
    assert snap.label == "prepared env"
    assert snap.tags["run"] == run_config.metadata["run"]
    assert snap.tags["integration"] == "lizard-core-tests"
    assert snap.source_sandbox_id == session.sandbox_id
    run_command(session, "echo later > /opt/app/state", shell=True)  # the source runs on
    with Session(run_config, snapshot_id=snap.snapshot_id) as restored:
        assert run_command(restored, "cat /opt/app/state", shell=True).stdout == b"prepared\n"
        assert restored.sandbox_id != session.sandbox_id
        assert restored.sandbox().get_info().metadata["run"] == run_config.metadata["run"]
        fresh = Kernel(restored)
        first = fresh.execute("'z' in globals()", timeout=30)
        assert first.state_lost
        assert first.notice == RESTORED_NOTICE
        assert first.results[0].text == "False"
        second = fresh.execute("1 + 1", timeout=30)
        assert not second.state_lost
        assert second.results[0].text == "2"


def test_find_by_tags_and_age_and_delete(session: Session, run_config: SandboxConfig) -> None:
    run = dict(run_config.metadata)
    first = take_snapshot(session, "one")
    second = take_snapshot(session, "two")
    found = {r.snapshot_id for r in find_snapshots(run_config, run)}
    assert found == {first.snapshot_id, second.snapshot_id}
    assert find_snapshots(run_config, {"run": "another-run"}) == []
    assert find_snapshots(run_config, run, older_than_s=3600) == []
    time.sleep(0.05)
    assert len(find_snapshots(run_config, run, older_than_s=0.01)) == 2
    assert delete_snapshots(run_config, [first.snapshot_id, first.snapshot_id]) == [
        first.snapshot_id,
        first.snapshot_id,  # already gone counts as deleted
    ]
    assert [r.snapshot_id for r in find_snapshots(run_config, run)] == [second.snapshot_id]


def test_a_crashed_runs_leftovers_are_found_and_destroyed_by_run_not_by_project(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    crashed = sandbox_config.replace(metadata={"run": "crashed-" + uuid.uuid4().hex[:8]})
    other = sandbox_config.replace(metadata={"run": "other-" + uuid.uuid4().hex[:8]})
    left = Session(crashed)
    take_snapshot(left, "leftover")
    left.close()  # the process dies: its sandbox and snapshot stay behind
    with Session(other) as neighbour:
        take_snapshot(neighbour, "someone else's")
        run = dict(crashed.metadata)
        sandboxes = find_sandboxes(crashed, run)
        snapshots = find_snapshots(crashed, run)
        assert [r.sandbox_id for r in sandboxes] == [left.sandbox_id]
        assert [r.label for r in snapshots] == ["leftover"]
        destroy_sandboxes(crashed, [r.sandbox_id for r in sandboxes])
        delete_snapshots(crashed, [r.snapshot_id for r in snapshots])
        assert find_sandboxes(crashed, run) == []
        assert find_snapshots(crashed, run) == []
        # The other run's are untouched.
        assert neighbour.sandbox_id in lizard_local.sandboxes()
        mine = find_snapshots(other, dict(other.metadata))
        assert [r.label for r in mine] == ["someone else's"]
        delete_snapshots(other, [r.snapshot_id for r in mine])


async def test_async_faces(session: Session, run_config: SandboxConfig) -> None:
    snap = await atake_snapshot(session, "async")
    found = await afind_snapshots(run_config, dict(run_config.metadata))
    assert [r.snapshot_id for r in found] == [snap.snapshot_id]


@pytest.mark.parametrize(
    ("label", "error"),
    [("", ValueError), ("x" * 101, ValueError), (f"a {TAG_MARK}b", ValueError), (5, TypeError)],
)
def test_bad_names_raise_before_any_request(label: object, error: type) -> None:
    with pytest.raises(error):
        snapshot_name(label, {})  # type: ignore[arg-type]


def test_bad_ids_raise_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(ValueError, match="not a snapshot id"):
        delete_snapshots(sandbox_config, ["../etc"])
    assert lizard_counters.counters()["total"] == 0


def test_find_by_this_runs_and_machines_origin_tags(
    session: Session, run_config: SandboxConfig
) -> None:
    # The tags every session's config carries (lizard_core.origin), as find_sandboxes takes them.
    taken = take_snapshot(session, "origin")
    mine = find_snapshots(
        run_config,
        dict(run_config.metadata),
        integration=run_config.integration,
        run_id=run_config.run_id,
        machine_id=run_config.machine_id,
    )
    assert [r.snapshot_id for r in mine] == [taken.snapshot_id]
    assert find_snapshots(run_config, dict(run_config.metadata), run_id="another-run") == []
    assert find_snapshots(run_config, dict(run_config.metadata), machine_id="elsewhere") == []
    with pytest.raises(TypeError):
        find_snapshots(run_config, run_id=5)  # type: ignore[arg-type]


def test_an_undated_snapshot_is_never_older_than_asked() -> None:
    # Cleanup by age must not delete a snapshot whose age it cannot tell (as find_sandboxes).
    from lizard_core.snapshots import SnapshotRecord, _matches

    undated = SnapshotRecord("snap_1", "x", {"k": "v"})
    assert not _matches(undated, {"k": "v"}, older_than_s=60)
    assert _matches(undated, {"k": "v"}, older_than_s=None)


def test_a_name_too_long_with_its_tags_is_refused_before_the_snapshot_is_sent(
    run_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    # The tags ride in the name: long labels on the configuration must fail here, clearly,
    # not as the platform's 400 after the request.
    config = run_config.replace(metadata={**run_config.metadata, "task": "t" * 120})
    with Session(config) as s:
        s.sandbox()
        lizard_counters.reset_counters()
        with pytest.raises(ValueError, match="name with its tags"):
            take_snapshot(s, "a" * 60)
        assert lizard_counters.counters()["routes"].get("POST /api/sandboxes/{id}/snapshot") is None


def test_an_interrupt_during_the_snapshot_request_leaves_no_snapshot(
    session: Session,
    run_config: SandboxConfig,
    lizard_local: LocalServer,
    restore_latency: None,
    ctrl_c_handler: None,
) -> None:
    # Ctrl-C while the snapshot's answer is awaited: the platform saves it all the same (and
    # bills it by the GB-month), and only that answer names it.
    import _thread
    import threading

    session.sandbox()
    lizard_local.set_latency(800)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            take_snapshot(session, "interrupted")
    finally:
        timer.cancel()
        lizard_local.set_latency(0)
    assert find_snapshots(run_config, dict(run_config.metadata)) == []


def test_take_snapshot_checks_its_session_before_any_request(
    run_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(TypeError, match="Session"):
        take_snapshot(run_config, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wait_s"):
        take_snapshot(Session(run_config), "x", wait_s="5")  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0


def test_a_reference_round_trips_and_nothing_else_reads_as_one() -> None:
    from lizard_core.snapshots import decode_reference, encode_reference

    data = encode_reference("snap_abc123")
    assert decode_reference(data) == "snap_abc123"
    assert decode_reference(data + b"\0" * 600) is None  # trailing bytes: not a bare reference
    assert decode_reference(b"./file.txt\0\0\0") is None  # a tar
    assert decode_reference(data[:-3]) is None  # cut short
    forged = data.replace(b"snap_abc123", b"../../etc")
    assert decode_reference(forged) is None  # not an id
    with pytest.raises(ValueError, match="snapshot id"):
        encode_reference("a/b")
