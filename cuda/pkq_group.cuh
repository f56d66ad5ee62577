// pkq_group.cuh: lanes of blocks and of groups of blocks (WIDTH in
// pkq_layout.h; the host's side is src/width.rs): the worker's one
// poller hands each task to the rest of its group through device memory and
// shared memory, every thread of the group runs the handler, and the poller
// completes the task once every block arrived.
#pragma once
#include <cstdint>

#include "pkq_handler.cuh"
#include "pkq_layout.h"
#include "pkq_mem.cuh"

namespace pkq {

// A named barrier of all `threads` threads of the block (ids 1 and 2 are
// the hand-off's; 0 the handlers', Context::sync_block). The non-aligned
// form: block 0's warp 0 reaches it from serve(), its other warps from
// group_member (bar.sync, the aligned form, wants every thread at the same
// instruction).
__device__ __forceinline__ void block_barrier(uint32_t id, uint32_t threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
constexpr uint32_t BAR_TASK = 1;
constexpr uint32_t BAR_DONE = 2;

// What a block of a group shares (shared memory): the group's words, the
// poller's stop word, and the block's group-barrier crossings so far.
struct GroupSync {
    uint64_t* words;
    const uint64_t* stop;
    uint32_t blocks;
    unsigned long long crossings;
    // Set (to 1, never back) when a wait of this block gave up on a stop:
    // the group's blocks may be on different tasks from then on.
    volatile uint32_t abandoned;
    // The poller's (block 0), lane 0's: 1 from its acquire of a task's
    // arrivals until its warp's next GPU-scope release fence (in
    // GroupLeave::after_completion, or in hand_task where none came
    // between: a pack's next task), else 0.
    volatile uint32_t unreleased;
};

// The task as the block's warps take it from its warp 0 (shared memory):
// the argument words as halves, low then high, as TASK carries them.
struct BlockTask {
    uint32_t op;
    uint32_t len;
    uint32_t quit;
    uint32_t traced;  // PKQ_GROUP_HEADER_TRACED of TASK's header (TIMES)
    uint32_t halves[PKQ_ARGS_BYTES / 4];
};

__device__ __forceinline__ uint64_t* group_word(const GroupSync* g, uint32_t off) {
    return g->words + off / 8;
}

// The poller's warp (every lane): a GPU-scope release fence where `always`,
// or where lane 0's `unreleased` says the warp acquired a task's arrivals
// since its last one (lane 0 alone reads and writes the flag).
__device__ __forceinline__ void release_acquired(GroupSync* g, uint32_t lane, bool always) {
    uint32_t unreleased = 0;
    if (lane == 0) unreleased = g->unreleased;
    if (always || __shfl_sync(0xffffffffu, unreleased, 0) != 0) {
        fence_release_gpu();
        if (lane == 0) g->unreleased = 0;
    }
}

// Generation `gen` of TASK (pkq_layout.h), written by the poller's warp
// (every lane calls it): `header` (op | len << 16 | PKQ_GROUP_HEADER_*
// bits), then the argument words' halves, each lane one tagged word, all
// in one store behind a GPU-scope release fence, so that what this warp
// wrote or acquired before (the blocks' writes and reads of the tasks
// before, through their arrivals) comes before any word of it: the fence
// the warp issued after its last completion (GroupLeave::after_completion),
// or one here where none came since its last acquire of arrivals (a pack's
// next task) or where `release` (a task on host memory, whose data the warp
// acquired from the host since; the quit). Before the first task no fence
// is needed: the host zeroed the group's words before the launch, and the
// blocks wrote nothing but their presence.
__device__ __forceinline__ void hand_task(GroupSync* g, uint32_t lane, uint64_t gen, uint32_t header,
                                          const uint64_t* words, bool release) {
    uint32_t v = header;
#pragma unroll
    for (int j = 0; j < PKQ_ARGS_BYTES / 8; ++j) {
        if (lane == 1 + 2 * j) v = static_cast<uint32_t>(words[j]);
        if (lane == 2 + 2 * j) v = static_cast<uint32_t>(words[j] >> 32);
    }
    __syncwarp();
    release_acquired(g, lane, release);
    if (lane < PKQ_GROUP_TASK_WORDS)
        store_relaxed_gpu(group_word(g, PKQ_GROUP_OFF_TASK) + lane, ((gen & 0xffffffffull) << 32) | v);
}

// Waits until the group word at `off` is at least `target`, or the stop
// word is set (read every PKQ_GROUP_STOP_SPINS spins: the wait's exit).
// Returns whether it got there, the adds it saw acquired (relaxed loads,
// then a GPU-scope acquire fence: no L1 invalidation per spin).
__device__ __forceinline__ bool wait_at_least(const GroupSync* g, uint32_t off, uint64_t target) {
    const uint64_t* w = group_word(g, off);
    for (uint32_t spins = 1;; ++spins) {
        if (load_relaxed_gpu(w) >= target) {
            fence_acquire_gpu();
            return true;
        }
        if (spins % PKQ_GROUP_STOP_SPINS == 0 && load_sys(g->stop) == PKQ_STOP_VALUE) return false;
    }
}

// Marks the group abandoned (a wait of this block gave up on a stop): for
// this block, and in the group's words for the poller, before this block's
// arrival (whose release orders it).
__device__ __forceinline__ void abandon(GroupSync* g) {
    g->abandoned = 1;
    store_relaxed_gpu(group_word(g, PKQ_GROUP_OFF_ABANDONED), 1);
}

__device__ __forceinline__ void Context::sync_group() const {
    // Each warp converged before every block barrier (a lane-divergent
    // branch of the handler's, or thread 0's wait, ends first).
    __syncwarp();
    block_barrier_all();
    if (threadIdx.x == 0 && group->blocks > 1) {
        const uint64_t target = ++group->crossings * group->blocks;
        // This block's writes (cumulative through the block barrier) before
        // its arrival (release); the others' after the wait (acquire).
        add_release_gpu(group_word(group, PKQ_GROUP_OFF_BARRIER), 1);
        if (!wait_at_least(group, PKQ_GROUP_OFF_BARRIER, target)) abandon(group);
    }
    __syncwarp();
    block_barrier_all();
}

__device__ __forceinline__ uint8_t* Context::scratch() const {
    return reinterpret_cast<uint8_t*>(group_word(group, PKQ_GROUP_OFF_SCRATCH));
}

// The task of `t` as thread `threadIdx.x` of block `rank` runs it.
__device__ __forceinline__ Context group_context(const volatile BlockTask* t, GroupSync* g, uint32_t rank) {
    Context ctx;
    ctx.lane = threadIdx.x & 31;
    ctx.op = t->op;
    ctx.len = t->len;
#pragma unroll
    for (int j = 0; j < PKQ_ARGS_BYTES / 8; ++j)
        ctx.words[j] = t->halves[2 * j] | (static_cast<uint64_t>(t->halves[2 * j + 1]) << 32);
    ctx.input = nullptr;
    ctx.in_len = 0;
    ctx.output = nullptr;
    ctx.out_cap = 0;
    ctx.warp = threadIdx.x >> 5;
    ctx.warps = blockDim.x >> 5;
    ctx.block = rank;
    ctx.blocks = g->blocks;
    ctx.group = g;
    return ctx;
}

// Where block `rank` leaves its start and end of a traced task (TIMES).
__device__ __forceinline__ void note_times(const GroupSync* g, uint32_t rank, uint64_t began) {
    unsigned long long* t = reinterpret_cast<unsigned long long*>(group_word(g, PKQ_GROUP_OFF_TIMES)) + 2 * rank;
    __stcg(t, static_cast<unsigned long long>(began));
    __stcg(t + 1, static_cast<unsigned long long>(globaltimer()));
}

// `v` as nanoseconds after `start`, within a log word's 32 bits.
__device__ __forceinline__ uint64_t log_offset(uint64_t v, uint64_t start) {
    if (v <= start) return 0;
    const uint64_t d = v - start;
    return d < 0xffffffffull ? d : 0xffffffffull;
}

// The handlers as the poller (warp 0 of block 0) calls them from serve():
// the task handed to the group, run by the poller's warp as rank 0's, and
// its outcome returned once every block arrived.
template <class Handlers>
struct GroupHandlers {
    const Handlers& handlers;
    volatile BlockTask* task;
    GroupSync* group;
    unsigned long long* handed;  // tasks handed to the group so far (lane 0's)
    uint64_t* log;               // the worker's TRACE LOG (null: none)
    unsigned long long* traced;  // traced tasks logged so far (lane 0's)

    // The warp's entry in the TRACE LOG of the traced task that began at
    // `start` (lane 0's): every block's TIMES, acquired (the arrivals), as
    // tagged words, then a system-scope fence, so that the completion comes
    // after them for the host.
    __device__ __forceinline__ void log_blocks(uint32_t lane, uint64_t start) const {
        const uint32_t blocks = group->blocks;
        unsigned long long t = 0;
        if (lane == 0) t = (*traced)++;
        t = __shfl_sync(0xffffffffu, t, 0);
        start = __shfl_sync(0xffffffffu, start, 0);
        uint64_t* e = log + (t % PKQ_TRACE_LOG_TASKS) * (PKQ_TRACE_LOG_HEADER_WORDS + 2ull * blocks);
        const uint64_t tag = ((t % 0xffffffffull) + 1) << 32;
        if (lane == 0) {
            store_sys(e, tag | (start & 0xffffffffull));
            store_sys(e + 1, tag | (start >> 32));
            store_sys(e + 2, tag | blocks);
            store_sys(e + 3, tag);
        }
        const unsigned long long* times =
            reinterpret_cast<const unsigned long long*>(group_word(group, PKQ_GROUP_OFF_TIMES));
        for (uint32_t r = lane; r < blocks; r += 32) {
            store_sys(e + PKQ_TRACE_LOG_HEADER_WORDS + 2 * r, tag | log_offset(__ldcg(times + 2 * r), start));
            store_sys(e + PKQ_TRACE_LOG_HEADER_WORDS + 2 * r + 1, tag | log_offset(__ldcg(times + 2 * r + 1), start));
        }
        __syncwarp();
        __threadfence_system();
    }

    __device__ __forceinline__ Outcome operator()(const Context& c) const {
        const uint32_t threads = blockDim.x;
        // A group a stop cut short hands nothing more (its blocks may still
        // be on the task it gave up on).
        if (__shfl_sync(0xffffffffu, group->abandoned, 0) != 0) return fail(PKQ_STATUS_STOPPED);
        // Traced (the task's start in c.trace) where the lane has a log.
        const bool trace = c.trace != 0 && log != nullptr;
        uint64_t gen = 0;
        if (c.lane == 0) gen = ++*handed;
        gen = __shfl_sync(0xffffffffu, gen, 0);
        if (group->blocks > 1)
            hand_task(group, c.lane, gen, c.op | (c.len << 16) | (trace ? PKQ_GROUP_HEADER_TRACED : 0u), c.words,
                      c.host != 0);
        if (c.lane == 0) {
            task->op = c.op;
            task->len = c.len;
            task->traced = trace;
            task->quit = 0;
#pragma unroll
            for (int j = 0; j < PKQ_ARGS_BYTES / 8; ++j) {
                task->halves[2 * j] = static_cast<uint32_t>(c.words[j]);
                task->halves[2 * j + 1] = static_cast<uint32_t>(c.words[j] >> 32);
            }
        }
        __syncwarp();
        block_barrier(BAR_TASK, threads);
        const uint64_t began = trace && c.lane == 0 ? globaltimer() : 0;
        Context ctx = c;
        ctx.warp = 0;
        ctx.warps = threads >> 5;
        ctx.block = 0;
        ctx.blocks = group->blocks;
        ctx.group = group;
        Outcome out = handlers(ctx);
        block_barrier(BAR_DONE, threads);
        if (trace && c.lane == 0) note_times(group, 0, began);
        if (group->blocks > 1) {
            // Every block finished; their writes, acquired by lane 0, come
            // before the completion, and before serve()'s GPU-scope fence
            // when the outcome says the task wrote device memory (every
            // participant returns the same outcome).
            if (c.lane == 0) {
                if (!wait_at_least(group, PKQ_GROUP_OFF_ARRIVALS, gen * (group->blocks - 1)) ||
                    load_relaxed_gpu(group_word(group, PKQ_GROUP_OFF_ABANDONED)) != 0)
                    group->abandoned = 1;
                // The blocks' writes and reads of this task, acquired (or
                // part of them, where the wait gave up), come before the
                // next hand-off through a release fence.
                group->unreleased = 1;
            }
            __syncwarp();
        }
        // A wait that gave up (here, or a group barrier of the handler's):
        // not every block finished, so the outcome is not the task's.
        if (__shfl_sync(0xffffffffu, group->abandoned, 0) != 0) return fail(PKQ_STATUS_STOPPED);
        if (trace) {
            // Lane 0's TIMES store (and, through its acquire of the
            // arrivals, every block's) before the warp reads them.
            __syncwarp();
            log_blocks(c.lane, c.trace);
        }
        return out;
    }
};

// Warps 1.. of block 0, and every warp of blocks 1..: each task the block's
// warp 0 takes (from serve() in block 0, from TASK in the others), run
// until the poller leaves.
template <class Handlers>
__device__ __forceinline__ void group_member(const pkq_params& p, uint32_t rank, volatile BlockTask* task,
                                             GroupSync* group, const Handlers& handlers) {
    const uint32_t threads = blockDim.x;
    const uint32_t lane = threadIdx.x & 31;
    // Warp 0 of blocks 1.. fetches each task; its thread 0 times it and
    // arrives.
    const bool fetching = rank != 0 && threadIdx.x < 32;
    const bool fetcher = fetching && lane == 0;
    const uint64_t* line = group_word(group, PKQ_GROUP_OFF_TASK);
    uint64_t seen = 0;  // generations run so far
    uint64_t idle_since = 0;
    uint32_t sleep_ns = 0;
    for (;;) {
        if (fetching) {
            // Generation seen + 1: every word of TASK tagged with it (the
            // line holds it or the one before), or the poller's last
            // generation, whose quit bit is this wait's exit (it may come
            // before this block read the one it waits for, when a wait of
            // the poller's gave up on a stop). The idle policy's naps
            // between looks once idle (Backoff; Quiet naps up to 1 us),
            // none under Spin.
            const uint32_t want = static_cast<uint32_t>(seen + 1);
            uint64_t w;
            for (;;) {
                w = lane < PKQ_GROUP_TASK_WORDS ? load_relaxed_gpu(line + lane) : 0;
                const uint64_t first = __shfl_sync(0xffffffffu, w, 0);
                const uint32_t tag = static_cast<uint32_t>(first >> 32);
                const bool whole = __all_sync(0xffffffffu, lane >= PKQ_GROUP_TASK_WORDS || (w >> 32) == tag);
                if (whole && (tag == want || (static_cast<uint32_t>(first) & PKQ_GROUP_HEADER_QUIT) != 0)) break;
                // Naps under Quiet (idle_spin_ns: its `after`) and Backoff
                // (idle_sleep_max_ns, its spin possibly 0); none under Spin.
                if (p.idle_spin_ns != 0 || p.idle_sleep_max_ns != 0) {
                    const uint64_t now = __shfl_sync(0xffffffffu, globaltimer(), 0);
                    if (idle_since == 0) {
                        idle_since = now;
                    } else if (now - idle_since >= p.idle_spin_ns) {
                        const uint32_t most = p.idle_sleep_max_ns != 0 ? p.idle_sleep_max_ns : 1000u;
                        sleep_ns = sleep_ns == 0 ? min(64u, most) : min(2 * sleep_ns, most);
                        __nanosleep(sleep_ns);
                    }
                }
            }
            // The acquire pattern: the task's data, and what the poller
            // wrote or acquired before it, seen by the block's loads after
            // the barrier below (cumulative through it).
            fence_acquire_gpu();
            idle_since = 0;
            sleep_ns = 0;
            seen += 1;
            const uint32_t v = static_cast<uint32_t>(w);
            if (lane == 0) {
                task->op = v & 0xffff;
                task->len = (v >> 16) & 0xff;
                task->traced = (v & PKQ_GROUP_HEADER_TRACED) != 0;
                task->quit = (v & PKQ_GROUP_HEADER_QUIT) != 0;
            } else if (lane < PKQ_GROUP_TASK_WORDS) {
                task->halves[lane - 1] = v;
            }
            __syncwarp();
        }
        block_barrier(BAR_TASK, threads);
        if (task->quit) {
            // Every thread of the block is done (through the barrier): its
            // writes before the poller's look at LEFT (a release add).
            if (fetcher) add_release_gpu(group_word(group, PKQ_GROUP_OFF_LEFT), 1);
            return;
        }
        const uint64_t began = fetcher && task->traced ? globaltimer() : 0;
        const Context ctx = group_context(task, group, rank);
        (void)handlers(ctx);
        block_barrier(BAR_DONE, threads);
        if (fetcher) {
            if (task->traced) note_times(group, rank, began);
            // Every thread's writes (cumulative through the block barrier)
            // before the arrival the poller acquires (a release add).
            add_release_gpu(group_word(group, PKQ_GROUP_OFF_ARRIVALS), 1);
        }
    }
}

// What the poller of a group does after each completion (after_completion)
// and on its way out of its loop (serve()'s `leave`, before its final
// state word): block 0's warps and the other blocks told to quit (after its
// last task's arrivals), on a last generation with the quit bit; then, in a
// group whose blocks all came, a wait until each of them left (LEFT in
// pkq_layout.h), beating as it waits: the final state word says that
// nothing of the group runs any more. The wait's exit is the blocks'
// handlers returning: the poller leaves on a stop, which ended every wait
// of theirs, or on a bad tag, before which none gave up. Where a stop
// ended its wait for presence (a failed build's), no task ran: no wait.
struct GroupLeave {
    volatile BlockTask* task;
    GroupSync* group;
    const unsigned long long* handed;
    bool present;  // every block of the group reported present

    // After each completion (every lane): the release fence of the next
    // hand-off (hand_task), where the warp acquired a task's arrivals since
    // its last one, issued while the host reads the completion and before
    // the poller polls again, off the way from the next task's arrival to
    // the blocks.
    __device__ __forceinline__ void after_completion(uint32_t lane) const { release_acquired(group, lane, false); }

    template <class Beat>
    __device__ __forceinline__ void operator()(uint32_t lane, const Beat& beat) const {
        const uint32_t blocks = group->blocks;
        if (blocks > 1) {
            const uint64_t words[PKQ_ARGS_BYTES / 8] = {};
            const uint64_t last = __shfl_sync(0xffffffffu, lane == 0 ? *handed : 0ull, 0);
            hand_task(group, lane, last + 1, PKQ_GROUP_HEADER_QUIT, words, true);
        }
        if (lane == 0) task->quit = 1;
        __syncwarp();
        block_barrier(BAR_TASK, blockDim.x);
        if (blocks > 1 && present) {
            const uint64_t* left = group_word(group, PKQ_GROUP_OFF_LEFT);
            for (;;) {
                const uint64_t n = __shfl_sync(0xffffffffu, lane == 0 ? load_relaxed_gpu(left) : 0ull, 0);
                if (n >= blocks - 1) break;
                beat();
                __nanosleep(256);
            }
            // The blocks' writes (released by their adds) before the final
            // state word and the system fence ahead of it.
            fence_acquire_gpu();
        }
    }
};

}  // namespace pkq
