"""One library (torch or cupy) beside a live pkq runtime, in a process of
its own (test_sharing.py runs it with a time limit: a call that waits for
the resident kernel must not hang the test run). Prints what happens, one
line a step, flushed; the last line names the step it reached.

    python sharing_child.py torch|cupy
"""

import sys
import threading
import time

import pkq

WATCH_S = 3.0  # how long a free is watched beside the live runtime


def say(*a):
    print(*a, flush=True)


def timed(what, f):
    t0 = time.perf_counter()
    r = f()
    say(f"{what}: {(time.perf_counter() - t0) * 1e3:.3f} ms")
    return r


def answers(rt, word):
    assert rt.call(pkq.ECHO, word) == word
    say(f"runtime answers ({word})")


def torch_side():
    import torch

    s = torch.cuda.Stream()
    # Before the runtime: the context, the op's module (a first launch
    # loads it, which would wait for the resident kernel), some memory.
    with torch.cuda.stream(s):
        x = torch.zeros(1024, device="cuda")
        x.add_(1)
    s.synchronize()
    keep = torch.empty(1 << 20, device="cuda")
    del keep  # cached by torch's allocator, not freed
    rt = pkq.Runtime()
    answers(rt, 1)
    with torch.cuda.stream(s):
        ys = timed("torch allocations beside the runtime (cached)", lambda: [torch.empty(1 << 20, device="cuda") for _ in range(4)])
        big = timed("torch allocation beside the runtime (new, 256 MiB)", lambda: torch.empty(1 << 26, device="cuda"))
        timed("torch add_ + stream sync", lambda: (x.add_(1), s.synchronize()))
        assert x.cpu()[0].item() == 2.0  # a copy on this stream, synced on it
    answers(rt, 2)
    timed("torch frees (del: back to torch's cache)", lambda: (ys.clear(), None))
    del big
    answers(rt, 3)
    return rt, torch.cuda.empty_cache, "torch.cuda.empty_cache()"


def cupy_side():
    import cupy

    s = cupy.cuda.Stream(non_blocking=True)
    k = cupy.RawKernel(r'extern "C" __global__ void inc(float* x) { x[threadIdx.x] += 1.0f; }', "inc")
    a = cupy.zeros(32, dtype=cupy.float32)
    with s:
        k((1,), (32,), (a,))  # compiled and loaded before the runtime
    s.synchronize()
    rt = pkq.Runtime()
    answers(rt, 1)
    bufs = timed("cupy allocations beside the runtime", lambda: [cupy.empty(1 << 20, dtype=cupy.float32) for _ in range(4)])
    with s:
        timed("cupy RawKernel launch + stream sync", lambda: (k((1,), (32,), (a,)), s.synchronize()))
    assert float(a[0].get(stream=s)) == 2.0
    answers(rt, 2)
    timed("cupy frees (del: back to cupy's pool)", lambda: (bufs.clear(), None))
    answers(rt, 3)
    pool = cupy.get_default_memory_pool()
    return rt, pool.free_all_blocks, "cupy free_all_blocks()"


def main():
    which = sys.argv[1]
    rt, free, name = torch_side() if which == "torch" else cupy_side()
    say(f"STEP {name}")
    returned = []
    t0 = time.perf_counter()

    def run():
        free()
        returned.append(time.perf_counter() - t0)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(WATCH_S)
    if returned:
        say(f"{name} returned beside the live runtime after {returned[0] * 1e3:.3f} ms")
    else:
        say(f"{name} still waiting after {WATCH_S} s beside the live runtime")
    answers(rt, 4)
    t1 = time.perf_counter()
    rt.shutdown()
    say(f"runtime shut down in {(time.perf_counter() - t1) * 1e3:.3f} ms")
    th.join(30)
    if returned:
        say(f"{name} returned {(returned[0] - (t1 - t0)) * 1e3:.3f} ms after the shutdown began")
    else:
        say(f"{name} still waiting 30 s after the shutdown")
    say("STEP done")


if __name__ == "__main__":
    main()
