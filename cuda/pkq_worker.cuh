// pkq_worker.cuh: the resident worker loop (the device half of src/proto/queue.rs).
// A worker is `pollers` warps of one block; worker w of W serves ring r = w % R of the R
// rings, sequence numbers start + w / R, start + w / R + W / R, ... in
// order, each in slot r * capacity + (seq & (capacity - 1)) (pkq_layout.h).
#pragma once
#include <cstdint>

#include "pkq_handler.cuh"
#include "pkq_layout.h"
#include "pkq_mem.cuh"
#include "pkq_group.cuh"
#include "pkq_slot.cuh"

namespace pkq {

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr uint64_t SEQ_MASK = (1ull << PKQ_SEQ_BITS) - 1;

// One poll, one load instruction: lanes 0..7 read the slot's eight tagged
// words (one coalesced 64-byte read) and, when `with_stop`, lane 8 reads the
// stop word alongside, so the stop check adds no round trip.
__device__ __forceinline__ uint64_t poll_load(const uint64_t* addr, uint32_t lane, bool with_stop) {
    uint64_t w = 0;
    if (lane < PKQ_SLOT_WORDS || (lane == PKQ_SLOT_WORDS && with_stop)) w = load_sys(addr);
    return w;
}

enum class Wait { Pending, Task, Stop, BadTag };

// Whether the poll read the stop word set (lane PKQ_SLOT_WORDS's word).
__device__ __forceinline__ bool stop_in(uint64_t w) {
    return __shfl_sync(FULL_MASK, w, PKQ_SLOT_WORDS) == PKQ_STOP_VALUE;
}

// The status a completion carries for a handler's `status`: a completion
// has 8 bits for it, so a status over 255 (which would read as another, OK
// included) fails the task as PKQ_STATUS_BAD_ARGS.
__device__ __forceinline__ uint32_t published_status(uint32_t status) {
    return status > 0xff ? PKQ_STATUS_BAD_ARGS : status;
}

// What one poll result says about the slot of lap `tag` (warp-uniform). A
// whole slot is judged first: judging the stop word first measured a
// slower round trip, for reasons not understood
// (docs/design/heartbeat-and-stop.md#judge-order); a
// stop read with a whole slot is honoured by `serve` instead. `copy`: the
// slot is a copy other than the first, which may also hold the lap before
// the one before (COPIES in pkq_layout.h).
__device__ __forceinline__ Wait judge(uint64_t w, uint32_t lane, uint32_t tag, bool copy) {
    const uint32_t t = tag_of(w);
    // Every word carries this lap's tag: the slot is whole.
    if (__all_sync(FULL_MASK, lane >= PKQ_SLOT_WORDS || t == tag)) return Wait::Task;
    const uint32_t before = (tag + 0xff) & 0xff;
    const uint32_t lagging = copy ? (tag + 0xfe) & 0xff : before;
    if (__any_sync(FULL_MASK, lane < PKQ_SLOT_WORDS && t != tag && t != before && t != lagging))
        return Wait::BadTag;
    if (stop_in(w)) return Wait::Stop;
    return Wait::Pending;
}

// Runs the `count` tasks of a pack (PACKS in pkq_layout.h) in the slot at
// index `slot`, one after another, each by the whole warp (beating after
// each, as after a single task: back-to-back tasks are not a stall): lane
// j loads task j's argument word and stores its result word; then a system
// fence, so the results land before the completion. Returns the pack's
// outcome: OK with the mask of failed tasks as its value, or BAD_ARGS (and
// `pack` 0) for a header no host writes.
template <class Handlers, class Beat>
__device__ __forceinline__ Outcome run_pack(const pkq_params& p, uint64_t slot, uint32_t lane,
                                            uint32_t header, uint32_t count,
                                            const Handlers& handlers, const Beat& beat,
                                            uint32_t& pack) {
    const uint32_t op = static_cast<uint32_t>(header & 0xffff);
    const uint32_t len = static_cast<uint32_t>(header >> PKQ_HEADER_LEN_SHIFT) & 0xff;
    if (count > PKQ_PACK_TASKS || len > PKQ_PACK_ARG_BYTES) {
        pack = 0;
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    const uint64_t at = slot * PKQ_PACK_TASKS + lane;
    uint64_t arg = 0;
    if (len != 0) {
        // The argument words carry no tag: order their loads after the
        // slot's, which the host published after them (lanes 0..7 saw the
        // slot and fence; the barrier orders every lane's loads after
        // their fences).
        fence_acquire_sys();
        __syncwarp();
        if (lane < count) arg = load_sys(reinterpret_cast<const uint64_t*>(p.pack_args) + at);
    }
    uint64_t mine = 0;
    uint32_t failed = 0;
    for (uint32_t j = 0; j < count; ++j) {
        Context ctx;
        ctx.lane = lane;
        ctx.op = op;
        ctx.len = len;
        ctx.words[0] = __shfl_sync(FULL_MASK, arg, j);
#pragma unroll
        for (int k = 1; k < PKQ_ARGS_BYTES / 8; ++k) ctx.words[k] = 0;
        ctx.input = nullptr;
        ctx.in_len = 0;
        ctx.output = nullptr;
        ctx.out_cap = 0;
        const Outcome o = op == PKQ_OP_NOP ? ok() : handlers(ctx);
        const uint32_t status = published_status(__shfl_sync(FULL_MASK, o.status, 0));
        const uint64_t value = __shfl_sync(FULL_MASK, o.value, 0);
        if (lane == j) mine = status == PKQ_STATUS_OK ? value : status;
        if (status != PKQ_STATUS_OK) failed |= 1u << j;
        beat();
    }
    if (lane < count) store_sys(reinterpret_cast<uint64_t*>(p.pack_results) + at, mine);
    // Every lane's result stores, and any device-memory writes of the
    // handlers, before the completion (cumulative through the barrier).
    __syncwarp();
    __threadfence_system();
    pack = count;
    return ok(failed);
}

// IO (pkq_layout.h).
// Loads of one input word before a word of another lap fails the task: the
// producer wrote the input before the slot, and the acquire fence put the
// loads after the slot's, so only a host that broke the protocol leaves
// one; it is read again all the same before the task fails.
constexpr uint32_t IO_RETRIES = 1024;

// Host memory is read and written in whole runs of the warp: each load of
// a batch one 512-byte request (16 bytes a lane), each store a 256-byte
// one, IO_BATCH loads in flight a lane. Word k carries bytes [7k, 7k + 7)
// of the stream, which sit at those bytes of the worker's room (io_put2 on
// the way in, io_encode on the way out). The code is kept small, and a
// short stream runs only the code of its own loads (uniform branches): it
// runs once per task, and what an SM runs once is fetched from the
// instruction caches' misses (unrolled, it cost microseconds).
constexpr uint32_t IO_BATCH = 8;

// The words of a stream one warp reads in one batch: a chunk of a large
// input (IoHelp).
constexpr uint32_t IO_CHUNK_WORDS = 64 * IO_BATCH;
constexpr uint64_t IO_PAYLOAD_MASK = (1ull << 56) - 1;
// A stale chunk in IoHelp::done.
constexpr uint32_t IO_STALE_ONE = 1u << 16;

// Lane `lane` holds words 2 lane and 2 lane + 1 of a block of 64 words
// starting at word `block` (a multiple of 64) of a stream of `words`
// words: bytes [14 lane, 14 lane + 14) of the block's 448, which start at
// byte 7 block of `dst` (8-byte aligned). It stores the 8-byte words of
// `dst` that start in its bytes and lie within the stream's 7 words bytes
// (rounded up to 8, within the room), from its own two words and lane
// lane + 1's first (one shuffle): aligned stores, two at most a lane.
__device__ __forceinline__ void io_put2(uint8_t* dst, uint32_t block, uint32_t words, uint32_t lane,
                                        uint64_t a, uint64_t b) {
    const uint64_t n = __shfl_down_sync(FULL_MASK, a, 1);
    // The lane's bytes from 14 lane on, eight at a time: x0, x1, x2.
    const uint64_t x0 = (a & IO_PAYLOAD_MASK) | (b << 56);
    const uint64_t x1 = ((b & IO_PAYLOAD_MASK) >> 8) | (n << 48);
    const uint64_t x2 = (n & IO_PAYLOAD_MASK) >> 16;
    const uint32_t s = 14 * lane;
    // The first 8-byte boundary at or after byte s (s is even: d is 0, 2,
    // 4 or 6); a second one 8 bytes on while it is within the lane's 14.
    const uint32_t d = (8 - (s & 7)) & 7;
    // Funnel shifts by 8 d without a branch: a shift by 63 - 8 d and then
    // by 1 is 0 where d is 0 (a shift by 64 would not be).
    const uint64_t o1 = (x0 >> (8 * d)) | ((x1 << (63 - 8 * d)) << 1);
    const uint64_t o2 = (x1 >> (8 * d)) | ((x2 << (63 - 8 * d)) << 1);
    const uint32_t at = PKQ_IO_WORD_BYTES * block + s + d;
    const uint32_t end = PKQ_IO_WORD_BYTES * words;
    if (at < end) *reinterpret_cast<uint64_t*>(dst + at) = o1;
    if (d < 6 && at + 8 < end) *reinterpret_cast<uint64_t*>(dst + at + 8) = o2;
}

// One pass over words [from, to) of a task's input of `words` tagged words
// at `area` (16-byte aligned, with a word to spare when `words` is odd: the
// area's count is even; `from` a multiple of 64), decoded into `dst` (the
// task's room, in shared or device memory): lane l of load j of a batch
// reads words 64 j + 2 l and the next, 16 bytes. Whether a word of this
// lane carried another lap's tag than `tag`.
__device__ __noinline__ bool io_pass(const uint64_t* area, uint32_t from, uint32_t to, uint32_t words,
                                 uint32_t tag, uint8_t* dst, uint32_t lane) {
    bool stale = false;
    for (uint32_t base = from; base < to; base += IO_CHUNK_WORDS) {
        uint64_t a[IO_BATCH], b[IO_BATCH];
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            a[j] = b[j] = 0;
        }
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            // Loads of the batch within the stream only (a uniform branch:
            // a short stream runs, and fetches, the code of its loads alone).
            if (base + 64 * j >= to) break;
            const uint32_t k = base + 64 * j + 2 * lane;
            load2_sys_if(k < to, area + k, a[j], b[j]);
        }
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            if (base + 64 * j >= to) break;
            const uint32_t k = base + 64 * j + 2 * lane;
            // Bitwise, not short-circuit: no branch per lane.
            stale |= ((k < to) & (tag_of(a[j]) != tag)) | ((k + 1 < to) & (tag_of(b[j]) != tag));
            io_put2(dst, base + 64 * j, words, lane, a[j], b[j]);
        }
    }
    return stale;
}

