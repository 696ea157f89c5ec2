"""Rewrite the library search path (``RUNPATH``/``RPATH``) of an ELF executable in place.

A Python built with a shared ``libpython`` (pyenv's, for one) finds that library through an
absolute ``RUNPATH`` such as ``/root/.pyenv/versions/3.11.7/lib``. When a namespace sandbox sees
that installation under another path, a copy of the small executable with the path rewritten
lets it start there. The new string is written over the old one in the dynamic string table, so
it must not be longer; nothing else of the file changes.
"""

from __future__ import annotations

import struct

__all__ = ["relocate_runpath", "runpath"]

_SHT_DYNAMIC = 6
_DT_NULL = 0
_DT_RPATH = 15
_DT_RUNPATH = 29


def _string_slots(data: bytes) -> list[tuple[int, int]]:
    """(file offset, length) of every ``RUNPATH``/``RPATH`` string; ValueError if not ELF."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        raise ValueError("not an ELF file")
    try:
        return _read_slots(data)
    except (struct.error, ValueError, IndexError) as exc:
        raise ValueError(f"malformed ELF file: {exc}") from exc


def _read_slots(data: bytes) -> list[tuple[int, int]]:
    wide = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    if wide:
        (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        section = order + "IIQQQQIIQQ"
        dyn, dyn_size = order + "qQ", 16
    else:
        (shoff,) = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        section = order + "IIIIIIIIII"
        dyn, dyn_size = order + "iI", 8
    if shoff == 0 or shoff + shentsize * shnum > len(data):
        raise ValueError("no section headers")
    headers = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
    slots = []
    for header in headers:
        kind, offset, size, link = header[1], header[4], header[5], header[6]
        if kind != _SHT_DYNAMIC or link >= len(headers):
            continue
        strtab = headers[link][4]
        for pos in range(offset, min(offset + size, len(data) - dyn_size + 1), dyn_size):
            tag, value = struct.unpack_from(dyn, data, pos)
            if tag == _DT_NULL:
                break
            if tag in (_DT_RPATH, _DT_RUNPATH):
                start = strtab + value
                end = data.index(b"\0", start)
                slots.append((start, end - start))
    return slots


def runpath(data: bytes) -> list[str]:
    """The ``RUNPATH``/``RPATH`` entries of an ELF file (empty when it has none)."""
    out: list[str] = []
    for start, length in _string_slots(data):
        out.extend(p for p in data[start : start + length].decode().split(":") if p)
    return out


def relocate_runpath(data: bytes, old_prefix: str, new_prefix: str) -> bytes | None:
    """``data`` with every search path under ``old_prefix`` moved under ``new_prefix``.

    None when no entry lies under ``old_prefix`` (nothing to do); ValueError when the file is
    not ELF or a rewritten string would be longer than the original.
    """
    old_prefix = old_prefix.rstrip("/")
    out = bytearray(data)
    changed = False
    for start, length in _string_slots(data):
        entries = data[start : start + length].decode().split(":")
        moved = [
            new_prefix + e[len(old_prefix) :]
            if e == old_prefix or e.startswith(old_prefix + "/")
            else e
            for e in entries
        ]
        if moved == entries:
            continue
        new = ":".join(moved).encode()
        if len(new) > length:
            raise ValueError(f"the new search path {new!r} does not fit in {length} bytes")
        out[start : start + length] = new + b"\0" * (length - len(new))
        changed = True
    return bytes(out) if changed else None
