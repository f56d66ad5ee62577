"""The GPU part: tasks through a live runtime. Each test is marked ``gpu``:
skipped with its reason where no GPU is reachable, a failure there under
``PKQ_REQUIRE_GPU=1``."""

import asyncio
import collections
import gc
import os
import random
import struct
import threading
import time

import pytest

import pkq

pytestmark = pytest.mark.gpu

MS = 1_000_000  # ns


def echo_value(args: bytes) -> int:
    """What ECHO answers for `args`: its six words (zero-filled) folded,
    word i rotated left by 8 * i bits; a lone first word as itself."""
    words = struct.unpack("<6Q", args.ljust(pkq.ARGS_BYTES, b"\0"))
    acc = 0
    for i, w in enumerate(words):
        r = (8 * i) % 64
        acc ^= ((w << r) | (w >> (64 - r))) & (2**64 - 1) if r else w
    return acc


def test_call_nop_and_echo_on_random_inputs(rt):
    rng = random.Random(1)
    assert rt.call(pkq.NOP) == 0
    for _ in range(2000):
        w = rng.getrandbits(64)
        assert rt.call(pkq.ECHO, w) == w
    for n in range(pkq.ARGS_BYTES + 1):
        args = rng.randbytes(n)
        assert rt.call(pkq.ECHO, args) == echo_value(args), n
        assert rt.call(pkq.ECHO, bytearray(args)) == echo_value(args), n
    c = rt.submit(pkq.ECHO, 5).wait()
    assert c.value == 5 and c.device_end_ns >= c.device_start_ns > 0


def test_submit_wait_poll_count_every_task(rt):
    rng = random.Random(2)
    n = 5000
    expected = [(i << 32) | rng.getrandbits(32) for i in range(n)]
    tickets = [rt.submit(pkq.ECHO, w) for w in expected]
    seen = collections.Counter()
    for i, t in enumerate(tickets):
        if i % 2:
            seen[t.wait(timeout=30).value] += 1
        else:
            while (c := t.poll()) is None:
                pass
            seen[c.value] += 1
        assert t.consumed
    assert seen == collections.Counter(expected)
    assert all(v == 1 for v in seen.values())
    with pytest.raises(pkq.TicketConsumed):
        tickets[0].wait()
    with pytest.raises(pkq.TicketConsumed):
        tickets[1].poll()
    tickets[0].release()  # a consumed ticket is left as it is


def test_try_submit_full():
    with pkq.Runtime(capacity=64) as rt:
        long = rt.submit(pkq.SPIN, 200 * MS)
        held, full = [], 0
        for _ in range(1000):
            try:
                held.append(rt.try_submit(pkq.NOP))
            except pkq.Full:
                full += 1
                break
        assert full == 1, "a ring of 64 slots never filled behind a 200 ms task"
        assert long.wait().value >= 200 * MS
        assert all(t.wait().value == 0 for t in held)


def test_a_submit_waiting_for_room_lets_other_threads_free_it():
    # A ring of 64 slots filled behind a long task; one thread's submit
    # then waits for room, which comes only once the main thread takes the
    # tickets: that wait must not hold the GIL.
    with pkq.Runtime(capacity=64) as rt:
        long = rt.submit(pkq.SPIN, 100 * MS)
        held = []
        while True:
            try:
                held.append(rt.try_submit(pkq.NOP))
            except pkq.Full:
                break
        got = []
        waiter = threading.Thread(target=lambda: got.append(rt.submit(pkq.ECHO, 5).wait().value))
        waiter.start()
        time.sleep(0.05)  # the waiter is in its wait for room
        assert long.wait().value >= 100 * MS
        for t in held:
            t.wait()
        waiter.join(timeout=10)
        assert not waiter.is_alive(), "the submit waiting for room kept the GIL"
        assert got == [5]