// Words [from, to) of a task's output stream of `words` words at `stream`
// (the area's word 1 on), encoded from `room` (8-byte aligned, a multiple
// of 56 bytes) under `tag`: relaxed posted stores. A batch's room words are
// all loaded first, in flight together, and only then used: a use right
// after each load made the batch wait for its loads one after another.
__device__ __noinline__ void io_encode(uint64_t* stream, const uint8_t* room, uint32_t from, uint32_t to,
                                       uint32_t words, uint32_t tag, uint32_t lane) {
    const uint64_t* r = reinterpret_cast<const uint64_t*>(room);
    // The room word holding the stream's last byte: a word's second load
    // reads no further (where its bytes end in its first word, it is not
    // used).
    const uint32_t last = (PKQ_IO_WORD_BYTES * words - 1) / 8;
    for (uint32_t base = from; base < to; base += 32 * IO_BATCH) {
        // A batch's room loads first, all in flight together (uniform
        // guards, as io_pass's loads), then the words made of them, stored.
        uint64_t lo[IO_BATCH], hi[IO_BATCH];
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            lo[j] = hi[j] = 0;
        }
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            if (base + 32 * j >= to) break;
            // Bytes [7k, 7k + 7): from the 8-byte word they start in, and
            // the next.
            const uint32_t at = PKQ_IO_WORD_BYTES * min(base + 32 * j + lane, words - 1);
            lo[j] = r[at / 8];
            hi[j] = r[min(at / 8 + 1, last)];
        }
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            if (base + 32 * j >= to) break;
            const uint32_t k = base + 32 * j + lane;
            const uint32_t shift = 8 * ((PKQ_IO_WORD_BYTES * min(k, words - 1)) % 8);
            // Shifts of 0 and 8 take the 7 bytes from the first word alone.
            const uint64_t v = (lo[j] >> shift) | (shift > 8 ? hi[j] << (64 - shift) : 0);
            store_sys_if(k < to, stream + k, tagged(v, tag));
        }
    }
}

// A large input or output moved by its worker's pollers together. A worker
// runs its tasks one after another, so while one of its pollers runs a task
// the others cannot claim the next one: they poll. The task's poller posts
// the stream here in chunks of IO_CHUNK_WORDS words; the others, between
// their polls (io_help), and the task's poller itself claim chunks one at
// a time and move them (an input: read and decoded into the room; an
// output: encoded from the room and stored). One post at a time per worker
// (the task's poller waits for every chunk of its post before it goes on),
// in the block's shared memory.
struct IoHelp {
    // Bits 0..32: chunks claimed; 32..48: the post's chunk count. Written
    // whole by the posting poller (atomicExch), claimed with atomicAdd: a
    // claim returns the post it counts in (io_claim_chunks).
    unsigned long long next;
    // Bits 0..16: chunks of the post moved; 16..32: how many of them held a
    // word of another lap (inputs), counted in the same atomic.
    unsigned int done;
    uint64_t* area;      // the input area, or the output's stream
    uint8_t* room;       // the task's room (input or output)
    uint32_t words;      // words of the stream
    uint32_t tag;        // the task's lap's tag
    uint32_t output;     // nonzero: an output (encode and store)
    uint32_t fence;      // an output's claimers fence (system) after their stores
};

// Claims and moves the chunks of the post in `h` until none is left (every
// lane; warp-uniform). A claim that lands on a later post than the one seen
// is that post's chunk: the post's fields were written before its `next`
// (fence), and stay as they are until its chunks are all done, so they are
// read after the claim. Returns when no chunk is left to claim; chunks
// claimed by other warps may still be in flight.
__device__ __forceinline__ void io_claim_chunks(IoHelp* h, uint32_t lane) {
    for (;;) {
        unsigned long long v = 0;
        if (lane == 0) {
            v = *reinterpret_cast<volatile unsigned long long*>(&h->next);
            if ((v & 0xffffffffull) < ((v >> 32) & 0xffff)) v = atomicAdd(&h->next, 1ull);
        }
        v = __shfl_sync(FULL_MASK, v, 0);
        const uint32_t chunk = static_cast<uint32_t>(v);
        if (chunk >= ((v >> 32) & 0xffff)) return;
        // The post's fields, after the claim that names it, in every lane
        // (a shuffle orders no memory: the barrier does, after lane 0's
        // fence).
        __threadfence_block();
        __syncwarp();
        const volatile IoHelp* f = h;
        uint64_t* area = f->area;
        uint8_t* room = f->room;
        const uint32_t words = f->words;
        const uint32_t from = chunk * IO_CHUNK_WORDS;
        const uint32_t to = min(from + IO_CHUNK_WORDS, words);
        bool stale = false;
        if (f->output) {
            io_encode(area, room, from, to, words, f->tag, lane);
            // This chunk's stores before the output's word 0 (which the
            // posting poller stores after every chunk is done).
            if (f->fence) {
                __syncwarp();
                __threadfence_system();
            }
        } else {
            stale = io_pass(area, from, to, words, f->tag, room, lane);
        }
        const bool any = __any_sync(FULL_MASK, stale);
        // Every lane's room bytes (or stores) before the count that says
        // they are done.
        __syncwarp();
        __threadfence_block();
        // One atomic says both that the chunk is done and whether it was
        // stale (IoHelp::done), so neither is seen without the other.
        if (lane == 0) atomicAdd(&h->done, 1u + (any ? IO_STALE_ONE : 0u));
    }
}

