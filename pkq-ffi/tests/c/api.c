/* pkq's C API from C (tests/c_api.rs compiles and runs this, plain and under
 * AddressSanitizer; the GPU bundle carries it for the GPU host): every error
 * path without a GPU (null arguments, bad options, empty tickets, the
 * messages), then, where a runtime starts, every call on the real kernel,
 * results checked against what was sent. Exits 0 when everything held;
 * prints "GPU part skipped: <why>" when no runtime could start, which fails
 * it when PKQ_REQUIRE_GPU=1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pkq.h"

static int failures = 0;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            char msg_[256];                                                 \
            pkq_last_error(msg_, sizeof msg_);                              \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n",   \
                    __FILE__, __LINE__, #cond, msg_);                       \
            ++failures;                                                     \
        }                                                                   \
    } while (0)

#define CHECK_STATUS(call, want)                                            \
    do {                                                                    \
        pkq_status got_ = (call);                                           \
        if (got_ != (want)) {                                               \
            char msg_[256];                                                 \
            pkq_last_error(msg_, sizeof msg_);                              \
            fprintf(stderr, "%s:%d: %s: %s, want %s (last error: %s)\n",    \
                    __FILE__, __LINE__, #call, pkq_status_name(got_),       \
                    pkq_status_name(want), msg_);                           \
            ++failures;                                                     \
        }                                                                   \
    } while (0)

static int last_error_is(const char *want) {
    char msg[256];
    pkq_last_error(msg, sizeof msg);
    return strcmp(msg, want) == 0;
}

/* A xorshift generator: the arguments of the GPU part. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void errors_without_a_runtime(void) {
    CHECK(strcmp(pkq_status_name(PKQ_OK), "PKQ_OK") == 0);
    CHECK(strcmp(pkq_status_name(PKQ_ERR_FULL), "PKQ_ERR_FULL") == 0);
    CHECK(strcmp(pkq_status_name(-1), "PKQ_ERR_OTHER") == 0);

    CHECK_STATUS(pkq_options_init(NULL, sizeof(pkq_options)), PKQ_ERR_NULL);
    CHECK(last_error_is("options is null"));
    pkq_options o;
    CHECK_STATUS(pkq_options_init(&o, 4), PKQ_ERR_INVALID_ARGUMENT);
    /* A size that ends inside a field is no version's: nothing written. */
    memset(&o, 0xab, sizeof o);
    CHECK_STATUS(pkq_options_init(&o, 33), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_options_init(&o, 60), PKQ_ERR_INVALID_ARGUMENT);
    CHECK(o.size == 0xabababab);
    CHECK_STATUS(pkq_options_init(&o, sizeof o), PKQ_OK);
    CHECK(o.size == sizeof o);
    CHECK(o.workers == 0 && o.wait == PKQ_WAIT_DEFAULT);
    /* A larger struct (a later header's) gets this version's fields. */
    struct {
        pkq_options v1;
        uint32_t later[4];
    } wider;
    memset(&wider, 0xff, sizeof wider);
    CHECK_STATUS(pkq_options_init(&wider.v1, sizeof wider), PKQ_OK);
    CHECK(wider.v1.size == sizeof(pkq_options) && wider.later[0] == 0xffffffffu);
    CHECK_STATUS(pkq_options_init(NULL, sizeof(pkq_options)), PKQ_ERR_NULL);

    /* A message longer than the buffer is cut, its whole length returned. */
    char small[4];
    size_t whole = pkq_last_error(small, sizeof small);
    CHECK(whole == strlen("options is null") && strcmp(small, "opt") == 0);
    CHECK(pkq_last_error(NULL, 0) == whole);

    CHECK_STATUS(pkq_runtime_new(&o, NULL), PKQ_ERR_NULL);
    pkq_runtime *rt = (pkq_runtime *)&o; /* not null: must be cleared */
    pkq_options bad = o;
    bad.size = 4;
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    CHECK(rt == NULL);
    bad = o;
    bad.wait = 99;
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    bad = o;
    bad.pollers = 3;
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    CHECK(rt == NULL);

    CHECK_STATUS(pkq_runtime_shutdown(NULL), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_runtime_cancel(NULL), PKQ_ERR_NULL);
    pkq_runtime_destroy(NULL);

    pkq_ticket t = {0};
    pkq_completion c;
    uint64_t word = 7;
    CHECK_STATUS(pkq_submit(NULL, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_try_submit(NULL, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_wait(NULL, &c), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_wait(&t, NULL), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_wait_timeout(&t, 1000, &c), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_poll(&t, &c), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_ticket_release(&t), PKQ_OK);
    CHECK_STATUS(pkq_ticket_release(NULL), PKQ_ERR_NULL);
    /* A failed submit leaves the ticket empty, whatever it held. */
    memset(&t, 0xab, sizeof t);
    CHECK_STATUS(pkq_submit(NULL, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_ticket_release(&t), PKQ_OK);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_ticket_set_wait(&t, PKQ_WAIT_SPIN), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_ticket_set_wait(&t, PKQ_WAIT_DEFAULT), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_ticket_on_complete(&t, NULL, NULL), PKQ_ERR_NULL);
    uint8_t out[8];
    size_t out_len = 99;
    CHECK_STATUS(pkq_wait_output(&t, 0, &c, out, sizeof out, &out_len), PKQ_ERR_NOT_LIVE);
    CHECK(out_len == 0);
    CHECK_STATUS(pkq_wait_output(&t, 0, &c, NULL, 8, &out_len), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_submit_io(NULL, PKQ_OP_COPY_IO, &word, 8, out, 8, 0, &t), PKQ_ERR_NULL);

    /* Options: a size inside a field is no version's; bad widths; a module
     * without its kernel, a kernel without its module, a missing file. */
    bad = o;
    bad.size = 60;
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    bad = o;
    bad.width = 7;
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    bad = o;
    bad.module_kernel = "k";
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_CONFIG);
    bad = o;
    bad.module_path = "/nonexistent/module.fatbin";
    bad.module_kernel = "k";
    CHECK_STATUS(pkq_runtime_new(&bad, &rt), PKQ_ERR_INVALID_MODULE);
    CHECK(rt == NULL);
    CHECK_STATUS(pkq_runtime_new_lanes(NULL, 1, &rt), PKQ_ERR_NULL);
    const pkq_options *none[1] = {NULL};
    CHECK_STATUS(pkq_runtime_new_lanes(none, 0, &rt), PKQ_ERR_INVALID_CONFIG);
    CHECK_STATUS(pkq_runtime_health(NULL), PKQ_ERR_NULL);

    /* Batches, producers, states, pools: null handles, empty batches. */
    pkq_batch b = {0};
    size_t n = 5;
    pkq_status st[1];
    CHECK_STATUS(pkq_submit_batch(NULL, PKQ_OP_ECHO, &word, 8, 1, 0, &b), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_batch_len(&b, &n), PKQ_ERR_NOT_LIVE);
    CHECK(n == 0);
    n = 5;
    CHECK_STATUS(pkq_batch_poll(&b, &n), PKQ_ERR_NOT_LIVE);
    CHECK(n == 0);
    CHECK_STATUS(pkq_batch_wait(&b, 0, &c, st, 1), PKQ_ERR_NOT_LIVE);
    CHECK_STATUS(pkq_batch_wait(&b, 0, NULL, st, 1), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_batch_release(&b), PKQ_OK);
    CHECK_STATUS(pkq_batch_release(NULL), PKQ_ERR_NULL);
    pkq_producer *p = (pkq_producer *)&o;
    CHECK_STATUS(pkq_producer_new(NULL, 0, PKQ_ANY_RING, 0, &p), PKQ_ERR_NULL);
    CHECK(p == NULL);
    CHECK_STATUS(pkq_producer_submit(NULL, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_producer_submit_batch(NULL, PKQ_OP_NOP, NULL, 0, 4, 0, &b), PKQ_ERR_NULL);
    uint32_t ring;
    CHECK_STATUS(pkq_producer_ring(NULL, &ring), PKQ_ERR_NULL);
    pkq_producer_destroy(NULL);
    pkq_state *state = (pkq_state *)&o;
    CHECK_STATUS(pkq_state_new(NULL, &word, 8, &state), PKQ_ERR_NULL);
    CHECK(state == NULL);
    CHECK_STATUS(pkq_state_read(NULL, out, 8), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_state_write(NULL, out, 8), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_call_on_state(NULL, NULL, 257, out, 8, &c), PKQ_ERR_NULL);
    pkq_state_destroy(NULL);
    pkq_pool *pool = (pkq_pool *)&o;
    bad = o;
    CHECK_STATUS(pkq_pool_new(NULL, 0, &bad, 9, &pool), PKQ_ERR_INVALID_CONFIG);
    CHECK(pool == NULL);
    CHECK_STATUS(pkq_pool_new(NULL, 2, NULL, PKQ_ROUTE_LEAST_LOADED, &pool), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_pool_submit(NULL, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_pool_submit_keyed(NULL, 1, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_pool_submit_batch(NULL, PKQ_OP_NOP, NULL, 0, 4, 0, &b), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_pool_health(NULL, NULL, 0, NULL), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_pool_shutdown(NULL), PKQ_ERR_NULL);
    pkq_pool_destroy(NULL);
}

/* Every call on a live runtime. */
static void calls_on_a_runtime(pkq_runtime *rt) {
    pkq_ticket t = {0};
    pkq_completion c;

    /* ECHO answers its argument; NOP answers 0. */
    for (int i = 0; i < 10000; ++i) {
        uint64_t word = next_random();
        CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_OK);
        CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
        CHECK(c.value == word && c.task_status == 0);
        CHECK(c.device_end_ns >= c.device_start_ns);
    }
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_NOP, NULL, 0, &t), PKQ_OK);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
    CHECK(c.value == 0);
    /* The ticket is empty once its result was taken. */
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_ERR_NOT_LIVE);

    /* Many in flight, taken in another order than submitted. */
    enum { N = 64 };
    pkq_ticket many[N];
    memset(many, 0, sizeof many);
    uint64_t sent[N];
    for (int i = 0; i < N; ++i) {
        sent[i] = next_random();
        CHECK_STATUS(pkq_try_submit(rt, PKQ_OP_ECHO, &sent[i], sizeof sent[i], &many[i]), PKQ_OK);
    }
    for (int i = N - 1; i >= 0; --i) {
        CHECK_STATUS(pkq_wait(&many[i], &c), PKQ_OK);
        CHECK(c.value == sent[i]);
    }

    /* Poll until done; a timeout keeps the ticket. The spin (200 ms) is far
     * longer than the 1 us wait, far shorter than the stall bound (1 s). */
    uint64_t ns = 200000000;
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_SPIN, &ns, sizeof ns, &t), PKQ_OK);
    CHECK_STATUS(pkq_wait_timeout(&t, 1000, &c), PKQ_ERR_TIMEOUT);
    pkq_status s;
    long polls = 0;
    while ((s = pkq_poll(&t, &c)) == PKQ_PENDING) ++polls;
    CHECK_STATUS(s, PKQ_OK);
    CHECK(polls > 0 && c.value >= ns);
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_SPIN, &ns, sizeof ns, &t), PKQ_OK);
    CHECK_STATUS(pkq_wait_timeout(&t, 10000000000u, &c), PKQ_OK);
    CHECK(c.value >= ns);

    /* Released unread: the task runs on, the ticket is empty. */
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_NOP, NULL, 0, &t), PKQ_OK);
    CHECK_STATUS(pkq_ticket_release(&t), PKQ_OK);
    CHECK_STATUS(pkq_poll(&t, &c), PKQ_ERR_NOT_LIVE);

    /* Refusals, with nothing submitted: a length the op table disagrees
     * with, too many bytes, null bytes. */
    uint8_t bytes[64] = {0};
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_NOP, bytes, 8, &t), PKQ_ERR_OP_MISMATCH);
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, bytes, 49, &t), PKQ_ERR_PAYLOAD_TOO_LARGE);
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, NULL, 8, &t), PKQ_ERR_NULL);
    CHECK_STATUS(pkq_poll(&t, &c), PKQ_ERR_NOT_LIVE);
    /* An op pkq's kernel does not serve runs and fails: unknown op. */
    CHECK_STATUS(pkq_submit(rt, 4000, bytes, 8, &t), PKQ_OK);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_ERR_TASK);
    CHECK(c.task_status == 1 && c.value == 0);

    /* A ticket outlives a shutdown: its result is there to read. */
    uint64_t word = 99;
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_OK);
    CHECK_STATUS(pkq_runtime_shutdown(rt), PKQ_OK);
    CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &word, sizeof word, &many[0]), PKQ_ERR_CLOSED);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
    CHECK(c.value == 99);
}

