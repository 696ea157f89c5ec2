"""Which files a command or a kernel cell made: regular files new or changed in a directory.

A code executor that returns the files its code wrote (as frameworks' executors do, e.g. ADK's
``output_files``) needs to know which ones are new. :class:`DirectoryWatch` keeps the state of
one directory and compares. Contract (proven against lizard-local in ``tests/test_changes.py``):

- **Cost.** Constructing makes no request. :meth:`DirectoryWatch.mark` and
  :meth:`DirectoryWatch.changed` are one ``list_dir`` each (one exec request); nothing is read.
- **What counts.** Regular files directly in the directory (not in subdirectories; symlinks,
  directories and special files are ignored) that did not exist at the last mark, or whose size
  or modification time differ from it. A file removed is not a change. A directory that does
  not exist counts as empty, so a watch may start before its directory is made.
- **Baseline.** :meth:`DirectoryWatch.changed` makes the state it saw the new baseline, so
  consecutive calls report each change once; :meth:`DirectoryWatch.mark` resets it (after
  writing inputs, say, that should not come back as outputs). Before the first mark the
  baseline is empty: every file counts.
- **Errors** are those of :class:`~lizard_core.files.SandboxFiles` (``NotADirectoryError`` when a
  file is in the way, ``SandboxGoneError``, ...).
"""

from __future__ import annotations

import posixpath

from lizard_core.files import FileStat, SandboxFiles

__all__ = ["DirectoryWatch"]

_State = dict[str, tuple[int | None, float]]


class DirectoryWatch:
    """New and changed regular files directly in ``directory`` (absolute) of a sandbox."""

    def __init__(self, files: SandboxFiles, directory: str) -> None:
        if not isinstance(files, SandboxFiles):
            raise TypeError(f"files must be a SandboxFiles, not {type(files).__name__}")
        if not isinstance(directory, str):
            raise TypeError(f"directory must be a str, not {type(directory).__name__}")
        if not posixpath.isabs(directory) or "\0" in directory:
            raise ValueError(f"directory must be absolute and without NUL: {directory!r}")
        self._files = files
        self._directory = directory
        self._state: _State = {}

    @property
    def directory(self) -> str:
        """The directory watched."""
        return self._directory

    def _list(self) -> list[FileStat]:
        try:
            return [e for e in self._files.list_dir(self._directory) if e.kind == "file"]
        except FileNotFoundError:
            return []

    async def _alist(self) -> list[FileStat]:
        try:
            entries = await self._files.alist_dir(self._directory)
        except FileNotFoundError:
            return []
        return [e for e in entries if e.kind == "file"]

    def _compare(self, entries: list[FileStat]) -> list[FileStat]:
        changed = [e for e in entries if self._state.get(e.name) != (e.size, e.mtime)]
        self._state = {e.name: (e.size, e.mtime) for e in entries}
        return sorted(changed, key=lambda e: e.name)

    def mark(self) -> None:
        """Take the directory's current state as the baseline (one request)."""
        self._compare(self._list())

    async def amark(self) -> None:
        """Async :meth:`mark`."""
        self._compare(await self._alist())

    def changed(self) -> list[FileStat]:
        """Files new or changed since the baseline, by name; their state becomes the baseline."""
        return self._compare(self._list())

    async def achanged(self) -> list[FileStat]:
        """Async :meth:`changed`."""
        return self._compare(await self._alist())
