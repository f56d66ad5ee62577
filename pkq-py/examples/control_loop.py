"""A fixed-rate control loop in Python: each tick reads a (simulated) sensor,
asks the GPU for the command, and acts before the next tick. Prints the
round trips' percentiles and the ticks whose step missed its period.

    python pkq-py/examples/control_loop.py [--hz 10000] [--seconds 2]

The GPU's step here is pkq's built-in ECHO (it answers its 8-byte argument),
standing in for a handler of your own: build a runtime with
`pkq.Runtime(module=..., kernel=...)` to serve yours.
"""

import argparse
import math
import time

import pkq


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hz", type=float, default=10_000.0)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    period = int(1e9 / a.hz)
    ticks = int(a.seconds * a.hz)
    clock = time.perf_counter_ns
    steps, misses = [], 0
    # wait="spin": the waiting thread spins (the GIL released): the lowest
    # latency, one core busy while a task is in flight.
    with pkq.Runtime(wait="spin") as rt:
        call, echo = rt.call, pkq.ECHO
        due = clock() + period
        for tick in range(ticks):
            while clock() < due:  # the loop's own pacing
                pass
            t0 = clock()
            sensor = int(1000 * math.sin(tick / 100)) & 0xFFFF_FFFF
            command = call(echo, sensor)  # the GPU's answer
            assert command == sensor
            t1 = clock()
            steps.append(t1 - t0)
            misses += t1 > due + period
            due += period
    steps.sort()
    q = lambda p: steps[min(len(steps) - 1, int(p * len(steps)))] / 1e3
    print(
        f"{ticks} ticks at {a.hz:g} Hz: step p50 {q(0.5):.2f} us, p99 {q(0.99):.2f} us, "
        f"p99.9 {q(0.999):.2f} us; {misses} past their period"
    )


if __name__ == "__main__":
    main()