/* Batches and packs: every task's value once, in submission order. */
static void batches(pkq_runtime *rt) {
    enum { N = 10000 };
    static uint64_t words[N];
    static pkq_completion results[N];
    static pkq_status statuses[N];
    for (int flags = 0; flags <= PKQ_SUBMIT_PACKED; flags += PKQ_SUBMIT_PACKED) {
        for (int i = 0; i < N; ++i) words[i] = next_random();
        /* Larger than the ring, one slot a task: refused. */
        size_t count = flags ? N : 64;
        pkq_batch b = {0};
        CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_ECHO, words, sizeof words[0], count, (uint32_t)flags, &b),
                     PKQ_OK);
        size_t len = 0, done = 0;
        CHECK_STATUS(pkq_batch_len(&b, &len), PKQ_OK);
        CHECK(len == count);
        CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, count - 1), PKQ_ERR_INVALID_ARGUMENT);
        pkq_status s;
        while ((s = pkq_batch_poll(&b, &done)) == PKQ_PENDING) CHECK(done < count);
        CHECK_STATUS(s, PKQ_OK);
        CHECK(done == count);
        CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, count), PKQ_OK);
        for (size_t i = 0; i < count; ++i) {
            CHECK(statuses[i] == PKQ_OK && results[i].value == words[i]);
        }
        CHECK_STATUS(pkq_batch_len(&b, &len), PKQ_ERR_NOT_LIVE);
    }
    /* A failed task is reported in its place, the others keep theirs. */
    uint64_t ns[3] = {1000, 20000000000u, 1000};
    pkq_batch b = {0};
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_SPIN, ns, 8, 3, 0, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, 3), PKQ_ERR_TASK);
    CHECK(statuses[0] == PKQ_OK && statuses[1] == PKQ_ERR_TASK && statuses[2] == PKQ_OK);
    CHECK(results[1].task_status == 2 && results[0].value >= 1000);
    /* A timeout keeps the batch. */
    uint64_t long_spin[2] = {1000, 100000000};
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_SPIN, long_spin, 8, 2, PKQ_SUBMIT_TRY, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, 1000, results, statuses, 2), PKQ_ERR_TIMEOUT);
    CHECK(statuses[1] == PKQ_PENDING);
    CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, 2), PKQ_OK);
    CHECK(results[1].value >= long_spin[1]);
    /* Bad runs: arguments too long, an unknown flag, an argument length the
     * op table disagrees with. */
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_ECHO, words, 49, 2, 0, &b), PKQ_ERR_PAYLOAD_TOO_LARGE);
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_ECHO, words, 8, 2, 8, &b), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_NOP, words, 8, 2, 0, &b), PKQ_ERR_OP_MISMATCH);
    CHECK_STATUS(pkq_batch_release(&b), PKQ_OK);
    /* NOP takes no arguments: a run of them. */
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_NOP, NULL, 0, 100, PKQ_SUBMIT_PACKED, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, 100), PKQ_OK);
    /* An empty run: a batch of none, waited for without arrays. */
    CHECK_STATUS(pkq_submit_batch(rt, PKQ_OP_NOP, NULL, 0, 0, 0, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, 0, NULL, NULL, 0), PKQ_OK);
    CHECK_STATUS(pkq_batch_release(&b), PKQ_OK);
}

