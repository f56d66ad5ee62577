// pkq from C++: the shape of a trading engine's hot loop. A pinned thread
// takes market ticks, sends each tick's book to the GPU as an IO task
// through a producer that holds its ring alone, waits for the answer by
// spinning, and acts on it within a deadline; the loop's own code
// allocates nothing (pkq takes each answer's output bytes into memory of
// its own before copying them out). The misses and the latencies'
// percentiles are printed at the end.
//
//   make -C examples/cpp && examples/cpp/hot_loop
//
// The GPU's work here is pkq's built-in COPY_IO (output byte i = input byte
// i XOR a key; the value is the sum of the input bytes), standing in for a
// pricing handler of your own: examples/custom_handler shows one, loaded
// with pkq::Options::module_file.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "pkq.hpp"

namespace {

// One tick's order book: 16 levels each side.
struct Book {
    uint32_t bid_px[16], bid_qty[16], ask_px[16], ask_qty[16];
};
// COPY_IO's arguments: output bytes, and the key XORed into them.
struct CopyIoArgs {
    uint32_t out_len, key;
};

constexpr int kTicks = 200000;
constexpr auto kDeadline = std::chrono::microseconds(10);

int fail(const char *what, pkq::Status s) {
    std::fprintf(stderr, "%s: %s: %s\n", what, pkq::status_name(s), pkq::last_error().c_str());
    return 1;
}

}  // namespace

int main() {
    pkq::Runtime rt;
    pkq::Status s = pkq::Runtime::create(
        rt, pkq::Options().wait(PKQ_WAIT_SPIN).io(sizeof(Book), 64));
    if (s != PKQ_OK) return fail("starting the runtime", s);
    pkq::Producer p;  // this thread's own ring: plain stores, no CAS
    if ((s = pkq::Producer::create(p, rt, 0, PKQ_ANY_RING, PKQ_PRODUCER_EXCLUSIVE)) != PKQ_OK) {
        return fail("producer", s);
    }

    Book book{};
    std::vector<uint32_t> ns(kTicks);  // allocated before the loop
    uint8_t decision[64];
    pkq::Ticket t;
    pkq::Completion c;
    int misses = 0;
    using clock = std::chrono::steady_clock;
    for (int tick = 0; tick < kTicks; ++tick) {
        // A new tick: the book moves.
        for (int l = 0; l < 16; ++l) {
            book.bid_px[l] = 10000 - l - (tick & 7);
            book.ask_px[l] = 10001 + l + (tick & 7);
            book.bid_qty[l] = book.ask_qty[l] = 100 + ((tick * 31 + l) & 63);
        }
        auto t0 = clock::now();
        CopyIoArgs args{sizeof decision, static_cast<uint32_t>(tick)};
        if ((s = p.submit_io(PKQ_OP_COPY_IO, args, &book, sizeof book, t)) != PKQ_OK) {
            return fail("submit", s);
        }
        size_t len = 0;
        if ((s = t.wait_output(c, decision, sizeof decision, len)) != PKQ_OK) {
            return fail("wait", s);
        }
        auto dt = clock::now() - t0;
        // Act on the answer (here: check it).
        if (len != sizeof decision || decision[0] != static_cast<uint8_t>(book.bid_px[0] ^ tick)) {
            std::fprintf(stderr, "tick %d: a wrong answer\n", tick);
            return 1;
        }
        misses += dt > kDeadline;
        ns[tick] = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count());
    }
    p = pkq::Producer();
    if ((s = rt.shutdown()) != PKQ_OK) return fail("shutdown", s);

    std::sort(ns.begin(), ns.end());
    std::printf("%d ticks from C++: p50 %.2f us, p99 %.2f us, p99.9 %.2f us; %d past the %lld us deadline\n",
                kTicks, ns[kTicks / 2] / 1e3, ns[kTicks / 100 * 99] / 1e3,
                ns[kTicks / 1000 * 999] / 1e3, misses,
                static_cast<long long>(kDeadline.count()));
    return 0;
}
