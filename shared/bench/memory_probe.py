"""Host memory of a large write and read through the workspace backend, in a process of its own.

``python memory_probe.py SIZE_MIB`` writes a file of that size through
``pydantic_ai_lizard.LizardSandboxBackend.write_bytes`` and reads it back with ``read_bytes``,
then prints one JSON object. Connection settings come from the ``LIZARD_*`` variables and
``SSL_CERT_FILE``, as for the driver.

Peak RSS comes from the kernel's high-water mark (``VmHWM``), reset before each phase by writing
``5`` to ``/proc/self/clear_refs``; glibc is asked to hand freed memory back first
(``malloc_trim``), so each peak is growth caused by that phase alone. The backend's API holds
whole files (``write_bytes`` takes the data, ``read_bytes`` returns it), so the file's own bytes
are in memory by contract: what must stay bounded by the chunk size is the peak *beyond* them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import os
import re
import sys
from typing import Any

__all__ = ["main", "measure", "rss_kib"]

MIB = 1024 * 1024


def _status(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match[1])


def rss_kib() -> int:
    """Resident set size now, in KiB."""
    return _status("VmRSS")


def _reset_peak() -> int:
    """Return freed memory to the system, restart the high-water mark; the RSS it starts from."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")
    return rss_kib()


async def measure(size_mib: int) -> dict[str, Any]:
    """Write and read ``size_mib`` MiB; peaks in MiB above the RSS each phase started from."""
    from pydantic_ai_lizard import LizardSandboxBackend

    backend = LizardSandboxBackend(lifetime_ms=600_000)
    try:
        root = (await backend.working_dir()).rstrip("/")
        path = f"{root}/memory-probe.bin"
        # Warm up every code path (imports, SSL, the guest programs) with a small file.
        await backend.write_bytes(path, os.urandom(MIB))
        await backend.read_bytes(path)
        idle = _reset_peak()

        data = os.urandom(size_mib * MIB)
        start = _reset_peak()
        await backend.write_bytes(path, data)
        write_peak = _status("VmHWM") - start
        del data

        start = _reset_peak()
        back = await backend.read_bytes(path)
        read_peak = _status("VmHWM") - start
        if len(back) != size_mib * MIB:
            raise RuntimeError(f"read back {len(back)} bytes, not {size_mib} MiB")
        del back
    finally:
        await backend.destroy()
    return {
        "size_mib": size_mib,
        "idle_rss_mib": idle / 1024,
        # The data passed to write_bytes was resident before the write began.
        "write_peak_mib": write_peak / 1024,
        # read_bytes must return the whole file: size_mib of the peak is the result itself.
        "read_peak_mib": read_peak / 1024,
        "read_beyond_file_mib": read_peak / 1024 - size_mib,
    }


def main() -> None:
    """Print the measurement for the size given on the command line as one JSON line."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    result = asyncio.run(measure(int(sys.argv[1])))
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
