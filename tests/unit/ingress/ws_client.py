"""A WebSocket client step shared by the unit and integration tests of the gateway."""

from __future__ import annotations

import aiohttp


async def close_code_after(
    session: aiohttp.ClientSession, url: str, frames: list[str | bytes]
) -> int:
    """Connect to ``url``, send ``frames`` (text or binary), and return the code the gateway
    closed the stream with (asserting that it did close it)."""
    async with session.ws_connect(url) as ws:
        for frame in frames:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)
        message = await ws.receive()
        assert message.type is aiohttp.WSMsgType.CLOSE, message
        assert ws.close_code is not None
        return ws.close_code
