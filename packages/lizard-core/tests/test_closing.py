import anyio
import pytest

from lizard_core.closing import ClosesOnExit


class Resource(ClosesOnExit):
    def __init__(self) -> None:
        self.closed: list[str] = []

    def close(self) -> None:
        self.closed.append("close")

    async def aclose(self) -> None:
        self.closed.append("aclose")


def test_with_returns_the_object_and_closes_it_on_exit():
    resource = Resource()
    with resource as entered:
        assert entered is resource
        assert resource.closed == []
    assert resource.closed == ["close"]


def test_async_with_awaits_aclose_on_exit():
    resource = Resource()

    async def use() -> None:
        async with resource as entered:
            assert entered is resource
        assert resource.closed == ["aclose"]

    anyio.run(use)


def test_leaving_on_an_error_closes_and_lets_the_error_through():
    resource = Resource()
    with pytest.raises(KeyError), resource:
        raise KeyError("boom")
    assert resource.closed == ["close"]


def test_a_subclass_without_close_says_so():
    with pytest.raises(NotImplementedError), ClosesOnExit():
        pass