// A poller of the worker of `h` between its polls: it moves chunks of the
// worker's posted stream, if one is posted and not all claimed (a shared
// memory read otherwise). Kept out of line: the poll loop stays small.
__device__ __noinline__ void io_help(IoHelp* h, uint32_t lane) { io_claim_chunks(h, lane); }

// Posts a stream of `words` words in `h` (fields as in IoHelp), claims
// chunks with the worker's other pollers, and waits until every chunk is
// done (each claimed chunk is moved by its claimer without waiting on
// anything but its own loads and stores). Whether an input chunk held a
// word of another lap (warp-uniform).
__device__ __forceinline__ bool io_together(IoHelp* h, uint64_t* area, uint8_t* room, uint32_t words,
                                            uint32_t tag, bool output, bool fence, uint32_t lane) {
    const uint32_t chunks = (words + IO_CHUNK_WORDS - 1) / IO_CHUNK_WORDS;
    if (lane == 0) {
        h->area = area;
        h->room = room;
        h->words = words;
        h->tag = tag;
        h->output = output;
        h->fence = fence;
        h->done = 0;
        // The fields before the post that names them.
        __threadfence_block();
        atomicExch(&h->next, static_cast<unsigned long long>(chunks) << 32);
    }
    __syncwarp();
    io_claim_chunks(h, lane);
    bool stale = false;
    if (lane == 0) {
        // Every chunk is claimed; the claimers finish theirs. The loop's
        // exit: a claimer moves its chunk and counts it without waiting on
        // anything but its own loads and stores (a poller leaves `serve`
        // or sleeps only between chunks, holding none). No time bound: the
        // room must not be used while a claimer may still write it.
        unsigned int d;
        while (((d = *reinterpret_cast<volatile unsigned int*>(&h->done)) & 0xffff) < chunks) {
        }
        __threadfence_block();
        stale = (d >> 16) != 0;
    }
    // Every lane after lane 0's look at the count.
    __syncwarp();
    return __shfl_sync(FULL_MASK, stale, 0);
}

// Whether a stream of `words` words is moved by the worker's pollers
// together: several chunks, and a worker whose other pollers can help (`h`
// not null).
__device__ __forceinline__ bool io_shared(const IoHelp* h, uint32_t words) {
    return h != nullptr && words > IO_CHUNK_WORDS;
}

// Decodes a task's input, `len` bytes in tagged words of lap `tag` at
// `area`, into `dst`: a first pass (by the worker's pollers together where
// io_shared), after io_begin's acquire fence. Where a word is of another
// lap (a host that broke the protocol: the fence put these reads after the
// slot's), another acquire fence and a second pass by this warp; then, if a word is still stale,
// every word is read again until it carries the tag, IO_RETRIES times at
// most. Whether every word carried the tag (warp-uniform).
__device__ __forceinline__ bool io_read(IoHelp* h, const uint64_t* area, uint32_t len, uint32_t tag, uint8_t* dst,
                                        uint32_t lane) {
    const uint32_t words = (len + PKQ_IO_WORD_BYTES - 1) / PKQ_IO_WORD_BYTES;
    const bool first_stale =
        io_shared(h, words)
            ? io_together(h, const_cast<uint64_t*>(area), dst, words, tag, false, false, lane)
            : __any_sync(FULL_MASK, io_pass(area, 0, words, words, tag, dst, lane));
    if (!first_stale) return true;
    // The second pass's loads after the slot's (lanes 0..7 saw it).
    fence_acquire_sys();
    __syncwarp();
    bool stale = io_pass(area, 0, words, words, tag, dst, lane);
    if (!__any_sync(FULL_MASK, stale)) return true;
    // Every word read again until it carries the tag, by every lane (the
    // passes gave lane l words 64 j + 2 l and the next; this loop word k to
    // lane k % 32), after the pass's stores into the room (the barrier).
    fence_acquire_sys();
    __syncwarp();
    bool whole = true;
    {
#pragma unroll 1
        for (uint32_t k = lane; k < words; k += 32) {
            uint64_t v = load_sys(area + k);
            for (uint32_t r = 0; tag_of(v) != tag && r < IO_RETRIES; ++r) v = load_sys(area + k);
            whole &= tag_of(v) == tag;
            // Byte by byte: words of other lanes hold the bytes around.
            uint8_t* d = dst + PKQ_IO_WORD_BYTES * k;
#pragma unroll 1
            for (uint32_t c = 0; c < PKQ_IO_WORD_BYTES; ++c) d[c] = static_cast<uint8_t>(v >> (8 * c));
        }
    }
    return __all_sync(FULL_MASK, whole);
}

// Writes a task's output of `len` bytes from `src` (its room, 8-byte
// aligned, a multiple of 56 bytes) as tagged words of lap `lap` at `area`:
// its length in word 0, then the stream from word 1 (by the worker's
// pollers together where io_shared); relaxed posted stores (the host checks
// every word's tag), then word 0 (length and lap), behind a system fence if
// `fence`.
__device__ __forceinline__ void io_write(IoHelp* h, uint64_t* area, const uint8_t* src, uint32_t len,
                                         uint64_t lap, uint32_t lane, bool fence) {
    const uint32_t tag = static_cast<uint32_t>(lap) & 0xff;
    const uint32_t words = (len + PKQ_IO_WORD_BYTES - 1) / PKQ_IO_WORD_BYTES;
    if (io_shared(h, words))
        io_together(h, area + 1, const_cast<uint8_t*>(src), words, tag, true, fence, lane);
    else if (words != 0)
        io_encode(area + 1, src, 0, words, words, tag, lane);
    // The stream before word 0, which names the lap, unless the worker
    // knows that no word of the stream can carry this lap's tag but this
    // lap's (`fence` false: IO_SEEN in pkq_layout.h); the host takes the
    // output once word 0 is this lap's and every word of the stream
    // carries its tag. (Chunks stored by other pollers were fenced by them
    // where `fence`, and are done before io_together returns.)
    __syncwarp();
    if (fence) __threadfence_system();
    const uint64_t lap_bits = lap & ((1ull << PKQ_IO_LAP_BITS) - 1);
    if (lane == 0) store_sys(area, tagged(len | (lap_bits << PKQ_IO_LAP_SHIFT), tag));
}

// A plain stream's bytes as moved: rounded up to 16 (PLAIN in
// pkq_layout.h).
__device__ __forceinline__ uint32_t plain_bytes(uint32_t len) { return (len + 15) & ~15u; }

// Copies a plain input's first `bytes` (plain_bytes) from `area` (mapped,
// 16-byte aligned) into `room` (16-byte aligned): by the bulk copy engine
// where `bar` (the worker's mbarrier) is not null (the room is in shared
// memory), else by the warp's loads, IO_BATCH of 16 bytes in flight a lane.
// Called after the slot's loads and an acquire fence (io_begin). Every lane;
// the room is whole for every lane when it returns. Kept out of line, as
// plain_write: inlined, the two cost every tagged IO task device time
// (io_breakdown; docs/design/io-worker-path.md#small-code-loads-before-use).
__device__ __noinline__ void plain_read(const uint8_t* area, uint8_t* room, uint32_t bytes,
                                           unsigned long long* bar, uint32_t lane) {
#ifdef PKQ_BULK_COPY
    if (bar != nullptr) {
        // The copy's reads (the async proxy's) after the fence that put
        // them after the slot's.
        if (lane == 0) {
            bulk_after_fence();
            bulk_read(room, area, bytes, bar);
        }
        // Lane 0 saw the copy done (the barrier's phase): every lane after.
        __syncwarp();
        return;
    }
#endif
    for (uint32_t base = 0; base < bytes; base += 512 * IO_BATCH) {
        uint64_t a[IO_BATCH], b[IO_BATCH];
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            const uint32_t o = base + 512 * j + 16 * lane;
            load2_sys_if(o < bytes, reinterpret_cast<const uint64_t*>(area + o), a[j], b[j]);
        }
#pragma unroll
        for (uint32_t j = 0; j < IO_BATCH; ++j) {
            const uint32_t o = base + 512 * j + 16 * lane;
            if (o < bytes) {
                reinterpret_cast<uint64_t*>(room + o)[0] = a[j];
                reinterpret_cast<uint64_t*>(room + o)[1] = b[j];
            }
        }
    }
    __syncwarp();
}

