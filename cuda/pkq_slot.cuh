// pkq_slot.cuh: tagged-word codec of submission slots and completion entries
// (mirrors src/proto/slot.rs; the layout and why it needs no fence: pkq_layout.h).
#pragma once
#include <cstdint>

#include "pkq_handler.cuh"
#include "pkq_layout.h"

namespace pkq {

constexpr uint64_t CHUNK_MASK = (1ull << PKQ_CHUNK_BITS) - 1;

__device__ __forceinline__ uint32_t tag_of(uint64_t word) {
    return static_cast<uint32_t>(word >> PKQ_TAG_SHIFT);
}

__device__ __forceinline__ uint64_t tagged(uint64_t chunk, uint32_t tag) {
    return (chunk & CHUNK_MASK) | (static_cast<uint64_t>(tag & 0xff) << PKQ_TAG_SHIFT);
}

// Payload word J (bits [64J, 64J + 64) of the payload bit stream) rebuilt from
// the chunks: with 64J = 56k + s it is chunk k >> s | chunk k+1 << (56 - s).
template <int J, int N>
__device__ __forceinline__ uint64_t payload_word(const uint64_t (&chunk)[N]) {
    constexpr int k = (64 * J) / PKQ_CHUNK_BITS;
    constexpr int s = (64 * J) % PKQ_CHUNK_BITS;
    uint64_t v = (chunk[k] & CHUNK_MASK) >> s;
    if constexpr (k + 1 < N) v |= (chunk[k + 1] & CHUNK_MASK) << (PKQ_CHUNK_BITS - s);
    return v;
}

// Chunk K (payload bits [56K, 56K + 56)) cut from payload words: with
// 56K = 64j + s it is word j >> s | word j+1 << (64 - s).
template <int K, int N>
__device__ __forceinline__ uint64_t chunk_of(const uint64_t (&word)[N]) {
    constexpr int j = (PKQ_CHUNK_BITS * K) / 64;
    constexpr int s = (PKQ_CHUNK_BITS * K) % 64;
    uint64_t v = word[j] >> s;
    if constexpr (s > 64 - PKQ_CHUNK_BITS && j + 1 < N) v |= word[j + 1] << (64 - s);
    return v & CHUNK_MASK;
}

// A submission decoded into the Context its handler gets, for `lane`: the
// header's op and length, and the six 8-byte argument words.
__device__ __forceinline__ Context decode_slot(const uint64_t (&c)[PKQ_SLOT_WORDS], uint32_t lane) {
    static_assert(PKQ_ARGS_BYTES / 8 == 6, "a slot carries six argument words");
    const uint64_t header = payload_word<0>(c);
    Context ctx;
    ctx.lane = lane;
    ctx.op = static_cast<uint32_t>(header & 0xffff);
    ctx.len = static_cast<uint32_t>((header >> PKQ_HEADER_LEN_SHIFT) & 0xff);
    ctx.words[0] = payload_word<1>(c);
    ctx.words[1] = payload_word<2>(c);
    ctx.words[2] = payload_word<3>(c);
    ctx.words[3] = payload_word<4>(c);
    ctx.words[4] = payload_word<5>(c);
    ctx.words[5] = payload_word<6>(c);
    ctx.input = nullptr;
    ctx.in_len = 0;
    ctx.output = nullptr;
    ctx.out_cap = 0;
    return ctx;
}

// Writes a completion entry's four tagged words (`pack`: the pack count, 0
// for one task) from one thread, as two 16-byte stores. One thread's own
// values need no agreement among lanes, so no shuffle stands between a task
// and its completion.
__device__ __forceinline__ void store_completion(uint64_t* entry, uint32_t tag, uint32_t status,
                                                 uint32_t pack, uint64_t value, uint64_t t_start,
                                                 uint64_t t_end, uint32_t flags, uint32_t poller) {
    static_assert(PKQ_CQE_WORDS == 4, "an entry is two 16-byte halves");
    const uint64_t w[PKQ_CQE_WORDS] = {value, t_start, t_end,
                                       (status & 0xffu) | ((pack & 0xffu) << 8) |
                                           ((flags & 0xffu) << 16) | ((poller & 0xffu) << 24)};
    store2_sys(entry, tagged(chunk_of<0>(w), tag), tagged(chunk_of<1>(w), tag));
    store2_sys(entry + 2, tagged(chunk_of<2>(w), tag), tagged(chunk_of<3>(w), tag));
}

}  // namespace pkq
