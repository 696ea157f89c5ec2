"""Request bodies too large for argv travel as files: how a kernel cell of any size gets there.

A guest request rides in the exec's argv, which the sandbox's kernel limits (128 KiB per item,
about 2 MiB in all), so a cell of a few megabytes (large ``send_variables`` in smolagents) could
not start at all. Contract:

- :func:`encode_body` is the body's JSON, refused with ``ValueError`` past :data:`MAX_BODY_BYTES`
  (what the kernel daemon reads in one request) before any request is made.
- A body over :data:`STAGE_OVER_BYTES` is uploaded by :func:`stage_body` to a job directory in
  the sandbox, one ``POST files`` per :data:`~lizard_core.files.CHUNK_SIZE` (retried only as
  idempotent uploads are), and the request names the files (``staged``) instead of carrying
  the body; the guest reads them in order and removes them. Smaller bodies cost nothing
  extra. The caller schedules the job directory for cleanup by the next guest request; an
  upload that fails part-way schedules it itself, so no chunk is left behind.
- The same upload carries a command's large stdin (:mod:`lizard_core.commands`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

from lizard_core.files import CHUNK_SIZE
from lizard_core.guest import JOBS_ROOT, schedule_cleanup
from lizard_core.session import Session

__all__ = ["MAX_BODY_BYTES", "STAGE_OVER_BYTES", "encode_body", "stage_body"]

STAGE_OVER_BYTES: Final = 512 * 1024
"""Bodies up to this size (as JSON) go in argv: about 700 KB of base64, well under the limit."""
MAX_BODY_BYTES: Final = 200 * 1024 * 1024
"""The largest body sent: under the kernel daemon's 256 MiB request limit, with room for the
keys the kernel client adds."""


def encode_body(body: dict[str, Any]) -> bytes:
    """``body`` as compact JSON; ValueError when it is over :data:`MAX_BODY_BYTES`."""
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(
            f"The request is {len(data):,} bytes as JSON, over the kernel's limit of "
            f"{MAX_BODY_BYTES:,}; send large data as a file instead."
        )
    return data


def stage_body(session: Session, sandbox: Any, data: bytes) -> tuple[str, list[str]]:
    """Upload ``data`` in chunks to a new job directory; return it and the files, in order."""
    job = f"{JOBS_ROOT}/{uuid.uuid4().hex[:16]}"
    names = []
    try:
        for index, start in enumerate(range(0, len(data), CHUNK_SIZE)):
            name = f"{job}/b{index:06d}"
            session.call(
                session.transport().write_bytes,
                str(sandbox.sandbox_id),
                name,
                data[start : start + CHUNK_SIZE],
                idempotent=True,
            )
            names.append(name)
    except BaseException:
        schedule_cleanup(sandbox, job)
        raise
    return job, names
