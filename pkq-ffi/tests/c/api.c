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
