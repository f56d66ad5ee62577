"""Round trips from Python, in one process: pkq's `call`, an awaited
ticket in a running asyncio loop, and, beside a live runtime (whose
resident kernel holds an SM per worker, as users get it), a CuPy kernel
launch and a PyTorch op, each synchronized on its own stream.

    python round_trip.py [--samples N] [--warmup N] [--json OUT] [--raw DIR]

Rows: {"name", "p50_us", "p99_us", "samples"}; a row whose library is not
importable is left out (the reason is printed). With --raw, each row's
samples (ns, one a line, after a first line `# <row name>`) go to
DIR/<n>.txt, for pkq-bench's bindings bench, which pools and reports them
beside the other languages'. The thread is pinned to the last core it may
use once the runtime runs, as every program of that bench. Device-wide synchronization
(`torch.cuda.synchronize()`, `cupy.cuda.Device().synchronize()`) is never
called: it would wait for the resident kernel forever. Every library kernel
is launched once before the runtime is built (a first launch loads its
module, which would wait for the resident kernel too).
"""

import argparse
import asyncio
import json
import os
import time

import pkq


def percentile(sorted_ns, q):
    """The q-quantile (0..1) of sorted samples, nearest rank."""
    i = min(len(sorted_ns) - 1, max(0, round(q * (len(sorted_ns) - 1))))
    return sorted_ns[i]


def row(name, ns):
    ns = sorted(ns)
    return {
        "name": name,
        "p50_us": percentile(ns, 0.50) / 1e3,
        "p99_us": percentile(ns, 0.99) / 1e3,
        "samples": len(ns),
    }


def measure(f, samples, warmup):
    """f() timed with perf_counter_ns, `samples` times after `warmup` runs."""
    clock = time.perf_counter_ns
    for _ in range(warmup):
        f()
    out = [0] * samples
    for i in range(samples):
        t0 = clock()
        f()
        out[i] = clock() - t0
    return out


async def measure_async(rt, samples, warmup):
    clock = time.perf_counter_ns
    nop = pkq.NOP
    for _ in range(warmup):
        await rt.submit(nop)
    out = [0] * samples
    for i in range(samples):
        t0 = clock()
        await rt.submit(nop)
        out[i] = clock() - t0
    return out


def pin_last_core():
    """Pins the calling thread to the last core it may run on."""
    cores = sorted(os.sched_getaffinity(0))
    if cores:
        os.sched_setaffinity(0, {cores[-1]})


def cupy_prepare():
    """A CuPy empty kernel on a non-blocking stream, launched once: the
    launch-and-sync to time, or None (the reason printed)."""
    try:
        import cupy
    except ImportError as e:
        print(f"cupy launch + sync: skipped: cupy is not importable ({e})")
        return None
    s = cupy.cuda.Stream(non_blocking=True)
    k = cupy.RawKernel(r'extern "C" __global__ void empty() {}', "empty")
    with s:
        k((1,), (1,), ())
    s.synchronize()

    def launch():
        with s:
            k((1,), (1,), ())
        s.synchronize()

    return launch


def torch_prepare():
    """A PyTorch `add_` on a small CUDA tensor on its own stream, run once:
    the op-and-sync to time, or None (the reason printed)."""
    try:
        import torch
    except ImportError as e:
        print(f"torch op + sync: skipped: torch is not importable ({e})")
        return None
    if not torch.cuda.is_available():
        print("torch op + sync: skipped: torch sees no CUDA device")
        return None
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.zeros(16, device="cuda")
        t.add_(1)
    s.synchronize()

    def op():
        with torch.cuda.stream(s):
            t.add_(1)
        s.synchronize()

    return op


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--json", metavar="OUT", help="write the rows here as a JSON list")
    ap.add_argument("--raw", metavar="DIR", help="write each row's samples here")
    a = ap.parse_args()

    # Library kernels first: their modules load before the resident kernel runs.
    launch = cupy_prepare()
    op = torch_prepare()

    raw = {}
    with pkq.Runtime() as rt:
        pin_last_core()
        nop = pkq.NOP
        call = rt.call
        raw["round trip, python"] = measure(lambda: call(nop), a.samples, a.warmup)
        raw["round trip, python asyncio"] = asyncio.run(measure_async(rt, a.samples, a.warmup))
        if launch is not None:
            raw["cupy launch + sync"] = measure(launch, a.samples, a.warmup)
        if op is not None:
            raw["torch op + sync"] = measure(op, a.samples, a.warmup)
        assert rt.call(pkq.ECHO, 7) == 7  # still answering beside them
    rows = [row(name, ns) for name, ns in raw.items()]
    if a.raw:
        os.makedirs(a.raw, exist_ok=True)
        for k, (name, ns) in enumerate(raw.items()):
            with open(os.path.join(a.raw, f"{k}.txt"), "w") as f:
                f.write(f"# {name}\n")
                f.write("\n".join(map(str, ns)))
                f.write("\n")

    for r in rows:
        print(f"{r['name']:<30} p50 {r['p50_us']:9.2f} us   p99 {r['p99_us']:9.2f} us   ({r['samples']} samples)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
