"""Benchmark driver: performs operations on request and reports their wall times.

``python driver.py [--pooled]`` runs inside one environment (the 0.1.0 packages, or this
repository's) and speaks JSON lines with the orchestrator (``run.py``): one request on stdin, one
reply on stdout.

=================  ==============================================================================
request            reply
=================  ==============================================================================
``hello``          ``python``, ``versions`` of the packages that matter
``prepare`` (op)   set up one repetition (untimed)
``act``            run it: ``seconds`` of wall time, measured here; ``ok: false`` if it failed
``finish``         clean it up (untimed)
``close``          destroy the warm sandboxes and exit
=================  ==============================================================================

Every reply has ``ok``; a failure carries ``error`` (the exception and the end of its traceback).
The orchestrator resets lizard-local's counters between ``prepare`` and ``act`` and reads them
after ``act``, so only the operation's own requests are counted. Anything the libraries print goes
to stderr: stdout belongs to the protocol.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import traceback
from importlib import metadata
from typing import IO, Any

from workload import Prepared, Workload, pool_sdk_connections, timed

__all__ = ["PACKAGES", "main", "versions"]

PACKAGES = (
    "pydantic-ai-lizard",
    "smolagents-lizard",
    "inspect-lizard",
    "lizard-adk",
    "langchain-lizard",
    "strands-lizard",
    "openai-agents-lizard",
    "lizard-core",
    "lizard-sdk",
    "pydantic-ai-slim",
    "smolagents",
    "inspect-ai",
    "google-adk",
    "deepagents",
    "strands-agents",
    "openai-agents",
    "httpx",
)


def versions() -> dict[str, str]:
    """Installed versions of :data:`PACKAGES` (absent ones left out)."""
    found: dict[str, str] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _failure(exc: BaseException) -> dict[str, Any]:
    tail = "".join(traceback.format_exception(exc)[-6:])
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": tail[-4000:]}


def serve(requests: IO[str], replies: IO[str]) -> None:
    """Answer requests until ``close`` or end of input."""
    workload = Workload()
    prepared: Prepared | None = None

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        for line in requests:
            request = json.loads(line)
            command = request.get("cmd")
            try:
                if command == "hello":
                    reply({"ok": True, "python": platform.python_version(), "versions": versions()})
                elif command == "prepare":
                    prepared = None
                    prepared = workload.prepare(request["op"])
                    reply({"ok": True})
                elif command == "act":
                    if prepared is None:
                        raise RuntimeError("act without a successful prepare")
                    seconds, result = timed(prepared.act)
                    prepared.check(result)
                    reply({"ok": True, "seconds": seconds})
                elif command == "finish":
                    current, prepared = prepared, None
                    if current is not None:
                        current.finish()
                    reply({"ok": True})
                elif command == "close":
                    break
                else:
                    raise ValueError(f"unknown request {command!r}")
            except Exception as exc:
                reply(_failure(exc))
    finally:
        try:
            workload.close()
            reply({"ok": True, "closed": True})
        except Exception as exc:
            reply(_failure(exc))


def main() -> None:
    """Serve the protocol on the real stdout; send everything else printed to stderr.

    ``--pooled`` first routes lizard-sdk's exec and files requests through one pooled client
    (see :func:`workload.pool_sdk_connections`).
    """
    if "--pooled" in sys.argv[1:]:
        pool_sdk_connections()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