def test_batches_and_packs_of_numpy_arrays(rt):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**64 - 1, size=10_000, dtype=np.uint64, endpoint=True)
    for packed in (False, True):
        b = rt.submit_batch(pkq.ECHO, words, packed=packed)
        assert len(b) == words.size
        got = b.wait(timeout=60)
        assert isinstance(got, np.ndarray) and got.dtype == np.uint64
        assert np.array_equal(got, words), packed
        assert b.consumed
        with pytest.raises(pkq.TicketConsumed):
            b.wait()
    # As a list, from bytes, and 16-byte arguments (ECHO folds them).
    assert rt.submit_batch(pkq.ECHO, words[:100].tobytes()).wait(as_list=True) == [
        int(w) for w in words[:100]
    ]
    pairs = words[:200].reshape(100, 2)
    got = rt.submit_batch(pkq.ECHO, pairs, arg_size=16).wait()
    assert [int(v) for v in got] == [echo_value(p.tobytes()) for p in pairs]
    # NOP takes no bytes: a count.
    zeros = rt.submit_batch(pkq.NOP, 10_000, arg_size=0, packed=True).wait()
    assert zeros.size == 10_000 and not zeros.any()
    with pytest.raises(pkq.InvalidArgument):
        rt.submit_batch(pkq.ECHO, b"\0" * 12)
    with pytest.raises(pkq.PayloadTooLarge):
        rt.submit_batch(pkq.ECHO, b"\0" * 16, arg_size=16, packed=True)
    with pytest.raises(pkq.OpMismatch):
        rt.submit_batch(pkq.NOP, words[:4])


def test_batch_poll_and_failed_task(rt):
    args = struct.pack("<4Q", MS, MS, pkq.SPIN_MAX_NS + 1, MS)
    b = rt.submit_batch(pkq.SPIN, args)
    while b.poll() < len(b):
        pass
    with pytest.raises(pkq.TaskError) as e:
        b.wait()
    assert e.value.index == 2 and e.value.status == 2 and e.value.op == pkq.SPIN


def test_batch_timeout_keeps_it(rt):
    b = rt.submit_batch(pkq.SPIN, struct.pack("<2Q", 50 * MS, 1))
    with pytest.raises(pkq.Timeout):
        b.wait(timeout=0.001)
    assert not b.consumed
    assert list(b.wait(as_list=True))[0] >= 50 * MS


def io_expected(data: bytes, out_len: int, key: int) -> bytes:
    return bytes((data[i] if i < len(data) else 0) ^ key for i in range(out_len))


def test_io_tasks_with_bytes_memoryview_numpy():
    with pkq.Runtime(io=(256, 256)) as rt:
        rng = random.Random(4)
        inputs = [rng.randbytes(n) for n in (0, 1, 7, 64, 255, 256)]
        inputs += [memoryview(bytearray(rng.randbytes(100)))]
        try:
            import numpy as np

            inputs.append(np.frombuffer(rng.randbytes(128), dtype=np.uint8))
        except ImportError:
            pass
        for data in inputs:
            raw = bytes(data)
            for out_len in (0, len(raw), 256):
                key = rng.getrandbits(8)
                args = struct.pack("<II", out_len, key)
                c, out = rt.submit_io(pkq.COPY_IO, args, data).wait_output(timeout=10)
                assert c.value == sum(raw)
                assert out == io_expected(raw, out_len, key)
        with pytest.raises(pkq.PayloadTooLarge):
            rt.submit_io(pkq.COPY_IO, struct.pack("<II", 0, 0), b"\0" * 257)
        with pytest.raises(pkq.TaskError) as e:
            rt.submit_io(pkq.COPY_IO, struct.pack("<II", 257, 0), b"x").wait_output()
        assert e.value.status == 2

        async def main():
            t = rt.submit_io(pkq.COPY_IO, struct.pack("<II", 4, 0), b"ping")
            return await t.wait_output_async()

        c, out = asyncio.run(main())
        assert out == b"ping" and c.value == sum(b"ping")


def test_io_task_without_io_areas(rt):
    with pytest.raises(pkq.InvalidConfig):
        rt.submit_io(pkq.COPY_IO, struct.pack("<II", 0, 0), b"x")


def test_timeout_then_wait(rt):
    t = rt.submit(pkq.SPIN, 50 * MS)
    with pytest.raises(pkq.Timeout) as e:
        t.wait(timeout=0.001)
    assert isinstance(e.value, TimeoutError)
    assert not t.consumed
    assert t.wait().value >= 50 * MS
    with pytest.raises(pkq.InvalidArgument):
        rt.submit(pkq.NOP).wait(timeout=-1)


def test_task_error_for_a_spin_past_the_limit(rt):
    with pytest.raises(pkq.TaskError) as e:
        rt.submit(pkq.SPIN, pkq.SPIN_MAX_NS + 1).wait()
    assert e.value.status == 2 and e.value.op == pkq.SPIN and e.value.status_name
    with pytest.raises(pkq.TaskError):
        rt.call(pkq.SPIN, pkq.SPIN_MAX_NS + 1)
    # The runtime serves on.
    assert rt.call(pkq.ECHO, 9) == 9


