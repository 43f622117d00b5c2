"""``within``: a deadline that never swallows the caller's cancellation."""

from __future__ import annotations

import asyncio
import sys

import pytest

from agentfly_cli.runtime.deadlines import within


async def instant() -> int:
    return 7


def test_within_returns_the_result_and_raises_timeout_error_past_the_deadline():
    async def go():
        assert await within(instant(), 1.0) == 7
        assert await within(instant(), None) == 7
        with pytest.raises(asyncio.TimeoutError):
            await within(asyncio.sleep(3600), 0.05)

    asyncio.run(go())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 has no Task.cancelling")
@pytest.mark.parametrize("yields", [1, 2, 3])
def test_a_cancellation_arriving_as_the_awaited_call_finishes_is_not_lost(yields):
    # asyncio.wait_for on Python 3.10-3.11 lost it: the task went on to its next step
    async def body():
        await within(instant(), 10)
        await asyncio.sleep(3600)  # reached only if the cancellation was lost

    async def go():
        task = asyncio.create_task(body())
        for _ in range(yields):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), 2)

    asyncio.run(go())
