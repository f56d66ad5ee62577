"""pkq from asyncio: many tasks in flight from one event loop, and a
periodic coroutine that awaits one round trip per tick beside them. No
executor and no thread per task: an awaited ticket is polled briefly, then
resolved from pkq's completion thread.

    python pkq-py/examples/async_tasks.py
"""

import asyncio
import time

import pkq


async def ticker(rt, ticks, period_s):
    """A periodic step: one awaited round trip per tick; their durations."""
    out = []
    for i in range(ticks):
        t0 = time.perf_counter_ns()
        c = await rt.submit(pkq.ECHO, i)
        assert c.value == i
        out.append(time.perf_counter_ns() - t0)
        await asyncio.sleep(period_s)
    return out


async def burst(rt, n):
    """n tasks submitted at once, awaited together."""
    tickets = [rt.submit(pkq.ECHO, i) for i in range(n)]
    done = await asyncio.gather(*tickets)
    assert [c.value for c in done] == list(range(n))
    return n


async def main():
    with pkq.Runtime(rings=1, capacity=1024) as rt:
        steps, *bursts = await asyncio.gather(
            ticker(rt, 1000, 0.0005), *(burst(rt, 500) for _ in range(4))
        )
    steps.sort()
    print(
        f"{sum(bursts)} tasks in bursts beside 1000 ticks; a tick's round trip: "
        f"p50 {steps[500] / 1e3:.2f} us, p99 {steps[990] / 1e3:.2f} us"
    )


if __name__ == "__main__":
    asyncio.run(main())
