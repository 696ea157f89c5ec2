"""The ``lizard-local`` command.

``lizard-local serve [--port 0] [--tls] [--latency-ms N]`` starts the emulator on 127.0.0.1 and
prints ``export LIZARD_API_URL=...``, ``export LIZARD_API_KEY=...`` and
``export LIZARD_PROJECT_ID=...`` lines (plus ``export SSL_CERT_FILE=...`` with ``--tls``), then
serves until interrupted; every sandbox is killed on exit.

The key is random unless given: ``--api-key-fd N`` reads it from file descriptor N (what
:class:`~lizard_local.LocalServer` uses: nothing in ``/proc`` shows it), else ``--api-key``, else
``LIZARD_LOCAL_API_KEY``. Those two are readable through ``/proc/<pid>/cmdline`` and
``/proc/<pid>/environ`` by processes of the same user, host-mode sandbox commands included.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lizard-local",
        description="Loopback emulator of the Lizard Sandboxes API (development tool; "
        "not a security boundary).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the API on 127.0.0.1 until interrupted")
    serve.add_argument("--port", type=int, default=0, help="port (0 = pick a free one)")
    serve.add_argument("--tls", action="store_true", help="serve https with a generated CA")
    serve.add_argument(
        "--latency-ms", type=float, default=0, help="delay (ms) before every API request is handled"
    )
    serve.add_argument(
        "--api-key",
        default=None,
        help="the accepted key (default: LIZARD_LOCAL_API_KEY or random); visible in the "
        "process list, so prefer --api-key-fd",
    )
    serve.add_argument(
        "--api-key-fd",
        type=int,
        default=None,
        metavar="FD",
        help="read the key from this file descriptor (up to end of file), then close it",
    )
    serve.add_argument("--project-id", default="proj_local", help="the one project's id")
    serve.add_argument(
        "--isolation",
        choices=["auto", "namespace", "host"],
        default="auto",
        help="namespace (root on Linux) or host mode; auto picks namespace when it works",
    )
    serve.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="stop when stdin closes (used when a parent process owns the server)",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log sandbox events")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.port < 0 or args.port > 65535:
        print("lizard-local: --port must be 0..65535", file=sys.stderr)
        return 2
    if args.latency_ms < 0:
        print("lizard-local: --latency-ms must not be negative", file=sys.stderr)
        return 2
    api_key = args.api_key
    if args.api_key_fd is not None:
        try:
            api_key = _read_key(args.api_key_fd)
        except (OSError, ValueError) as exc:
            print(f"lizard-local: --api-key-fd: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="lizard-local %(levelname)s %(message)s",
    )
    from lizard_local.server import serve

    serve(
        port=args.port,
        tls=args.tls,
        latency_ms=args.latency_ms,
        api_key=api_key,
        project_id=args.project_id,
        isolation=args.isolation,
        exit_on_stdin_eof=args.exit_on_stdin_eof,
    )
    return 0


def _read_key(fd: int) -> str:
    """The key written to ``fd`` (surrounding whitespace dropped); ValueError when empty."""
    with os.fdopen(fd, "rb") as f:
        key = f.read(4096).decode().strip()
    if not key:
        raise ValueError("no key was written to the descriptor")
    return key
