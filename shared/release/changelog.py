"""Release notes from ``CHANGELOG.md`` (Keep a Changelog): one version's section, checked first.

Usage: ``python shared/release/changelog.py X.Y.Z [--changelog PATH]`` prints the body of the
section headed ``## [X.Y.Z] - YYYY-MM-DD``, unwrapped; the release workflow makes it the GitHub
release notes, and the release check runs the same extraction so that a tag without notes never
gets as far as PyPI.

The section must exist exactly once, carry an ISO date, and say something. Link reference
definitions (``[X.Y.Z]: https://...``) belong to the whole file, not a section: they are left out.
Standard library only: the release job runs it on the runner's own Python.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?:\s+-\s+(?P<date>.+?))?\s*$")
LINK_DEFINITION = re.compile(r"^\[[^\]]+\]:\s+\S+")
# Lines that start a block of their own: headings, list items, quotes, tables.
BLOCK_START = re.compile(r"^(#|[-*+]\s|\d+[.)]\s|>|\|)")


class ChangelogError(ValueError):
    """The changelog has no usable section for the requested version."""


def section(text: str, version: str) -> str:
    """Return the body of ``version``'s section (without its heading), stripped of blank edges.

    Raises ``ChangelogError`` when the section is missing, repeated, undated, badly dated or empty.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _heading_version(line) == version]
    if not starts:
        raise ChangelogError(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' section")
    if len(starts) > 1:
        raise ChangelogError(f"CHANGELOG.md has {len(starts)} sections for {version}")
    start = starts[0]
    match = HEADING.match(lines[start])
    assert match is not None  # _heading_version matched this line
    date = match["date"]
    if date is None:
        raise ChangelogError(f"the {version} section has no date ('## [{version}] - YYYY-MM-DD')")
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        raise ChangelogError(f"the {version} section's date {date!r} is not YYYY-MM-DD") from None
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if not LINK_DEFINITION.match(line):
            body.append(line)
    notes = "\n".join(body).strip()
    if not notes:
        raise ChangelogError(f"the {version} section is empty")
    return notes


def unwrap(markdown: str) -> str:
    """Join hard-wrapped lines into one line per paragraph or list item.

    The changelog is wrapped for reading in an editor, but GitHub renders each newline of a
    release description as a line break. Headings, list items, quotes, tables and fenced code keep
    their own lines.
    """
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            out.append(line)
            continue
        continues = (
            not fenced
            and stripped
            and out
            and out[-1].strip()
            and not out[-1].lstrip().startswith(("#", "|", "```", "~~~"))
            and not BLOCK_START.match(stripped)
        )
        if continues:
            out[-1] = f"{out[-1].rstrip()} {stripped}"
        else:
            out.append(line)
    return "\n".join(out)


def release_notes(text: str, version: str) -> str:
    """The GitHub release description for ``version``: its section, unwrapped."""
    return unwrap(section(text, version))


def _heading_version(line: str) -> str | None:
    match = HEADING.match(line)
    return match["version"] if match else None


def main(argv: list[str] | None = None) -> int:
    """Print one version's release notes; exit 1 with the reason when there are none."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--changelog", type=Path, default=CHANGELOG)
    args = parser.parse_args(argv)
    try:
        notes = release_notes(args.changelog.read_text(encoding="utf-8"), args.version)
    except (OSError, ChangelogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
