// The round trip from C++ (pkq.hpp), for pkq-bench's bindings bench: as
// round_trip.c, through the RAII wrapper (pkq::Runtime::submit,
// pkq::Ticket::wait).
//   round_trip_cpp SAMPLES WARMUP OUT
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "pkq.hpp"

static void pin_last_core() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int last = -1;
    for (int i = 0; i < CPU_SETSIZE; ++i)
        if (CPU_ISSET(i, &set)) last = i;
    if (last < 0) return;
    CPU_ZERO(&set);
    CPU_SET(last, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s SAMPLES WARMUP OUT\n", argv[0]);
        return 2;
    }
    long samples = std::atol(argv[1]), warmup = std::atol(argv[2]);
    if (samples <= 0 || warmup < 0) return 2;
    std::vector<uint64_t> ns(static_cast<size_t>(samples));
    pkq::Runtime rt;
    if (pkq::Runtime::create(rt) != PKQ_OK) {
        std::fprintf(stderr, "no runtime: %s\n", pkq::last_error().c_str());
        return 1;
    }
    pin_last_core();
    pkq::Ticket t;
    pkq::Completion c;
    using clock = std::chrono::steady_clock;
    for (long i = 0; i < warmup + samples; ++i) {
        auto t0 = clock::now();
        if (rt.submit(PKQ_OP_NOP, t) != PKQ_OK || t.wait(c) != PKQ_OK) {
            std::fprintf(stderr, "round trip %ld: %s\n", i, pkq::last_error().c_str());
            return 1;
        }
        auto t1 = clock::now();
        if (i >= warmup) {
            ns[static_cast<size_t>(i - warmup)] = static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        }
    }
    rt = pkq::Runtime();
    std::FILE *f = std::fopen(argv[3], "w");
    if (!f) return 1;
    for (uint64_t v : ns) std::fprintf(f, "%llu\n", static_cast<unsigned long long>(v));
    std::fclose(f);
    return 0;
}
