"""Run a trigger as the triggerer does, up to its first event."""

import asyncio


def first_event(trigger) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first())