def test_argument_errors_from_pkq(rt):
    with pytest.raises(pkq.PayloadTooLarge):
        rt.submit(pkq.ECHO, b"\0" * (pkq.ARGS_BYTES + 1))
    with pytest.raises(pkq.OpMismatch):
        rt.call(pkq.NOP, 1)  # NOP takes no argument bytes
    with pytest.raises(pkq.OpMismatch):
        rt.call(pkq.SPIN, b"\0" * 4)


def test_asyncio_gather_of_a_thousand(rt):
    rng = random.Random(5)
    words = [rng.getrandbits(64) for _ in range(1000)]

    async def one(w):
        return (await rt.submit(pkq.ECHO, w)).value

    async def main():
        return await asyncio.gather(*(one(w) for w in words))

    assert asyncio.run(main()) == words


def test_await_consumes_and_needs_a_loop(rt):
    t = rt.submit(pkq.NOP)
    with pytest.raises(RuntimeError):
        t.__await__()  # no running loop: the ticket is kept
    assert not t.consumed

    async def main():
        c = await t
        with pytest.raises(pkq.TicketConsumed):
            await t
        return c

    assert asyncio.run(main()).value == 0


def test_an_awaitable_awaited_twice_raises_either_way(rt):
    # Done within the await's first poll, and delivered by the completion
    # thread (a 5 ms spin): the second await of the same awaitable raises.
    async def main(t):
        aw = t.wait_output_async()  # in the running loop
        c = await aw
        with pytest.raises(pkq.TicketConsumed):
            await aw
        return c

    for ns in (0, 5_000_000):
        c, _ = asyncio.run(main(rt.submit(pkq.SPIN, ns)))
        assert c.value >= ns


def test_await_after_the_runtime_closed():
    async def main():
        r = pkq.Runtime()
        done = r.submit(pkq.ECHO, 1)
        pending = r.submit(pkq.SPIN, 100 * MS)
        waiting = asyncio.ensure_future(wrap(pending))
        await asyncio.sleep(0)  # armed with the completion thread
        r.shutdown()
        late = await done  # awaited after shutdown
        del r
        gc.collect()  # the runtime dropped while `waiting` waits
        return late.value, (await waiting).value

    async def wrap(t):
        return await t

    late, spun = asyncio.run(main())
    assert late == 1 and spun >= 100 * MS


def test_runtime_dropped_while_a_ticket_is_awaited():
    async def main():
        r = pkq.Runtime()
        t = r.submit(pkq.SPIN, 200 * MS)

        async def wrap():
            return await t

        fut = asyncio.ensure_future(wrap())
        await asyncio.sleep(0.01)
        del r  # dropped with the GIL held: pkq drains, the callback takes the GIL
        gc.collect()
        return (await fut).value

    assert asyncio.run(main()) >= 200 * MS


def test_waits_release_the_gil(rt):
    progress = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            progress[0] += 1

    th = threading.Thread(target=count)
    th.start()
    try:
        for wait in (
            lambda: rt.call(pkq.SPIN, 300 * MS),
            lambda: rt.submit(pkq.SPIN, 300 * MS).wait(),
            lambda: rt.submit_batch(pkq.SPIN, struct.pack("<Q", 300 * MS)).wait(),
        ):
            before = progress[0]
            t0 = time.perf_counter()
            wait()
            elapsed = time.perf_counter() - t0
            moved = progress[0] - before
            # Holding the GIL for the whole wait would leave the counter
            # where it was but for the interpreter's switch interval.
            assert elapsed >= 0.3
            assert moved > 10_000, f"the other thread counted {moved} in {elapsed:.3f} s"
    finally:
        stop.set()
        th.join()


def test_shutdown_semantics():
    r = pkq.Runtime()
    before = r.submit(pkq.SPIN, 50 * MS)
    r.shutdown()
    assert before.wait().value >= 50 * MS  # drained before the kernel stopped
    with pytest.raises(pkq.Closed):
        r.submit(pkq.NOP)
    with pytest.raises(pkq.Closed):
        r.call(pkq.NOP)
    with pytest.raises(pkq.Closed):
        r.submit_batch(pkq.NOP, 3, arg_size=0)
    with pytest.raises(pkq.KernelStopped):
        r.health()
    r.shutdown()  # again: the first outcome


