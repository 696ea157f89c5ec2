"""Check built distributions before they are published.

Usage: ``python shared/release/check_dists.py DIST_DIR [--version X.Y.Z]``

Every package in ``packages/`` must have exactly one sdist and one wheel in DIST_DIR, all at the
same version (the one given, else the repository's ``VERSION`` file), and every package that depends
on a sibling must pin it to exactly that version; every adapter must require lizard-core, and no
package may require lizard-local. Each failure names the package; the exit status is non-zero on
any.
"""

from __future__ import annotations

import argparse
import email.parser
import sys
import tarfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from packages import CORE, EMULATOR, ROOT, adapters, package_dirs


def package_names() -> list[str]:
    """Distribution names of every package in the repository."""
    return list(package_dirs())


def wheel_metadata(path: Path) -> email.message.Message:
    """The METADATA of a wheel."""
    with zipfile.ZipFile(path) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.BytesParser().parsebytes(wheel.read(name))


def sdist_metadata(path: Path) -> email.message.Message:
    """The PKG-INFO at the top of an sdist."""
    with tarfile.open(path) as sdist:
        member = next(
            m for m in sdist.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        handle = sdist.extractfile(member)
        assert handle is not None
        return email.parser.BytesParser().parsebytes(handle.read())


def check(dist: Path, version: str) -> list[str]:
    """Return one line per problem found in DIST_DIR."""
    names: dict[str, str] = {canonicalize_name(n): n for n in package_names()}
    adapter_names = {canonicalize_name(n) for n in adapters()}
    problems: list[str] = []
    found: dict[str, dict[str, Path]] = {n: {} for n in names}
    for path in sorted(dist.iterdir()):
        if path.name.endswith(".whl"):
            name: str = parse_wheel_filename(path.name)[0]
            kind = "wheel"
        elif path.name.endswith(".tar.gz"):
            name = parse_sdist_filename(path.name)[0]
            kind = "sdist"
        else:
            continue
        if name not in found:
            problems.append(f"{path.name}: not a package of this repository")
            continue
        if kind in found[name]:
            problems.append(f"{names[name]}: more than one {kind} ({path.name})")
        found[name][kind] = path
    for dist_name, kinds in found.items():
        for kind in ("sdist", "wheel"):
            if kind not in kinds:
                problems.append(f"{names[dist_name]}: no {kind} in {dist}")
                continue
            meta = wheel_metadata(kinds[kind]) if kind == "wheel" else sdist_metadata(kinds[kind])
            if meta["Version"] != version:
                problems.append(
                    f"{names[dist_name]}: {kind} version {meta['Version']} != {version}"
                )
            required: set[str] = set()
            for raw in meta.get_all("Requires-Dist") or []:
                req = Requirement(raw)
                sibling = canonicalize_name(req.name)
                if not req.marker:
                    required.add(sibling)
                if sibling in names and not req.marker and str(req.specifier) != f"=={version}":
                    problems.append(
                        f"{names[dist_name]}: {kind} requires {req} (pin siblings =={version})"
                    )
            # The roles of packages.py: an adapter without the core cannot work, and the emulator
            # is a test tool that no user of an adapter should have to install.
            if dist_name in adapter_names and CORE not in required:
                problems.append(f"{names[dist_name]}: {kind} does not require {CORE}=={version}")
            if EMULATOR in required:
                problems.append(f"{names[dist_name]}: {kind} requires {EMULATOR}, a test tool")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path)
    parser.add_argument("--version", default=(ROOT / "VERSION").read_text(encoding="utf-8").strip())
    args = parser.parse_args(argv)
    problems = check(args.dist, args.version)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if not problems:
        print(f"ok: {len(package_names())} packages at {args.version} in {args.dist}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