// Copies a plain output's `bytes` (plain_bytes) from `room` to `area` (the
// output area's word PKQ_IO_PLAIN_OUT_WORD on; both 16-byte aligned): by
// the bulk copy engine where `bulk` (the room is in shared memory), lane 0
// waiting for its writes, else by the warp's relaxed sys-scope stores.
// Every lane, after the handler's writes of the room; the caller fences
// (system) before the words that say the output is there.
__device__ __noinline__ void plain_write(uint8_t* area, const uint8_t* room, uint32_t bytes, bool bulk,
                                            uint32_t lane) {
#ifdef PKQ_BULK_COPY
    if (bulk) {
        // Every lane's room writes, for the copy's reads (async proxy).
        bulk_source_fence();
        __syncwarp();
        if (lane == 0) bulk_write(area, room, bytes);
        return;
    }
#endif
    for (uint32_t o = 16 * lane; o < bytes; o += 512) {
        const uint64_t* r = reinterpret_cast<const uint64_t*>(room + o);
        store2_sys(reinterpret_cast<uint64_t*>(area + o), r[0], r[1]);
    }
}

// Bytes of a room for up to `b` bytes of a stream (PKQ_IO_ROOM_ALIGN).
__device__ __forceinline__ uint32_t io_room(uint32_t b) {
    return (b + PKQ_IO_ROOM_ALIGN - 1) / PKQ_IO_ROOM_ALIGN * PKQ_IO_ROOM_ALIGN;
}

// What a worker knows of a slot's output area (IO_SEEN in pkq_layout.h):
// one word, bits 0..16 a count n of words, bits 16..64 a lap L's low 48
// bits: words [0, n) of the stream were all written at lap L or later.
constexpr uint32_t SEEN_COUNT_BITS = 16;
constexpr uint64_t SEEN_LAP_MASK = (1ull << (64 - SEEN_COUNT_BITS)) - 1;

// Where the knowledge of slot `slot`'s output area is, or nullptr without
// IO areas: after every worker's rooms in io_scratch.
__device__ __forceinline__ uint64_t* io_seen(const pkq_params& p, uint64_t slot) {
    if (p.io_in_words + p.io_out_words == 0) return nullptr;
    const uint64_t rooms = static_cast<uint64_t>(p.workers) * (io_room(p.io_in_bytes) + io_room(p.io_out_bytes));
    return reinterpret_cast<uint64_t*>(p.io_scratch + rooms) + slot * PKQ_IO_SEEN_WORDS;
}

// Laps from the one `seen` names to `lap`, modulo what both can tell (laps
// wrap at 2^(PKQ_SEQ_BITS - capacity_log2); the knowledge keeps 48 bits).
__device__ __forceinline__ uint64_t seen_age(uint64_t seen, uint64_t lap, uint32_t capacity_log2) {
    const uint32_t bits = min(64 - SEEN_COUNT_BITS, PKQ_SEQ_BITS - capacity_log2);
    return (lap - (seen >> SEEN_COUNT_BITS)) & ((1ull << bits) - 1);
}

// How many words of the area a task of lap `lap` can tell by their tag
// alone: those written in the last 255 laps (`seen`'s count while its lap is
// that young, else none). Worked out before the slot's poll: on the way to
// the task, a words' count is compared with it.
__device__ __forceinline__ uint32_t seen_reach(uint64_t seen, uint64_t lap, uint32_t capacity_log2) {
    return seen_age(seen, lap, capacity_log2) < 256 ? static_cast<uint32_t>(seen & ((1u << SEEN_COUNT_BITS) - 1))
                                                    : 0;
}

// The knowledge after a task of lap `lap` wrote `words` words of the area
// (`covered`: within its reach before): the lap's own words, or, while it
// is young, an older lap's that reaches further.
__device__ __forceinline__ uint64_t seen_after(uint64_t seen, uint64_t lap, uint32_t words, bool covered,
                                               uint32_t capacity_log2) {
    if (words == 0) return seen;
    if (covered && words < (seen & ((1u << SEEN_COUNT_BITS) - 1)) && seen_age(seen, lap, capacity_log2) < 128)
        return seen;
    return ((lap & SEEN_LAP_MASK) << SEEN_COUNT_BITS) | words;
}

// An IO task (header bit PKQ_HEADER_IO_BIT) on its way through its poller:
// io_begin before the handler, io_end after, io_note after its completion.
struct IoTask {
    uint64_t* seen;      // the worker's knowledge of the slot's output area (IO_SEEN)
    IoHelp* help;        // the worker's post for its other pollers (null: none)
    uint64_t seen_out;   // as read before the slot's poll
    uint32_t out_reach;  // seen_reach of it, worked out before the poll
    unsigned long long* bar;  // the worker's mbarrier where its rooms are in shared memory (else null)
    uint8_t* output;     // the output room
    uint32_t out_words;  // words of the output written (io_end)
    bool out_known;      // no word of the output's area can carry this lap's tag but this lap's
    bool in_plain;       // the input was plain bytes (header bit PKQ_HEADER_PLAIN_BIT)
    bool out_plain;      // the output went out as plain bytes (io_end)
};

// A task of a slot whose output area held a plain output in the last 255
// laps (header bit PKQ_HEADER_FRESH_BIT): nothing known of it (PLAIN in
// pkq_layout.h), and its note starts from nothing.
__device__ __forceinline__ void io_forget(IoTask& t) {
    t.seen_out = 0;
    t.out_reach = 0;
}

// Decodes the task's `in_len` input bytes into the worker's input room
// (`rooms`: the input room, then the output room) and points the context at
// the input and the output room. Whether the input was within bounds and
// whole (if not, the task fails: PKQ_STATUS_BAD_ARGS).
__device__ __forceinline__ bool io_begin(const pkq_params& p, uint64_t slot, uint64_t lap, uint8_t* rooms,
                                         uint32_t lane, uint32_t in_len, Context& ctx, IoTask& t) {
    // The input's loads after the slot's (the producer wrote it first),
    // none read before it: an acquire fence, which on sm_90 costs about
    // nothing (docs/design/acquire-fence.md#no-input-knowledge), so the worker
    // keeps no knowledge of input areas. (Before sm_90 it is a full system
    // fence: fence_acquire_sys.) (Lanes 0..7 saw the slot and fence; the
    // barrier orders every lane's loads, and lane 0's bulk copy, after
    // their fences.)
    if (in_len != 0) {
        fence_acquire_sys();
        __syncwarp();
    }
    t.output = rooms + io_room(p.io_in_bytes);
    const uint64_t* area = reinterpret_cast<const uint64_t*>(p.io_in) + slot * p.io_in_words;
    bool input_ok;
    if (t.in_plain) {
        const uint32_t bytes = plain_bytes(in_len);
        // A plain input is as long as the host makes one (a short one is
        // refused).
        input_ok = in_len >= PKQ_IO_PLAIN_MIN_BYTES && in_len <= p.io_in_bytes && bytes <= 8 * p.io_in_words;
        if (input_ok) plain_read(reinterpret_cast<const uint8_t*>(area), rooms, bytes, t.bar, lane);
    } else {
        input_ok = in_len <= p.io_in_bytes &&
                   io_read(t.help, area, in_len, static_cast<uint32_t>(lap) & 0xff, rooms, lane);
    }
    // Every lane's decoded bytes, for every lane of the handler.
    __syncwarp();
    ctx.input = rooms;
    ctx.in_len = in_len;
    ctx.output = t.output;
    ctx.out_cap = p.io_out_bytes;
    return input_ok;
}

