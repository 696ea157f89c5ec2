"""Run a command in a Lizard sandbox with ``LizardTool``.

    python examples/run_command.py

With LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses the Lizard cloud; without them it starts
lizard-local (the loopback emulator, ``pip install lizard-local``), so it runs offline.
"""

from __future__ import annotations

import contextlib
import os

from openai_agents_lizard import LizardTool


def main() -> None:
    with contextlib.ExitStack() as stack:
        if not os.environ.get("LIZARD_API_KEY"):
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url}")
        tool = stack.enter_context(LizardTool())
        print(tool.run("uname -sr && python3 --version"))


if __name__ == "__main__":
    main()
