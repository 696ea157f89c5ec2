"""A child's wait status read as an exit code: what the agent and the kernel client share.

Part of the agent and kernel client programs (bundled into each by ``lizard_core._guest.source``).
"""

from __future__ import annotations

import os


def returncode(status: int) -> int:
    """A wait status as ``Popen.returncode``: the exit status, or minus the signal that killed it.

    What ``os.waitstatus_to_exitcode`` gives from Python 3.9 on (``waitpid`` here is never asked
    for stopped children).
    """
    # One of the two is always 0: an exit leaves the signal bits 0, a signal the exit bits.
    return os.WEXITSTATUS(status) or -os.WTERMSIG(status)