// Writes the task's output to the slot's output area (empty if the task
// failed; an output over the room fails it: PKQ_STATUS_BAD_ARGS), and notes
// in `t` what io_note needs of it.
__device__ __forceinline__ void io_end(const pkq_params& p, uint64_t slot, uint64_t lap, uint32_t lane,
                                       IoTask& t, Outcome& out) {
    // Lane 0's outcome for all: lanes that disagree must not part ways
    // before io_write's warp barrier.
    uint32_t status = __shfl_sync(FULL_MASK, out.status, 0);
    const uint32_t out_len = __shfl_sync(FULL_MASK, out.out_len, 0);
    if (status == PKQ_STATUS_OK && out_len > p.io_out_bytes) {
        // Failed, but what the handler wrote to device memory stays
        // written: the fence before the completion still orders it.
        const bool wrote = out.wrote_device_memory;
        out = fail(PKQ_STATUS_BAD_ARGS);
        out.wrote_device_memory = wrote;
        status = PKQ_STATUS_BAD_ARGS;
    }
    const uint32_t written = status == PKQ_STATUS_OK ? out_len : 0;
    uint64_t* area = reinterpret_cast<uint64_t*>(p.io_out) + slot * p.io_out_words;
    const uint32_t bytes = plain_bytes(written);
    t.out_plain = written >= PKQ_IO_PLAIN_MIN_BYTES && 8 * PKQ_IO_PLAIN_OUT_WORD + bytes <= 8 * p.io_out_words;
    t.out_words = t.out_plain ? 0 : (written + PKQ_IO_WORD_BYTES - 1) / PKQ_IO_WORD_BYTES;
    t.out_known = t.out_words <= t.out_reach;
    // Every lane's output bytes, for the lanes that write them out.
    __syncwarp();
    if (!t.out_plain) {
        io_write(t.help, area, t.output, written, lap, lane, !t.out_known);
        return;
    }
    plain_write(reinterpret_cast<uint8_t*>(area + PKQ_IO_PLAIN_OUT_WORD), t.output, bytes, t.bar != nullptr, lane);
    // The bytes before word 0 and the completion (PLAIN in pkq_layout.h):
    // every lane's stores, or lane 0's copy done, then the fence.
    __syncwarp();
    __threadfence_system();
    const uint64_t lap_bits = lap & ((1ull << PKQ_IO_LAP_BITS) - 1);
    if (lane == 0) store_sys(area, tagged(written | (lap_bits << PKQ_IO_LAP_SHIFT), static_cast<uint32_t>(lap) & 0xff));
}

// The knowledge of the slot's output area for its next lap, after the task's
// completion (off the way to it), which this worker serves after this
// task. Nothing orders it before the next poller's read of it (at the top
// of its loop, before its claim): that poller may read any older knowledge
// of the slot, which is still true of it (IO_SEEN in pkq_layout.h).
__device__ __forceinline__ void io_note(const pkq_params& p, uint64_t lap, uint32_t lane, const IoTask& t) {
    // An area that got plain bytes is known of no more (PLAIN in
    // pkq_layout.h).
    if (lane == 0)
        __stcg(reinterpret_cast<unsigned long long*>(t.seen),
               t.out_plain ? 0ull : seen_after(t.seen_out, lap, t.out_words, t.out_known, p.capacity_log2));
}

// Which tasks a worker serves (RINGS in pkq_layout.h): worker w of W serves
// ring w % R, its tasks k = 0, 1, ... being sequence numbers start + w / R
// + k W / R, each in slot (ring) * capacity + (seq & (capacity - 1)), so
// every lap the same slots. Worked out once, used per task.
struct WorkerSlots {
    uint64_t ring_base;     // the ring's first slot
    uint64_t ring_workers;  // the ring's workers (W / R)
    uint64_t first;         // the worker's place among them
    uint64_t mask;          // capacity - 1

    __device__ __forceinline__ WorkerSlots(const pkq_params& p, uint32_t worker)
        : ring_base(static_cast<uint64_t>(worker % p.rings) << p.capacity_log2),
          ring_workers(p.workers / p.rings),
          first(worker / p.rings),
          mask((1ull << p.capacity_log2) - 1) {}

    // The sequence number of the worker's task k.
    __device__ __forceinline__ uint64_t seq(const pkq_params& p, uint64_t k) const {
        return (p.start_seq + first + k * ring_workers) & SEQ_MASK;
    }
    // The slot of sequence number `seq` of the worker's ring.
    __device__ __forceinline__ uint64_t slot(uint64_t seq) const { return ring_base + (seq & mask); }
    // How many slots the worker serves: every lap its tasks k < this fill
    // them once.
    __device__ __forceinline__ uint64_t slots() const { return (mask + 1) / ring_workers; }
};

// Reads a claim counter that other warps of the block update, as one value
// for the whole warp: lanes reading it each for themselves could read it at
// different moments (independent thread scheduling), part ways, and leave a
// later __shfl_sync(FULL_MASK) waiting for lanes that never come.
__device__ __forceinline__ uint64_t read_claim(const unsigned long long* claim) {
    const uint64_t v = *reinterpret_cast<const volatile unsigned long long*>(claim);
    return __shfl_sync(FULL_MASK, v, 0);
}

// How long a quiet poller naps between two looks at its worker's claim: it
// polls again at most about this long after the worker took a task.
constexpr uint32_t QUIET_NAP_NS = 128;
// How many naps a quiet poller takes between two reads of its stop word.
constexpr uint32_t QUIET_STOP_NAPS = 512;

// A lane of warps' pollers leave alone and do nothing after a completion
// (serve()'s `leave`).
struct LeaveAlone {
    template <class Beat>
    __device__ __forceinline__ void operator()(uint32_t, const Beat&) const {}
    __device__ __forceinline__ void after_completion(uint32_t) const {}
};

