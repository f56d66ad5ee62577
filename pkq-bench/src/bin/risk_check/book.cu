// book.cu: the risk-check bench's device code (pkq-bench's risk_check).
// A pre-trade risk check on a book kept on the device: each order is one task
// that checks its price against the instrument's band around the mid price,
// the account's position after the fill against its limit, and the account's
// gross notional against its limit; an accepted order updates the position
// and the notional. Served by a resident kernel built with pkq's public header
// (a state op), and the same check as an ordinary kernel to time against.
#include <pkq.cuh>

// Op code of this module (256 and up: below is pkq's).
#define RISK_CHECK_OP 256

#define RISK_INSTRUMENTS 64
#define RISK_ACCOUNTS 64

// The decisions (the completion's value, low byte): accepted, or why not.
#define RISK_ACCEPT 0
#define RISK_REJECT_PRICE 1     // outside the instrument's band around the mid
#define RISK_REJECT_POSITION 2  // the position after the fill over the limit
#define RISK_REJECT_NOTIONAL 3  // the gross notional over the limit
#define RISK_REJECT_UNKNOWN 4   // no such account or instrument, or a value out of range

// The book kept on the device between orders; the host's `Book`
// (bytemuck::Pod) is the same struct. Prices in ticks, quantities in lots.
struct risk_book {
    int64_t mid[RISK_INSTRUMENTS];
    int64_t band[RISK_INSTRUMENTS];
    int64_t position_limit[RISK_ACCOUNTS];
    int64_t notional_limit[RISK_ACCOUNTS];
    int64_t notional[RISK_ACCOUNTS];  // gross: the sum of |qty| * price accepted
    int64_t position[RISK_ACCOUNTS * RISK_INSTRUMENTS];  // [account][instrument]
};

// One order (after the book's address and length): signed quantity (buy > 0).
struct risk_order {
    uint32_t account;
    uint32_t instrument;
    int64_t qty;
    int64_t price;
};

namespace risk {

// Whether |v| <= 2^40: the range of every price, band, limit and position
// the check takes from the book, so that nothing it computes overflows
// (orders are within 2^30 lots and ticks, notionals within 2^62).
__device__ __forceinline__ bool sane(int64_t v) { return v >= -(1ll << 40) && v <= (1ll << 40); }

// The check by one thread; returns the decision and, where accepted, the new
// position in the value's upper bits.
__device__ __forceinline__ uint64_t check(risk_book* b, const risk_order& o) {
    if (o.account >= RISK_ACCOUNTS || o.instrument >= RISK_INSTRUMENTS || o.qty == 0 ||
        o.qty < -(1ll << 30) || o.qty > (1ll << 30) || o.price <= 0 || o.price > (1ll << 30))
        return RISK_REJECT_UNKNOWN;
    const int64_t mid = __ldcg(b->mid + o.instrument), band = __ldcg(b->band + o.instrument);
    int64_t* pos = b->position + o.account * RISK_INSTRUMENTS + o.instrument;
    const int64_t held = __ldcg(pos), limit = __ldcg(b->position_limit + o.account);
    const int64_t gross = __ldcg(b->notional + o.account);
    const int64_t gross_limit = __ldcg(b->notional_limit + o.account);
    if (!sane(mid) || !sane(band) || !sane(held) || !sane(limit) || gross < 0 || gross > (1ll << 61) ||
        gross_limit < 0 || gross_limit > (1ll << 61))
        return RISK_REJECT_UNKNOWN;
    const int64_t off = o.price - mid;
    if ((off < 0 ? -off : off) > band) return RISK_REJECT_PRICE;
    const int64_t after = held + o.qty;
    if ((after < 0 ? -after : after) > limit) return RISK_REJECT_POSITION;
    const int64_t notional = gross + (o.qty < 0 ? -o.qty : o.qty) * o.price;
    if (notional > gross_limit) return RISK_REJECT_NOTIONAL;
    __stcg(pos, after);
    __stcg(b->notional + o.account, notional);
    return RISK_ACCEPT | (static_cast<uint64_t>(after) << 8);
}

// The handler: lane 0 checks, the warp returns its decision.
__device__ __forceinline__ pkq::Outcome risk_check(const pkq::Context& ctx) {
    const auto a = ctx.args<pkq::StateArgs<risk_order>>();
    if (a.state == 0 || a.bytes < sizeof(risk_book)) return pkq::fail(PKQ_STATUS_BAD_ARGS);
    uint64_t v = 0;
    if (ctx.lane == 0) v = check(reinterpret_cast<risk_book*>(a.state), a.args);
    v = __shfl_sync(0xffffffffu, v, 0);
    return pkq::ok_after_writes(v);
}

struct Handlers {
    __device__ __forceinline__ pkq::Outcome operator()(const pkq::Context& ctx) const {
        switch (ctx.op) {
            case RISK_CHECK_OP: return risk_check(ctx);
            default: return pkq::unknown_op();
        }
    }
};

}  // namespace risk

PKQ_KERNEL(risk_worker_kernel, risk::Handlers)
PKQ_OP_TABLE(risk_worker_kernel, PKQ_OP_INFO_STATE(RISK_CHECK_OP, risk_order))

// The same check as an ordinary kernel (one thread): the decision written
// to `result` (mapped host memory, read after the launch's sync).
extern "C" __global__ void risk_kernel(risk_book* b, risk_order o, uint64_t* result) {
    if (threadIdx.x == 0) *result = risk::check(b, o);
}