/* IO tasks: COPY_IO's output is its input XOR the key, its value the sum
 * of the input bytes. */
static void io_tasks(void) {
    pkq_options o;
    pkq_options_init(&o, sizeof o);
    o.io_input = 256;
    o.io_output = 256;
    pkq_runtime *rt = NULL;
    CHECK_STATUS(pkq_runtime_new(&o, &rt), PKQ_OK);
    if (!rt) return;
    uint8_t in[256], out[256];
    pkq_ticket t = {0};
    pkq_completion c;
    for (int round = 0; round < 2000; ++round) {
        size_t n = next_random() % 257;
        uint32_t args[2] = {(uint32_t)(next_random() % 257), (uint32_t)next_random()};
        uint64_t sum = 0;
        for (size_t i = 0; i < n; ++i) {
            in[i] = (uint8_t)next_random();
            sum += in[i];
        }
        CHECK_STATUS(pkq_submit_io(rt, PKQ_OP_COPY_IO, args, sizeof args, in, n, 0, &t), PKQ_OK);
        size_t got = 0;
        if (round == 0 && args[0] > 0) {
            /* A buffer too small keeps the result for a second call. */
            CHECK_STATUS(pkq_wait_output(&t, UINT64_MAX, &c, out, args[0] - 1, &got),
                         PKQ_ERR_PAYLOAD_TOO_LARGE);
            CHECK(got == args[0]);
        }
        CHECK_STATUS(pkq_wait_output(&t, UINT64_MAX, &c, out, sizeof out, &got), PKQ_OK);
        CHECK(c.value == sum && got == args[0]);
        for (size_t i = 0; i < got; ++i) {
            uint8_t want = (uint8_t)((i < n ? in[i] : 0) ^ (uint8_t)args[1]);
            if (out[i] != want) {
                CHECK(out[i] == want);
                break;
            }
        }
    }
    uint8_t big[300] = {0};
    uint32_t args[2] = {0, 0};
    CHECK_STATUS(pkq_submit_io(rt, PKQ_OP_COPY_IO, args, sizeof args, big, sizeof big, 0, &t),
                 PKQ_ERR_PAYLOAD_TOO_LARGE);
    pkq_runtime_destroy(rt);
}

