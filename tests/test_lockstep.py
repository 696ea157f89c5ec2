"""One version for every package, written once; siblings pinned exactly; sdists self-contained."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from check_dists import check, sdist_metadata, wheel_metadata
from packages import ROOT, package_dirs

VERSION = (ROOT / "VERSION").read_text(encoding="utf-8").strip()
PACKAGES = package_dirs()


def test_the_four_packages_are_discovered() -> None:
    assert {"lizard-core", "lizard-local", "smolagents-lizard", "pydantic-ai-lizard"} <= set(
        PACKAGES
    )


@pytest.mark.parametrize("name", list(PACKAGES))
def test_package_reads_the_one_version_file(name: str) -> None:
    folder = PACKAGES[name]
    assert (folder / "VERSION").resolve() == (ROOT / "VERSION").resolve()
    assert (folder / "lockstep.py").resolve() == (
        ROOT / "shared" / "build" / "lockstep.py"
    ).resolve()
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project, "versions are written only in VERSION"
    assert set(project["dynamic"]) == {"version", "dependencies"}


@pytest.mark.parametrize("name", list(PACKAGES))
def test_siblings_are_pinned_through_the_hook(name: str) -> None:
    data = tomllib.loads((PACKAGES[name] / "pyproject.toml").read_text(encoding="utf-8"))
    deps = data["tool"]["hatch"]["metadata"]["hooks"]["custom"]["dependencies"]
    for dep in deps:
        if dep.split("=")[0].split(">")[0].split("<")[0].strip() in PACKAGES:
            assert dep.endswith("=={version}"), f"{name}: {dep} must be pinned with {{version}}"


@pytest.mark.parametrize("name", list(PACKAGES))
def test_package_license_is_the_repository_license(name: str) -> None:
    assert (PACKAGES[name] / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


@pytest.mark.parametrize("name", ["lizard-core", "smolagents-lizard"])
def test_wheel_built_from_the_sdist_has_the_version_and_the_pin(name: str, tmp_path: Path) -> None:
    sdist_dir = tmp_path / "sdist"
    build = [sys.executable, "-m", "build", "--no-isolation"]
    subprocess.run([*build, "--sdist", "-o", str(sdist_dir), str(PACKAGES[name])], check=True)
    (sdist,) = sdist_dir.glob("*.tar.gz")
    assert sdist_metadata(sdist)["Version"] == VERSION
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        assert not [m.name for m in archive.getmembers() if m.issym()], "an sdist holds no symlinks"
        archive.extractall(tmp_path / "unpacked", filter="data")
    assert any(n.endswith("/VERSION") for n in names)
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    wheel_dir = tmp_path / "wheel"
    subprocess.run([*build, "--wheel", "-o", str(wheel_dir), str(unpacked)], check=True)
    (wheel,) = wheel_dir.glob("*.whl")
    meta = wheel_metadata(wheel)
    assert meta["Version"] == VERSION
    if name != "lizard-core":
        assert f"lizard-core=={VERSION}" in (meta.get_all("Requires-Dist") or [])


def test_check_dists_names_the_package_with_a_mismatched_version(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "build", "--no-isolation", "-o", str(tmp_path)]
    for folder in PACKAGES.values():
        subprocess.run([*build, str(folder)], check=True, capture_output=True)
    assert check(tmp_path, VERSION) == []
    problems = check(tmp_path, "9.9.9")
    assert problems
    for name in PACKAGES:
        assert any(line.startswith(f"{name}: ") and "9.9.9" in line for line in problems)
