"""Interactive processes kept under numbers, for a tool that names them in later calls.

A shell tool that starts a process and lets the model write to it later (the OpenAI Agents
SDK's ``write_stdin``) needs a number per process, a bound on how many are kept, and an end for
all of them. :class:`ProcessTable` keeps :class:`~lizard_core.interactive.InteractiveProcess`
objects that way.

Contract (proven against lizard-local in ``tests/test_process_table.py``):

- **Numbers.** :meth:`ProcessTable.astart` gives each kept process a number from ``first_id``
  up, never reused while the table lives. A process that ended within its start's wait is not
  kept (its number is None).
- **Bounded.** At most ``limit`` are kept: a start past it ends the least recently started or
  fed one, sparing the ``protected_recent`` most recent (the OpenAI Agents SDK's policy), after
  its own process has started. One whose end fails (a network fault, a refused request) is not
  forgotten: it stays kept under its number, the failure is logged (``lizard_core.process_table``,
  WARNING) and the start still returns its process, which has run (raising would invite running
  the command again). The table is then over the limit; the next start ends as many as needed to
  be within it again, and :meth:`ProcessTable.aterminate_all` raises if the end still fails.
- **Feeding.** :meth:`ProcessTable.afeed` writes to a kept process and returns its output; an
  unknown number is ``KeyError``. A process that ended since its last call gives its last
  output and exit code, and a process seen ended is dropped.
- **Ends.** :meth:`ProcessTable.aterminate_all` ends every kept process (one request each; a
  sandbox already gone ended them too). It tries them all; one whose end failed (a network
  fault, a refused request) stays kept under its number, so that the next call tries it again,
  and the first such error is raised once all were tried. Each call is the one request of
  :mod:`lizard_core.interactive`.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence

from lizard_core.errors import LizardIntegrationError, SandboxGoneError
from lizard_core.interactive import InteractiveProcess, Update, astart_interactive
from lizard_core.session import Session

__all__ = ["ProcessTable"]

_log = logging.getLogger(__name__)


class ProcessTable:
    """Interactive processes kept by number (see the module docstring)."""

    def __init__(self, *, limit: int = 64, protected_recent: int = 8, first_id: int = 1000) -> None:
        if limit < 1 or not 0 <= protected_recent < limit:
            raise ValueError("limit must be positive and protected_recent below it")
        self._limit = limit
        self._protected = protected_recent
        self._ids = itertools.count(first_id)
        self._kept: dict[int, InteractiveProcess] = {}
        self._used: dict[int, float] = {}  # number -> when last started or fed

    def __contains__(self, process_id: object) -> bool:
        return process_id in self._kept

    def __len__(self) -> int:
        return len(self._kept)

    async def astart(
        self,
        session: Session,
        argv: Sequence[str],
        *,
        wait: float,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        tty: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109  # the process's own limit, in the guest
    ) -> tuple[int | None, Update]:
        """Start ``argv`` (:func:`~lizard_core.interactive.astart_interactive`) and keep it.

        Returns its number (None when it already ended) and its output of the first ``wait``
        seconds.
        """
        process, update = await astart_interactive(
            session, argv, cwd=cwd, env=env, user=user, tty=tty, wait=wait, timeout=timeout
        )
        if update.exit_code is not None:
            return None, update
        victims = self._over_limit()  # chosen before the new one is in: it is never one
        process_id = next(self._ids)
        self._kept[process_id] = process
        self._used[process_id] = time.monotonic()
        for victim in victims:
            await self._end_pruned(victim)
        return process_id, update

    def _over_limit(self) -> list[int]:
        """The least recently used unprotected numbers to end so that one more fits the limit.

        More than one when an earlier end failed. They stay kept until their end succeeds, so a
        failure or a cancellation cannot lose one.
        """
        excess = len(self._kept) + 1 - self._limit
        if excess <= 0:
            return []
        by_use = sorted(self._used, key=self._used.__getitem__)
        return by_use[: len(by_use) - self._protected][:excess]

    async def _end_pruned(self, process_id: int) -> None:
        """End a process pruned past the limit; one whose end fails stays kept, logged."""
        process = self._kept.get(process_id)
        if process is None:
            return  # a concurrent feed saw it end, or another start pruned it
        try:
            await process.aterminate()
        except SandboxGoneError:
            pass  # its sandbox, and every process in it, has ended
        except LizardIntegrationError as error:
            _log.warning(
                "process %d, pruned past the limit of %d, could not be ended and stays kept "
                "(the next start or aterminate_all() tries again): %s",
                process_id,
                self._limit,
                error,
            )
            return
        self._kept.pop(process_id, None)
        self._used.pop(process_id, None)

    async def afeed(self, process_id: int, data: bytes, *, wait: float) -> Update:
        """Write ``data`` to process ``process_id`` and return its output within ``wait`` s."""
        process = self._kept[process_id]
        try:
            update = await process.afeed(data, wait=wait)
        except BrokenPipeError:  # it ended since the last call: its last output and exit
            update = await process.afeed(b"", wait=0)
        if update.exit_code is None:
            self._used[process_id] = time.monotonic()
        else:
            self._kept.pop(process_id, None)
            self._used.pop(process_id, None)
        return update

    async def aterminate_all(self) -> None:
        """End every kept process, trying each once; the table keeps only those that failed.

        A process whose sandbox is gone counts as ended. When ending one fails otherwise, the
        others are still tried, that one stays kept (a later call tries it again), and then
        the first failure is raised, noted with how many stay kept. A cancellation leaves the
        processes not yet ended kept too.
        """
        failures: list[LizardIntegrationError] = []
        for process_id, process in list(self._kept.items()):
            try:
                await process.aterminate()
            except SandboxGoneError:
                pass  # its sandbox, and every process in it, has ended
            except LizardIntegrationError as error:
                failures.append(error)
                continue
            self._kept.pop(process_id, None)  # a concurrent feed may have dropped it already
            self._used.pop(process_id, None)
        if failures:
            first = failures[0]
            first.add_note(
                f"{len(failures)} kept process(es) could not be ended and stay kept: "
                "aterminate_all() tries them again"
            )
            raise first
