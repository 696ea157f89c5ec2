"""Volumes (``lizard_core.volumes``) and sessions made with one, against lizard-local."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxStateError
from lizard_core.session import Session
from lizard_core.volumes import (
    adelete_volume,
    aensure_volume,
    afind_volumes,
    check_volume_name,
    delete_volume,
    ensure_volume,
    find_volumes,
    get_volume,
    resize_volume,
)
from lizard_local import LocalServer


@pytest.fixture
def name(sandbox_config: SandboxConfig) -> Iterator[str]:
    volume = "v-" + uuid.uuid4().hex[:10]
    yield volume
    delete_volume(sandbox_config, volume)


def test_a_volume_outlives_its_sessions_one_at_a_time(
    sandbox_config: SandboxConfig, name: str
) -> None:
    with Session(sandbox_config, volume=name, volume_size_gb=2) as first:
        run_command(first, "echo kept > /workspace/data", shell=True)
        record = get_volume(sandbox_config, name)
        assert record is not None
        assert record.attached_to == first.sandbox_id
        assert record.size_gb == 2
        with pytest.raises(SandboxStateError):
            Session(sandbox_config, volume=name).sandbox()  # attached to one sandbox at a time
        with pytest.raises(SandboxStateError):
            delete_volume(sandbox_config, name)  # not while attached
    with Session(sandbox_config, volume=name) as second:
        assert run_command(second, "cat /workspace/data", shell=True).stdout == b"kept\n"
    free = get_volume(sandbox_config, name)
    assert free is not None
    assert free.attached_to is None


def test_lifecycle_get_or_create_list_resize_delete(
    sandbox_config: SandboxConfig, name: str
) -> None:
    made = ensure_volume(sandbox_config, name, size_gb=3)
    assert ensure_volume(sandbox_config, name, size_gb=9).volume_id == made.volume_id  # kept
    assert name in [v.name for v in find_volumes(sandbox_config)]
    assert resize_volume(sandbox_config, name, 4).size_gb == 4
    assert get_volume(sandbox_config, made.volume_id) is not None  # by id too
    assert delete_volume(sandbox_config, name) is True
    assert delete_volume(sandbox_config, name) is False
    assert get_volume(sandbox_config, name) is None


async def test_async_faces(sandbox_config: SandboxConfig, name: str) -> None:
    made = await aensure_volume(sandbox_config, name)
    assert made.volume_id in [v.volume_id for v in await afind_volumes(sandbox_config)]
    assert await adelete_volume(sandbox_config, name) is True


@pytest.mark.parametrize(
    ("value", "error"),
    [("", ValueError), ("UPPER", ValueError), ("a" * 65, ValueError), (1, TypeError)],
)
def test_bad_names_raise_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, value: object, error: type
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(error):
        check_volume_name(value)
    with pytest.raises(error):
        ensure_volume(sandbox_config, value)  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0