// Serves tasks until the host's stop word is set (or a slot holds a tag that
// is neither the expected lap nor the one before, or for a poller's copy
// other than the first, the lap before that: corruption). `Handlers`
// is called by all 32 lanes with the task's Context and returns the
// Outcome; NOP (op 0) is answered here, without it.
//
// A worker is `p.pollers` warps of one block ("pollers"), started a
// fraction of a read round trip apart, all polling the worker's next slot,
// each in a copy of the slots of its own (COPIES in pkq_layout.h), with one
// load in flight each: a task is seen on average after RTT/2P
// rather than RTT/2. (Several loads in flight from one warp gain nothing:
// they are served one after another.) The first poller to see a whole slot
// claims it with a compare-and-swap on the worker's counter in shared
// memory (`claim`: tasks of this worker taken so far) if the worker's task
// before it has completed (`done`: tasks of this worker completed so far),
// and runs it, so a worker runs its tasks one after another whatever its
// pollers (no poller waits for another: one that finds the slot whole
// before its turn polls again); the others see the counter move and go on
// to the next slot. A poller beats while it polls and between the tasks of
// a pack, not while a task runs.
// `leaving`: set by any poller of the worker when it leaves its loop (the
// exit of a quiet poller's wait, IdlePolicy::Quiet).
// `scratch`: 32 words of shared memory of this warp's own (see the claim
// below); `rooms`: the worker's IO rooms (io_begin); `help`: the worker's
// post of a large input or output (IoHelp); `bar`: the worker's mbarrier
// for the bulk copies of plain streams (null where the rooms are in device
// memory: PLAIN in pkq_layout.h). `leave`: what the poller does after each
// completion (`after_completion`) and once it left its loop, before its
// final state word, given its lane and its beat (its call) (LeaveAlone; a
// lane of blocks or groups: GroupLeave).
template <class Handlers, class Leave>
__device__ __forceinline__ void serve(const pkq_params& p, uint32_t worker, uint32_t poller,
                                      unsigned long long* claim, unsigned long long* done,
                                      uint32_t* leaving, unsigned long long* scratch, uint8_t* rooms,
                                      IoHelp* help, unsigned long long* bar,
                                      const Handlers& handlers, const Leave& leave) {
    const uint32_t lane = threadIdx.x & 31;
    // This poller's copy of the slots (COPIES in pkq_layout.h).
    const uint64_t* own_sq = reinterpret_cast<const uint64_t*>(p.sq) +
                             (static_cast<uint64_t>(p.rings) << p.capacity_log2) * PKQ_SLOT_WORDS * poller;
    uint64_t* cq = reinterpret_cast<uint64_t*>(p.cq);
    const uint64_t* stop_word = reinterpret_cast<const uint64_t*>(p.ctrl) +
                                (worker * p.pollers + poller) * (PKQ_CTRL_BYTES / 8) + PKQ_CTRL_STOP;
    uint64_t* state = reinterpret_cast<uint64_t*>(p.states) + worker * p.pollers + poller;
    uint64_t* heartbeat = state + p.workers * p.pollers;
    const WorkerSlots slots(p, worker);
    const bool shared_claims = p.pollers > 1;
    // Streams of several chunks are moved by the worker's pollers together.
    if (!shared_claims || (p.io_in_words <= IO_CHUNK_WORDS && p.io_out_words <= IO_CHUNK_WORDS + 1))
        help = nullptr;
    // This poller's offset in the worker's read cycle, taken again when it
    // leaves a quiet pause (below).
    int64_t stagger = 0;
    if (poller > 0) {
        const int64_t rtt = __shfl_sync(FULL_MASK, read_round_trip_cycles(stop_word), 0);
        stagger = rtt * poller / p.pollers;
        spin_cycles(stagger);
        __syncwarp();
    }
    // IdlePolicy::Quiet (pkq_params.idle_spin_ns in pkq_layout.h): after
    // idle_spin_ns without a task taken by this worker, its pollers but the
    // first stop reading host memory until the worker takes a task or a
    // poller leaves; the first keeps polling, so every task is still seen.
    bool may_quiet = shared_claims && poller > 0 && p.idle_sleep_max_ns == 0 && p.idle_spin_ns != 0;

    uint64_t last_beat_clk = __shfl_sync(FULL_MASK, clock64(), 0);
    if (lane == 0) {
        store_sys(heartbeat, globaltimer());
        store_sys(state, PKQ_WORKER_RUNNING);
    }
    // Heartbeat: a posted store every PKQ_HEARTBEAT_CYCLES, judged every 8
    // polls, every sleeping poll and after every task (a worker running
    // back-to-back long tasks polls once per task).
    // The beat carries the poller's position in its state word: it is for
    // diagnostics only, so it costs no store per task (dropping that store
    // changed no measured rate; docs/design/heartbeat-and-stop.md#heartbeat).
    uint64_t k = 0;  // this worker's tasks taken so far, as this warp knows it
    auto beat_if_due = [&]() {
        const uint64_t clk = __shfl_sync(FULL_MASK, clock64(), 0);
        if (clk - last_beat_clk >= PKQ_HEARTBEAT_CYCLES) {
            if (lane == 0) {
                store_sys(heartbeat, globaltimer());
                store_sys(state, PKQ_WORKER_RUNNING | (k << PKQ_STATE_BITS));
            }
            last_beat_clk = clk;
        }
    };
    uint64_t final_state = PKQ_WORKER_STOPPED;
    uint32_t polls = 0;
    // Idle policy state: kept across a slot seen whole before its turn (the
    // worker runs a long task: this poller idles), reset once a task of
    // this worker is taken.
    uint64_t idle_since = 0;
    uint32_t sleep_ns = 0;
    bool quiet = false;
    for (;;) {
        if (shared_claims) {
            // Another poller took a task: the worker is busy, this poller is
            // not idle (a slot seen before its turn leaves k as it was).
            const uint64_t taken_to = max(k, read_claim(claim));
            if (taken_to != k) {
                idle_since = 0;
                sleep_ns = 0;
            }
            k = taken_to;
        }
        const uint64_t seq = slots.seq(p, k);
        const uint64_t slot = slots.slot(seq);
        const uint32_t tag = static_cast<uint32_t>(seq >> p.capacity_log2) & 0xff;
        const uint64_t* addr =
            lane < PKQ_SLOT_WORDS ? own_sq + slot * PKQ_SLOT_WORDS + lane : stop_word;
        // What the worker knows of the slot's output area (IO_SEEN in
        // pkq_layout.h), read before the poll: off the way to the task.
        const uint64_t lap = seq >> p.capacity_log2;
        IoTask io_task;
        io_task.seen = io_seen(p, slot);
        io_task.help = help;
        io_task.seen_out = 0;
        io_task.out_reach = 0;
        io_task.out_words = 0;
        io_task.out_known = false;
        // No output until io_end wrote one (a task refused before, for its
        // argument length, tells io_note nothing).
        io_task.output = nullptr;
        io_task.bar = bar;
        io_task.in_plain = false;
        io_task.out_plain = false;
        if (io_task.seen != nullptr) {
            // Lane 0's reading for all (what the warp does depends on it).
            io_task.seen_out = __shfl_sync(
                FULL_MASK, __ldcg(reinterpret_cast<const unsigned long long*>(io_task.seen)), 0);
            io_task.out_reach = seen_reach(io_task.seen_out, lap, p.capacity_log2);
        }

        Wait outcome = Wait::Pending;
        uint64_t w = 0;
        uint64_t seen_done = 0;
        bool taken = false;
        while (outcome == Wait::Pending) {
            // Every 8th poll, and every poll while sleeping between polls.
            if ((++polls & 7) == 0 || sleep_ns != 0) {
                beat_if_due();
                // Idle policy: after idle_spin_ns of waiting, sleep between
                // polls, doubling up to idle_sleep_max_ns (Backoff), or go
                // quiet (Quiet).
                if ((p.idle_sleep_max_ns != 0 || may_quiet) && sleep_ns == 0) {
                    const uint64_t now = __shfl_sync(FULL_MASK, globaltimer(), 0);
                    if (idle_since == 0) {
                        idle_since = now;
                    } else if (now - idle_since >= p.idle_spin_ns) {
                        if (p.idle_sleep_max_ns != 0) sleep_ns = min(64u, p.idle_sleep_max_ns);
                        else quiet = true;
                    }
                }
            }
            if (quiet) {
                // No reads of the slots until another poller of this worker
                // takes a task (the claim moves) or leaves its loop
                // (`leaving`), or this poller's own stop word, read every
                // QUIET_STOP_NAPS naps, is set: the exits of this wait, the
                // last one needing no other warp. Meanwhile it helps with
                // the chunks of a large IO task of its worker (IoHelp).
                uint64_t taken_to;
                uint32_t left;
                uint32_t naps = 0;
                for (;;) {
                    taken_to = read_claim(claim);
                    left = __shfl_sync(FULL_MASK, *reinterpret_cast<volatile uint32_t*>(leaving), 0);
                    if (++naps % QUIET_STOP_NAPS == 0) {
                        const uint64_t stop = __shfl_sync(FULL_MASK, lane == 0 ? load_sys(stop_word) : 0, 0);
                        if (stop == PKQ_STOP_VALUE) left = 1;
                    }
                    if (taken_to > k || left != 0) break;
                    if (help != nullptr) io_help(help, lane);
                    __nanosleep(QUIET_NAP_NS);
                    beat_if_due();
                }
                quiet = false;
                idle_since = 0;
                // A poller left, or the stop word is set: poll as under
                // Spin, to find the reason (this poller's own stop word, or
                // the same bad slot).
                if (left != 0) may_quiet = false;
                // Back to this poller's place in the read cycle: the quiet
                // pollers all wake at once.
                spin_cycles(stagger);
                __syncwarp();
                if (taken_to > k) {
                    taken = true;
                    break;
                }
            }
            if (sleep_ns != 0) {
                __nanosleep(sleep_ns);
                sleep_ns = min(2 * sleep_ns, p.idle_sleep_max_ns);
            }
            w = poll_load(addr, lane, polls % PKQ_STOP_POLL_INTERVAL == 0);
            // The worker's tasks completed so far, read while the poll is in
            // flight (a shared-memory load, back long before it): the turn
            // check below then costs the way to the task nothing.
            if (shared_claims) seen_done = *reinterpret_cast<volatile unsigned long long*>(done);
            outcome = judge(w, lane, tag, poller > 0);  // waits for the load
            // Between polls, chunks of the input of the task another poller
            // of this worker runs, if it posted one (IoHelp).
            if (help != nullptr && outcome == Wait::Pending) io_help(help, lane);
            // Read after the load returned: if another poller took this task
            // meanwhile, the slot may since hold a later lap, so a bad tag
            // says nothing until the counter says this task is not taken.
            // A whole slot is settled by the claim's compare-and-swap, and a
            // poller that keeps polling a taken task's slot learns of it
            // every 8th poll (or when its poll sees the task), so neither
            // pays this read on the way to the task.
            if (shared_claims && (outcome == Wait::BadTag || (polls & 7) == 0) &&
                read_claim(claim) > k) {
                taken = true;
                break;
            }
        }
        if (!taken && outcome == Wait::BadTag) {
            final_state = PKQ_WORKER_BAD_TAG;
            break;
        }
        // Stop, or a whole slot read with the stop word set (judge returns
        // Stop only when it is set): the stop word outranks a task read with
        // it, so a cancel or a fault stops a worker that still has tasks
        // queued. Also where the slot's task was taken by another poller:
        // a stop word read is never dropped (this poller reads it again
        // only PKQ_STOP_POLL_INTERVAL polls later). (After a quiet pause,
        // `w` is the last poll's, which held no stop.)
        if (stop_in(w)) break;
        if (taken) {
            idle_since = 0;
            sleep_ns = 0;
            continue;
        }

        // Lane 0 alone writes the completion, from its own clock readings
        // and handler outcome: nothing else on the way from the poll to the
        // completion needs a shuffle (each costs that path time;
        // docs/design/tagged-words.md#completion-entry).
        const uint64_t t_start = globaltimer();
        if (shared_claims) {
            // Every lane issues the compare-and-swap, lane 0 on the claim and
            // the others on scratch words of their own, whose outcome nobody
            // reads: the same atomic from lane 0 alone (a divergent branch,
            // which ptxas wraps in a yielding convergence region) measured
            // slower between the poll and the completion
            // (docs/design/slot-copies-per-poller.md#claim).
            // Lane 0
            // claims only when it is the task's turn: the worker's task
            // before it completed as of the poll (`done`, read while the
            // poll was in flight), so a worker runs its tasks one after
            // another; otherwise it swaps its own scratch word and polls
            // again, and the task goes to the first poll after its turn.
            const bool turn = seen_done == k;
            unsigned long long* target = lane == 0 && turn ? claim : scratch + lane;
            const unsigned long long old = atomicCAS(target, k, k + 1);
            // The claim is seen by the block before the completion can be (a
            // poller that then reads the next lap sees it taken); and the
            // task before's writes (`done` moved after them) before this
            // task's.
            __threadfence_block();
            // Lane 0's verdict, in the claim's one shuffle: claimed (1), or
            // not (0: another poller won, or not its turn yet).
            if (__shfl_sync(FULL_MASK, turn && old == k ? 1u : 0u, 0) == 0) {
                if (help != nullptr) io_help(help, lane);
                continue;
            }
            // Every lane after lane 0's look at `done` and its fence: the
            // task before's device-memory writes are seen by all 32 lanes.
            __syncwarp();
        }
        // The header's low 32 bits (op, length, pack count; chunk 0 is lane
        // 0's word), warp-uniform: what the warp does next depends on them.
        const uint32_t h0 = __shfl_sync(FULL_MASK, static_cast<uint32_t>(w), 0);
        uint32_t pack = (h0 >> PKQ_HEADER_PACK_SHIFT) & 0xff;
        // A NOP answers at once, an IO task's too (it has no output).
        const bool nop = pack == 0 && (h0 & 0xffff) == PKQ_OP_NOP;
        bool io = false;
        bool host = false;
        Outcome out;
        if (pack != 0) {
            out = run_pack(p, slot, lane, h0, pack, handlers, beat_if_due, pack);
        } else if (nop) {
            out = ok();
        } else {
            uint64_t c[PKQ_SLOT_WORDS];
#pragma unroll
            for (int j = 0; j < PKQ_SLOT_WORDS; ++j) c[j] = __shfl_sync(FULL_MASK, w, j);
            Context ctx = decode_slot(c, lane);
            // Header bits 32..56: an IO task's flag, input length, plain
            // and fresh bits; the host-memory bit.
            const uint32_t h1 = static_cast<uint32_t>(c[0] >> 32) & 0xffffff;
            io = (h1 >> (PKQ_HEADER_IO_BIT - 32)) & 1;
            host = (h1 >> (PKQ_HEADER_HOST_BIT - 32)) & 1;
            io_task.in_plain = (h1 >> (PKQ_HEADER_PLAIN_BIT - 32)) & 1;
            if ((h1 >> (PKQ_HEADER_FRESH_BIT - 32)) & 1) io_forget(io_task);
            if ((h1 >> (PKQ_HEADER_TRACE_BIT - 32)) & 1) ctx.trace = t_start;
            ctx.host = host;
            // One call of the handlers for plain and IO tasks (one copy of
            // their code: see IO_BATCH). No IO areas: no host sends an IO
            // task. An argument length over the slot's (the header has 8
            // bits for it) is refused, never handed to a handler.
            const bool areas = io_task.seen != nullptr;
            // A task on host buffers reads what the host wrote before it
            // published the slot: the acquire pattern first (c3 in
            // docs/PROTOCOL.md), every lane fencing before the barrier, as
            // before an IO input (`host` is warp-uniform).
            if (host) {
                fence_acquire_sys();
                __syncwarp();
            }
            const bool run = ctx.len <= PKQ_ARGS_BYTES &&
                             (!io || (areas && io_begin(p, slot, lap, rooms, lane,
                                                        h1 & ((1u << PKQ_HEADER_IN_BITS) - 1), ctx,
                                                        io_task)));
            out = run ? handlers(ctx) : fail(PKQ_STATUS_BAD_ARGS);
            out.status = published_status(out.status);
            if (io && areas) io_end(p, slot, lap, lane, io_task, out);
        }
        const uint64_t t_end = globaltimer();
        if (host) {
            // The task may have written host memory (header bit
            // PKQ_HEADER_HOST_BIT): every lane's writes (a wide task's
            // blocks', acquired above) before the completion at system
            // scope, for the host that reads them once it sees it.
            __syncwarp();
            __threadfence_system();
        } else if (!nop && __any_sync(FULL_MASK, out.wrote_device_memory)) {
            // Order every lane's device-memory writes before the completion
            // (cumulative through the warp barrier); GPU scope suffices for
            // work the host issues after it sees the completion.
            __syncwarp();
            __threadfence();
        }
        if (lane == 0) {
            const uint32_t flags = io && p.io_out_words != 0
                                       ? PKQ_CQE_OUTPUT | (io_task.out_plain ? PKQ_CQE_PLAIN : 0)
                                       : 0;
            store_completion(cq + slot * PKQ_CQE_WORDS, tag, out.status, pack, out.value, t_start,
                             t_end, flags, poller);
        }
        // A group's poller: the next hand-off's release (GroupLeave).
        leave.after_completion(lane);
        if (io && io_task.seen != nullptr) io_note(p, lap, lane, io_task);
        if (shared_claims) {
            // The next task of this worker may be claimed: every lane's
            // writes first (cumulative through the warp barrier), for the
            // poller that runs it.
            __syncwarp();
            __threadfence_block();
            if (lane == 0) atomicExch(done, k + 1);
        }
        ++k;
        idle_since = 0;
        sleep_ns = 0;
        beat_if_due();
    }
    // The rest of the poller's group told, and gone (GroupLeave).
    leave(lane, beat_if_due);
    // Every lane's stores to mapped memory (completions, pack results, IO
    // output) before the final state word (cumulative through the warp
    // barrier): the host takes a kernel all of whose pollers stored it for
    // one that exited, whatever its stream says (a fault the driver
    // reports on every context of the process), and may then release the
    // memory. Once per poller, on its way out.
    __syncwarp();
    __threadfence_system();
    if (lane == 0) {
        store_sys(state, final_state | (k << PKQ_STATE_BITS));
        // Quiet pollers of this worker stop waiting (above). An atomic
        // store, as the claim's and `done`'s: the quiet pollers' reads of
        // it are not ordered with it by any barrier.
        atomicExch(leaving, 1u);
    }
}

