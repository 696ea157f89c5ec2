"""The exposed-port proxy's bounds: connections at once, and the time to send a request head."""

from __future__ import annotations

import asyncio

from lizard_local.port_proxy import PortProxy


async def _answer(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 5)


async def test_connections_past_the_bound_are_refused() -> None:
    proxy = PortProxy(9, "secret", max_connections=2)
    listener = await proxy.start()
    held = [await asyncio.open_connection("127.0.0.1", listener) for _ in range(2)]
    await asyncio.sleep(0.1)  # both are being served (waiting for their heads)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener)
        assert (await _answer(reader)).startswith(b"HTTP/1.1 503")
        writer.close()
    finally:
        for _, w in held:
            w.close()
        await proxy.close()


async def test_a_head_that_never_comes_closes_the_connection() -> None:
    proxy = PortProxy(9, "secret", head_timeout_s=0.3)
    listener = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener)
        writer.write(b"GET / HTTP/1.1\r\n")  # and then nothing
        assert await _answer(reader) == b""  # closed by the proxy, not by our 5 s wait
        writer.close()
        await asyncio.sleep(0.05)
        assert not proxy._tasks
    finally:
        await proxy.close()