/* Callbacks: each called once, all of them before destroy returns. */
enum { CALLBACKS = 2000 };
static int called[CALLBACKS];
static uint64_t callback_words[CALLBACKS];
static int callback_wrong = 0;
static void on_done(void *user, pkq_status status, const pkq_completion *c, const uint8_t *output,
                    size_t output_len) {
    size_t i = (size_t)(uintptr_t)user;
    if (status != PKQ_OK || c->value != callback_words[i] || output != NULL || output_len != 0) {
        ++callback_wrong;
    }
    ++called[i];
}

static void callbacks(void) {
    pkq_runtime *rt = NULL;
    CHECK_STATUS(pkq_runtime_new(NULL, &rt), PKQ_OK);
    if (!rt) return;
    pkq_ticket t = {0};
    for (size_t i = 0; i < CALLBACKS; ++i) {
        callback_words[i] = next_random();
        CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &callback_words[i], 8, &t), PKQ_OK);
        CHECK_STATUS(pkq_ticket_on_complete(&t, on_done, (void *)(uintptr_t)i), PKQ_OK);
        /* The ticket is empty: the callback has it. */
        CHECK_STATUS(pkq_ticket_release(&t), PKQ_OK);
    }
    pkq_runtime_destroy(rt);
    int once = 1;
    for (size_t i = 0; i < CALLBACKS; ++i) once &= called[i] == 1;
    CHECK(once && callback_wrong == 0);
}