// A lane of blocks or groups (WIDTH in pkq_layout.h): worker `blockIdx.x /
// group_blocks`, whose block 0's warp 0 serves the ring as its one poller
// (serve(), with the group's hand-off around the handlers) and whose other
// warps and blocks run each task with it (group_member), until it leaves.
template <class Handlers>
__device__ __forceinline__ void run_group(const pkq_params& p, const Handlers& handlers,
                                       unsigned long long* claims, unsigned long long* dones,
                                       uint32_t* leavings, unsigned long long* scratch, IoHelp* helps) {
    __shared__ BlockTask task;
    __shared__ GroupSync group;
    __shared__ unsigned long long handed;
    __shared__ unsigned long long traced;
    const uint32_t worker = blockIdx.x / p.group_blocks;
    const uint32_t rank = blockIdx.x % p.group_blocks;
    if (worker >= p.workers) return;  // the whole block
    if (threadIdx.x == 0) {
        group.words = reinterpret_cast<uint64_t*>(p.groups) + static_cast<uint64_t>(worker) * (PKQ_GROUP_BYTES / 8);
        group.stop = reinterpret_cast<const uint64_t*>(p.ctrl) + worker * (PKQ_CTRL_BYTES / 8) + PKQ_CTRL_STOP;
        group.blocks = p.group_blocks;
        group.crossings = 0;
        group.abandoned = 0;
        group.unreleased = 0;
        handed = 0;
        traced = 0;
        task.quit = 0;
    }
    __syncthreads();
    if (rank != 0 && threadIdx.x == 0) add_release_gpu(group_word(&group, PKQ_GROUP_OFF_PRESENT), 1);
    if (rank == 0 && threadIdx.x < 32) {
        // Every block of the group resident before the worker reports in
        // (PRESENT in pkq_layout.h). A stop ends the wait: serve() then
        // reads it and leaves at once.
        bool present = true;
        if (p.group_blocks > 1) {
            if ((threadIdx.x & 31) == 0) present = wait_at_least(&group, PKQ_GROUP_OFF_PRESENT, p.group_blocks - 1);
            present = __shfl_sync(0xffffffffu, present, 0);
        }
        uint64_t* log = p.trace_log == 0 ? nullptr
                                          : reinterpret_cast<uint64_t*>(p.trace_log) +
                                                static_cast<uint64_t>(worker) * PKQ_TRACE_LOG_TASKS *
                                                    (PKQ_TRACE_LOG_HEADER_WORDS + 2 * p.group_blocks);
        const GroupHandlers<Handlers> around{handlers, &task, &group, &handed, log, &traced};
        const GroupLeave leave{&task, &group, &handed, present};
        serve(p, worker, 0, &claims[0], &dones[0], &leavings[0], &scratch[0], nullptr, &helps[0], nullptr,
              around, leave);
    } else {
        group_member(p, rank, &task, &group, handlers);
    }
}

