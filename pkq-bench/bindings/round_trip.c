/* The round trip from C, for pkq-bench's bindings bench: WARMUP untimed,
 * then SAMPLES timed NOP tasks (pkq_submit + pkq_wait, the C API's whole
 * path) on a default runtime, the thread pinned to the last core it may
 * use once the runtime runs (as every row of the bench), each sample's
 * nanoseconds written to OUT, one a line.
 *   round_trip_c SAMPLES WARMUP OUT */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pkq.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin_last_core(void) {
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
        fprintf(stderr, "usage: %s SAMPLES WARMUP OUT\n", argv[0]);
        return 2;
    }
    long samples = atol(argv[1]), warmup = atol(argv[2]);
    uint64_t *ns = malloc(sizeof *ns * (size_t)(samples > 0 ? samples : 1));
    pkq_runtime *rt = NULL;
    char msg[512];
    if (!ns || samples <= 0 || warmup < 0) return 2;
    if (pkq_runtime_new(NULL, &rt) != PKQ_OK) {
        pkq_last_error(msg, sizeof msg);
        fprintf(stderr, "no runtime: %s\n", msg);
        return 1;
    }
    pin_last_core();
    pkq_ticket t = {0};
    pkq_completion c;
    for (long i = 0; i < warmup + samples; ++i) {
        uint64_t t0 = now_ns();
        if (pkq_submit(rt, PKQ_OP_NOP, NULL, 0, &t) != PKQ_OK || pkq_wait(&t, &c) != PKQ_OK) {
            pkq_last_error(msg, sizeof msg);
            fprintf(stderr, "round trip %ld: %s\n", i, msg);
            return 1;
        }
        uint64_t t1 = now_ns();
        if (i >= warmup) ns[i - warmup] = t1 - t0;
    }
    pkq_runtime_destroy(rt);
    FILE *f = fopen(argv[3], "w");
    if (!f) return 1;
    for (long i = 0; i < samples; ++i) fprintf(f, "%llu\n", (unsigned long long)ns[i]);
    fclose(f);
    free(ns);
    return 0;
}