/* Wait strategies: a runtime's and a ticket's own. */
static void wait_strategies(void) {
    uint32_t all[4] = {PKQ_WAIT_SPIN, PKQ_WAIT_SPIN_THEN_YIELD, PKQ_WAIT_PARK, PKQ_WAIT_MONITOR};
    for (int k = 0; k < 4; ++k) {
        pkq_options o;
        pkq_options_init(&o, sizeof o);
        o.wait = all[k];
        pkq_runtime *rt = NULL;
        CHECK_STATUS(pkq_runtime_new(&o, &rt), PKQ_OK);
        if (!rt) return;
        pkq_ticket t = {0};
        pkq_completion c;
        for (int i = 0; i < 500; ++i) {
            uint64_t w = next_random();
            CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &w, 8, &t), PKQ_OK);
            CHECK_STATUS(pkq_ticket_set_wait(&t, all[(k + i) % 4]), PKQ_OK);
            CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
            CHECK(c.value == w);
        }
        CHECK_STATUS(pkq_ticket_set_wait(&t, 9), PKQ_ERR_INVALID_ARGUMENT);
        pkq_runtime_destroy(rt);
    }
}

/* Producers, and a wide lane beside the latency lane. */
static void producers_and_lanes(void) {
    pkq_options latency, wide;
    pkq_options_init(&latency, sizeof latency);
    latency.rings = 2;
    latency.workers = 2;
    pkq_options_init(&wide, sizeof wide);
    wide.workers = 1;
    wide.width = PKQ_WIDTH_GROUP;
    wide.width_blocks = 8;
    wide.width_warps = 4;
    const pkq_options *lanes[2] = {&latency, &wide};
    pkq_runtime *rt = NULL;
    CHECK_STATUS(pkq_runtime_new_lanes(lanes, 2, &rt), PKQ_OK);
    if (!rt) return;
    CHECK_STATUS(pkq_runtime_health(rt), PKQ_OK);
    pkq_producer *x = NULL, *shared = NULL, *group = NULL;
    CHECK_STATUS(pkq_producer_new(rt, 0, 1, PKQ_PRODUCER_EXCLUSIVE, &x), PKQ_OK);
    CHECK_STATUS(pkq_producer_new(rt, 0, 1, PKQ_PRODUCER_EXCLUSIVE, &shared), PKQ_ERR_RING_HELD);
    CHECK_STATUS(pkq_producer_new(rt, 0, 2, 0, &shared), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_producer_new(rt, 2, PKQ_ANY_RING, 0, &shared), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_producer_new(rt, 0, 0, 4, &shared), PKQ_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(pkq_producer_new(rt, 0, 1, 0, &shared), PKQ_OK);
    CHECK_STATUS(pkq_producer_new(rt, 1, PKQ_ANY_RING, 0, &group), PKQ_OK);
    uint32_t ring = 9;
    CHECK_STATUS(pkq_producer_ring(x, &ring), PKQ_OK);
    CHECK(ring == 1);
    pkq_ticket t = {0};
    pkq_completion c;
    /* The held ring refuses the shared producer on it. */
    CHECK_STATUS(pkq_producer_submit(shared, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_ERR_RING_HELD);
    for (int i = 0; i < 5000; ++i) {
        uint64_t w = next_random();
        CHECK_STATUS(pkq_producer_submit(x, PKQ_OP_ECHO, &w, 8, NULL, 0, 0, &t), PKQ_OK);
        CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
        CHECK(c.value == w);
    }
    uint64_t words[300];
    for (int i = 0; i < 300; ++i) words[i] = next_random();
    pkq_batch b = {0};
    pkq_completion results[300];
    pkq_status statuses[300];
    CHECK_STATUS(pkq_producer_submit_batch(x, PKQ_OP_ECHO, words, 8, 300, PKQ_SUBMIT_PACKED, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, 300), PKQ_OK);
    for (int i = 0; i < 300; ++i) CHECK(results[i].value == words[i]);
    pkq_producer_destroy(x);
    /* Given back: the shared producer's submits go through. */
    CHECK_STATUS(pkq_producer_submit(shared, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_OK);
    CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
    /* The wide lane: its empty task on every thread of 8 blocks; an op it
     * does not serve is refused. */
    for (int i = 0; i < 1000; ++i) {
        CHECK_STATUS(pkq_producer_submit(group, PKQ_OP_GROUP_EMPTY, NULL, 0, NULL, 0, 0, &t), PKQ_OK);
        CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
        CHECK(c.value == 0);
    }
    uint64_t w = 1;
    CHECK_STATUS(pkq_producer_submit(group, PKQ_OP_ECHO, &w, 8, NULL, 0, 0, &t), PKQ_ERR_OP_MISMATCH);
    pkq_producer_destroy(shared);
    pkq_producer_destroy(group);
    pkq_runtime_destroy(rt);
}

/* A module of one's own (examples/custom_handler's fk.fatbin, named by
 * PKQ_TEST_FATBIN) and its op on device state: ARM_STEP moves the arm's
 * six angles by qd * dt and answers the bits of the new transform's x. */
struct arm_state {
    float q[6];
    float pose[12];
};
struct arm_step_args {
    float qd[6];
    float dt;
    uint32_t reserved;
};

static int module_and_state(void) {
    const char *path = getenv("PKQ_TEST_FATBIN");
    if (!path || !*path) return 0;
    pkq_options o;
    pkq_options_init(&o, sizeof o);
    o.module_path = path;
    o.module_kernel = "fk_worker_kernel";
    pkq_runtime *rt = NULL;
    CHECK_STATUS(pkq_runtime_new(&o, &rt), PKQ_OK);
    if (!rt) return 1;
    struct arm_state s = {{0}, {0}}, back;
    for (int j = 0; j < 6; ++j) s.q[j] = (float)(next_random() % 1000) / 1000.0f;
    pkq_state *state = NULL;
    CHECK_STATUS(pkq_state_new(rt, &s, sizeof s, &state), PKQ_OK);
    if (!state) {
        pkq_runtime_destroy(rt);
        return 1;
    }
    CHECK_STATUS(pkq_state_read(state, &back, sizeof back - 1), PKQ_ERR_INVALID_ARGUMENT);
    pkq_completion c;
    for (int step = 0; step < 200; ++step) {
        struct arm_step_args a = {{0}, 0.001f, 0};
        for (int j = 0; j < 6; ++j) a.qd[j] = (float)(next_random() % 2000) / 1000.0f - 1.0f;
        CHECK_STATUS(pkq_call_on_state(rt, state, 257, &a, sizeof a, &c), PKQ_OK);
        CHECK_STATUS(pkq_state_read(state, &back, sizeof back), PKQ_OK);
        for (int j = 0; j < 6; ++j) {
            float want = s.q[j] + a.qd[j] * a.dt;
            float d = back.q[j] - want;
            CHECK(d < 1e-6f && d > -1e-6f);
        }
        uint32_t x;
        memcpy(&x, &back.pose[3], sizeof x);
        CHECK((uint32_t)c.value == x);
        s = back;
    }
    /* A write replaces the state; a non-finite step is refused by the
     * handler (status 16) and leaves it. */
    CHECK_STATUS(pkq_state_write(state, &s, sizeof s), PKQ_OK);
    struct arm_step_args nan_step = {{0}, 0.001f, 0};
    nan_step.qd[2] = 1.0f / 0.0f;
    CHECK_STATUS(pkq_call_on_state(rt, state, 257, &nan_step, sizeof nan_step, &c), PKQ_ERR_TASK);
    CHECK(c.task_status == 16);
    CHECK_STATUS(pkq_state_read(state, &back, sizeof back), PKQ_OK);
    CHECK(memcmp(&back, &s, sizeof s) == 0);
    /* Arguments of another length than the table's (compared rounded up to
       8 bytes, as the device's argument struct holds them): refused. */
    CHECK_STATUS(pkq_call_on_state(rt, state, 257, &nan_step, 8, &c), PKQ_ERR_OP_MISMATCH);
    pkq_state_destroy(state);
    pkq_runtime_destroy(rt);
    return 1;
}

/* A pool of the first device: routed and keyed tasks, health. */
static void pools(void) {
    uint32_t devices[1] = {0};
    pkq_pool *pool = NULL;
    CHECK_STATUS(pkq_pool_new(devices, 1, NULL, PKQ_ROUTE_ROUND_ROBIN, &pool), PKQ_OK);
    if (!pool) return;
    pkq_ticket t = {0};
    pkq_completion c;
    for (int i = 0; i < 2000; ++i) {
        uint64_t w = next_random();
        if (i % 2) {
            CHECK_STATUS(pkq_pool_submit(pool, PKQ_OP_ECHO, &w, 8, NULL, 0, 0, &t), PKQ_OK);
        } else {
            CHECK_STATUS(pkq_pool_submit_keyed(pool, w, PKQ_OP_ECHO, &w, 8, NULL, 0, 0, &t), PKQ_OK);
        }
        CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
        CHECK(c.value == w);
    }
    uint64_t words[64];
    for (int i = 0; i < 64; ++i) words[i] = next_random();
    pkq_batch b = {0};
    pkq_completion results[64];
    pkq_status statuses[64];
    CHECK_STATUS(pkq_pool_submit_batch(pool, PKQ_OP_ECHO, words, 8, 64, 0, &b), PKQ_OK);
    CHECK_STATUS(pkq_batch_wait(&b, UINT64_MAX, results, statuses, 64), PKQ_OK);
    for (int i = 0; i < 64; ++i) CHECK(results[i].value == words[i]);
    uint32_t serving[4] = {9, 9, 9, 9};
    size_t n = 0;
    CHECK_STATUS(pkq_pool_health(pool, serving, 4, &n), PKQ_OK);
    CHECK(n == 1 && serving[0] == 0);
    CHECK_STATUS(pkq_pool_shutdown(pool), PKQ_OK);
    CHECK_STATUS(pkq_pool_submit(pool, PKQ_OP_NOP, NULL, 0, NULL, 0, 0, &t), PKQ_ERR_NO_SERVING_DEVICE);
    pkq_pool_destroy(pool);
}

int main(void) {
    errors_without_a_runtime();

    pkq_runtime *rt = NULL;
    pkq_status s = pkq_runtime_new(NULL, &rt);
    if (s == PKQ_OK) {
        calls_on_a_runtime(rt);
        pkq_runtime_destroy(rt);
        /* A ticket outlives its runtime's destroy. */
        CHECK_STATUS(pkq_runtime_new(NULL, &rt), PKQ_OK);
        pkq_ticket t = {0};
        pkq_completion c;
        uint64_t word = 5;
        CHECK_STATUS(pkq_submit(rt, PKQ_OP_ECHO, &word, sizeof word, &t), PKQ_OK);
        pkq_runtime_destroy(rt);
        CHECK_STATUS(pkq_wait(&t, &c), PKQ_OK);
        CHECK(c.value == 5);
        /* Each part on runtimes of its own. */
        CHECK_STATUS(pkq_runtime_new(NULL, &rt), PKQ_OK);
        if (rt) {
            batches(rt);
            pkq_runtime_destroy(rt);
        }
        io_tasks();
        callbacks();
        wait_strategies();
        producers_and_lanes();
        pools();
        if (!module_and_state()) {
            printf("module part skipped: PKQ_TEST_FATBIN names no module\n");
            const char *require = getenv("PKQ_REQUIRE_GPU");
            if (require && strcmp(require, "1") == 0) {
                fprintf(stderr, "PKQ_REQUIRE_GPU=1, but PKQ_TEST_FATBIN is unset\n");
                ++failures;
            }
        }
        printf("GPU part passed\n");
    } else {
        CHECK(rt == NULL);
        CHECK(s == PKQ_ERR_NO_DRIVER || s == PKQ_ERR_NO_DEVICE || s == PKQ_ERR_KERNEL_NOT_BUILT);
        char msg[256];
        pkq_last_error(msg, sizeof msg);
        printf("GPU part skipped: %s: %s\n", pkq_status_name(s), msg);
        /* Where a GPU is expected, a skip is a failure. */
        const char *require = getenv("PKQ_REQUIRE_GPU");
        if (require && strcmp(require, "1") == 0) {
            fprintf(stderr, "PKQ_REQUIRE_GPU=1, but no runtime started\n");
            ++failures;
        }
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("C API checks passed\n");
    return 0;
}
