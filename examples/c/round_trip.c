/* pkq from C: a runtime, then round trips in a loop, each result checked,
 * the latencies' median and 99th percentile printed.
 *
 *   make -C examples/c && examples/c/round_trip
 *
 * ECHO answers its 8-byte argument: a stand-in for a handler of your own
 * (examples/custom_handler shows how one is written and loaded; from C, set
 * pkq_options.module_path and module_kernel). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pkq.h"

enum { ROUNDS = 100000 };

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int fail(const char *what, pkq_status s) {
    char msg[512];
    pkq_last_error(msg, sizeof msg);
    fprintf(stderr, "%s: %s: %s\n", what, pkq_status_name(s), msg);
    return 1;
}

int main(void) {
    pkq_options o;
    pkq_options_init(&o, sizeof o);
    o.wait = PKQ_WAIT_SPIN; /* the lowest latency: this thread spins */
    pkq_runtime *rt = NULL;
    pkq_status s = pkq_runtime_new(&o, &rt);
    if (s != PKQ_OK) return fail("starting the runtime", s);

    static uint64_t ns[ROUNDS];
    pkq_ticket t = {0}; /* a zeroed ticket is empty */
    pkq_completion c;
    for (uint64_t i = 0; i < ROUNDS; ++i) {
        uint64_t t0 = now_ns();
        if ((s = pkq_submit(rt, PKQ_OP_ECHO, &i, sizeof i, &t)) != PKQ_OK) return fail("submit", s);
        if ((s = pkq_wait(&t, &c)) != PKQ_OK) return fail("wait", s);
        ns[i] = now_ns() - t0;
        if (c.value != i) {
            fprintf(stderr, "task %llu answered %llu\n", (unsigned long long)i,
                    (unsigned long long)c.value);
            return 1;
        }
    }
    if ((s = pkq_runtime_shutdown(rt)) != PKQ_OK) return fail("shutdown", s);
    pkq_runtime_destroy(rt);

    qsort(ns, ROUNDS, sizeof ns[0], by_value);
    printf("%d round trips from C: p50 %.2f us, p99 %.2f us\n", ROUNDS, ns[ROUNDS / 2] / 1e3,
           ns[ROUNDS / 100 * 99] / 1e3);
    return 0;
}