// The body of a resident kernel serving `Handlers` (see PKQ_KERNEL in
// pkq.cuh): `pollers` warps per worker, PKQ_MAX_WARPS_PER_BLOCK warps at most
// per block, a worker's pollers always in one block (both powers of two),
// sharing the worker's claim counter in shared memory.
template <class Handlers>
__device__ __forceinline__ void run_workers(const pkq_params& p, const Handlers& handlers) {
    __shared__ unsigned long long claims[PKQ_MAX_WARPS_PER_BLOCK];
    __shared__ unsigned long long dones[PKQ_MAX_WARPS_PER_BLOCK];
    __shared__ uint32_t leavings[PKQ_MAX_WARPS_PER_BLOCK];
    __shared__ unsigned long long scratch[PKQ_MAX_WARPS_PER_BLOCK * 32];
    __shared__ IoHelp helps[PKQ_MAX_WARPS_PER_BLOCK];
#ifdef PKQ_BULK_COPY
    // Each worker's mbarrier for its bulk copies (PLAIN in pkq_layout.h).
    __shared__ unsigned long long bars[PKQ_MAX_WARPS_PER_BLOCK];
#endif
    const uint32_t warp_in_block = threadIdx.x >> 5;
    const uint32_t warp = blockIdx.x * (blockDim.x >> 5) + warp_in_block;
    if (threadIdx.x < PKQ_MAX_WARPS_PER_BLOCK) {
        claims[threadIdx.x] = 0;
        dones[threadIdx.x] = 0;
        leavings[threadIdx.x] = 0;
        helps[threadIdx.x].next = 0;
#ifdef PKQ_BULK_COPY
        bulk_bar_init(&bars[threadIdx.x]);
#endif
    }
    __syncthreads();
    if (p.group_blocks != 0) {
        run_group(p, handlers, claims, dones, leavings, scratch, helps);
        return;
    }
    const uint32_t worker = warp / p.pollers;
    // Nothing known yet of the IO areas of the slots this block's workers
    // serve (IO_SEEN in pkq_layout.h; WorkerSlots).
    if (p.io_in_words + p.io_out_words != 0) {
        const uint32_t first_worker = blockIdx.x * (blockDim.x >> 5) / p.pollers;
        const uint32_t block_workers = max(1u, (blockDim.x >> 5) / p.pollers);
        const uint64_t per_worker = WorkerSlots(p, 0).slots();
        for (uint64_t i = threadIdx.x; i < block_workers * per_worker; i += blockDim.x) {
            const uint32_t w = first_worker + static_cast<uint32_t>(i / per_worker);
            if (w >= p.workers) continue;
            const WorkerSlots ws(p, w);
            uint64_t* seen = io_seen(p, ws.slot(ws.seq(p, i % per_worker)));
#pragma unroll
            for (int j = 0; j < PKQ_IO_SEEN_WORDS; ++j) __stcg(reinterpret_cast<unsigned long long*>(seen + j), 0ull);
        }
        __syncthreads();
    }
    if (worker >= p.workers) return;
    // The worker's IO rooms (one task at a time: whichever poller took it
    // uses them): in the block's dynamic shared memory when the launch gave
    // it room for all of its workers' (Builder::io), else in io_scratch.
    extern __shared__ __align__(16) uint8_t io_rooms_shared[];
    uint32_t dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    const uint32_t pair = io_room(p.io_in_bytes) + io_room(p.io_out_bytes);
    const uint32_t block_workers = max(1u, (blockDim.x >> 5) / p.pollers);
    const bool rooms_shared = pair != 0 && dynamic_bytes >= block_workers * pair;
    uint8_t* const rooms = rooms_shared
                               ? io_rooms_shared + (warp_in_block / p.pollers) * pair
                               : reinterpret_cast<uint8_t*>(p.io_scratch) + static_cast<uint64_t>(worker) * pair;
#ifdef PKQ_BULK_COPY
    unsigned long long* const bar = rooms_shared ? &bars[warp_in_block / p.pollers] : nullptr;
#else
    unsigned long long* const bar = nullptr;
#endif
    serve(p, worker, warp % p.pollers, &claims[warp_in_block / p.pollers],
          &dones[warp_in_block / p.pollers], &leavings[warp_in_block / p.pollers],
          &scratch[warp_in_block * 32], rooms,
          &helps[warp_in_block / p.pollers], bar, handlers, LeaveAlone{});
}

}  // namespace pkq
