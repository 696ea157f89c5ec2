"""Files in and out of a code executor's working directory: inputs placed once, outputs found.

Frameworks' code executors hand over input files with each code block and expect the files the
block wrote back (ADK's ``input_files`` / ``output_files``, for one). :class:`FileExchange` does
both for one directory of a sandbox. Contract (proven against lizard-local in
``tests/test_exchange.py``):

- **Inputs.** :meth:`FileExchange.put` writes each named file into the directory (one request
  for a small one) unless the same content was already put under that name, so a framework
  that sends every input with every block costs nothing after the first. What it wrote, and
  whatever was in the directory before the first exchange, never comes back as output.
- **Outputs.** :meth:`FileExchange.take` returns the regular files directly in the directory that
  are new or changed since the last exchange (see :mod:`lizard_core.changes`), each with its
  bytes and a guessed mime type: one listing request, then one read per file. Files that would
  pass ``max_bytes`` in all are not read: they are returned in :attr:`Taken.too_large`, for
  the caller to say so; nothing is cut.
- **Cost.** A block that changes nothing costs one listing request; the first exchange one more
  (the baseline). Names are plain file names: a ``/``, ``.`` or ``..`` is a ValueError before
  any request.
"""

from __future__ import annotations

import hashlib
import mimetypes
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from lizard_core.changes import DirectoryWatch
from lizard_core.files import FileStat, SandboxFiles

__all__ = ["FileExchange", "Taken", "TakenFile"]


@dataclass(frozen=True)
class TakenFile:
    """A file the code wrote: its name in the directory, bytes and guessed mime type."""

    name: str
    data: bytes
    mime_type: str


@dataclass(frozen=True)
class Taken:
    """What :meth:`FileExchange.take` found: files read, and files left unread for size."""

    files: list[TakenFile] = field(default_factory=list)
    too_large: list[FileStat] = field(default_factory=list)


class FileExchange:
    """Input and output files of code run in ``directory`` (absolute) of a sandbox."""

    def __init__(self, files: SandboxFiles, directory: str, *, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise TypeError("max_bytes must be an int")
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self._watch = DirectoryWatch(files, directory)
        self._files = files
        self._max_bytes = max_bytes
        self._digests: dict[str, str] = {}
        self._marked = False

    def put(self, inputs: Mapping[str, bytes]) -> None:
        """Write the inputs not already there with the same content; see the module docstring."""
        for name in inputs:
            if "/" in name or name in ("", ".", "..") or "\0" in name:
                raise ValueError(f"input file names must be plain file names: {name!r}")
        wrote = False
        for name, data in inputs.items():
            digest = hashlib.sha256(data).hexdigest()
            if self._digests.get(name) != digest:
                self._files.write_bytes(posixpath.join(self._watch.directory, name), data)
                self._digests[name] = digest
                wrote = True
        if wrote or not self._marked:
            self._watch.mark()
            self._marked = True

    def take(self) -> Taken:
        """Read the files new or changed since the last exchange, within ``max_bytes``."""
        taken = Taken()
        budget = self._max_bytes
        for entry in self._watch.changed():
            size = entry.size or 0
            if size > budget:
                taken.too_large.append(entry)
                continue
            data = self._files.read_bytes(entry.path)
            if len(data) > budget:  # it grew after the listing
                taken.too_large.append(entry)
                continue
            budget -= len(data)
            mime = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            taken.files.append(TakenFile(entry.name, data, mime))
        return taken