def test_cancel_semantics():
    r = pkq.Runtime(workers=1)
    first = r.submit(pkq.SPIN, 200 * MS)
    queued = [r.submit(pkq.NOP) for _ in range(200)]
    time.sleep(0.02)
    r.cancel()
    assert first.wait().value >= 200 * MS  # running tasks finish
    done = cancelled = 0
    for t in queued:
        try:
            t.wait()
            done += 1
        except pkq.Cancelled:
            cancelled += 1
    assert done + cancelled == len(queued) and cancelled > 0
    with pytest.raises(pkq.Closed):
        r.submit(pkq.NOP)


def test_context_manager_closes():
    with pkq.Runtime() as r:
        assert r.call(pkq.ECHO, 3) == 3
        t = r.submit(pkq.SPIN, 20 * MS)
    assert t.wait().value >= 20 * MS
    with pytest.raises(pkq.Closed):
        r.call(pkq.NOP)
    assert "Runtime(" in repr(r) and r.capacity > 0 and r.workers > 0


def test_runtime_settings():
    with pkq.Runtime(workers=2, pollers=1, rings=2, capacity=256, wait="park", stall_after=2.0) as r:
        assert (r.workers, r.rings, r.capacity, r.wait_strategy) == (2, 2, 256, "park")
        assert r.call(pkq.ECHO, 11) == 11
    with pytest.raises(pkq.InvalidConfig):
        pkq.Runtime(capacity=1000)  # not a power of two
    with pytest.raises(pkq.DeviceOutOfRange):
        pkq.Runtime(device=pkq.device_count())


def test_states_of_a_custom_module():
    path, kernel = os.environ.get("PKQ_TEST_FATBIN"), os.environ.get("PKQ_TEST_KERNEL")
    if not path or not kernel:
        pytest.skip("PKQ_TEST_FATBIN and PKQ_TEST_KERNEL name no module")
    # examples/custom_handler's ARM_STEP (op 257) on its arm: 6 joint
    # angles and a 3x4 pose (18 floats); a step adds qd * dt to the angles
    # and returns the bits of pose[3].
    rng = random.Random(7)
    with pkq.Runtime(module=path, kernel=kernel) as r:
        q = [rng.uniform(-1.0, 1.0) for _ in range(6)]
        st = r.state(struct.pack("18f", *q, *([0.0] * 12)))
        assert len(st) == 72
        for _ in range(50):
            qd = [rng.uniform(-2.0, 2.0) for _ in range(6)]
            dt = rng.uniform(0.001, 0.01)
            value = r.call_on_state(257, st, struct.pack("7fI", *qd, dt, 0))
            back = struct.unpack("18f", st.read())
            q = [a + b * dt for a, b in zip(q, qd)]
            assert all(abs(x - y) < 1e-4 for x, y in zip(back[:6], q)), (back[:6], q)
            assert value & 0xFFFFFFFF == struct.unpack("I", struct.pack("f", back[6 + 3]))[0]
            q = list(back[:6])
        st.write(bytes(72))
        assert st.read() == bytes(72)
        with pytest.raises(pkq.OpMismatch):
            r.call_on_state(257, st, bytes(8))
        with pytest.raises(pkq.PayloadTooLarge):
            r.call_on_state(257, st, bytes(33))
        with pytest.raises(pkq.InvalidArgument):
            st.write(bytes(3))
        with pytest.raises(pkq.InvalidArgument):
            r.state(b"")
    # A state outlives its runtime (shut down, then dropped): still read and
    # written.
    st.write(bytes(range(72)))
    assert st.read() == bytes(range(72))
    del r
    gc.collect()
    st.write(bytes(72))
    assert st.read() == bytes(72)


def test_custom_module_from_a_fatbin():
    path, kernel = os.environ.get("PKQ_TEST_FATBIN"), os.environ.get("PKQ_TEST_KERNEL")
    if not path or not kernel:
        pytest.skip("PKQ_TEST_FATBIN and PKQ_TEST_KERNEL name no module")
    # examples/custom_handler's module: its table lists its own ops only
    # (FK, which dereferences device addresses, refused to a checked task;
    # no NOP), and the runtime serves.
    with pkq.Runtime(module=path, kernel=kernel) as r:
        r.health()
        with pytest.raises(pkq.OpMismatch):
            r.call(pkq.NOP)
        with pytest.raises(pkq.UncheckedOp):
            r.call(256, bytes(24))
    with open(path, "rb") as f:
        image = f.read()
    with pkq.Runtime(module=image, kernel=kernel) as r:
        r.health()
    with pytest.raises(pkq.KernelMissing):
        pkq.Runtime(module=image, kernel=kernel + "_none")
