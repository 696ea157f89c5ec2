"""``with`` and ``async with`` for anything that owns a sandbox resource and closes it.

Contract:

- A class that defines ``close()`` and ``aclose()`` and derives from :class:`ClosesOnExit` can
  be used in ``with`` (leaving calls ``close()``) and ``async with`` (leaving awaits
  ``aclose()``); entering returns the object itself and makes no request.
- Leaving closes on success and on error alike, and never swallows the block's error.
"""

from __future__ import annotations

from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit:
    """Mixin: leaving a ``with`` block calls :meth:`close`, an ``async with`` :meth:`aclose`."""

    def close(self) -> None:
        """Release what the object holds (blocking); the subclass defines it."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Async :meth:`close`; the subclass defines it."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
