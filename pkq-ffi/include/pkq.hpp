// pkq's C++17 API: RAII handles over the C API (pkq.h), status-returning
// calls, no exceptions required (it builds with -fno-exceptions), no
// allocation on the submit and wait path.
//
//   pkq::Runtime rt;
//   if (pkq::Runtime::create(rt) != PKQ_OK) { /* pkq::last_error() */ }
//   pkq::Ticket t;
//   pkq::Completion c;
//   uint64_t word = 42;
//   if (rt.submit(PKQ_OP_ECHO, word, t) == PKQ_OK && t.wait(c) == PKQ_OK) {
//       /* c.value == 42 */
//   }
//   // rt's destructor shuts the runtime down and frees it.
//
// Handles are move-only; a moved-from handle is empty, and every call on an
// empty handle returns PKQ_ERR_NULL (PKQ_ERR_NOT_LIVE for tickets and
// batches), once its other arguments passed the C call's checks (a null
// buffer or an unknown wait strategy is refused first). Thread safety is the C API's (pkq.h): a Runtime, a shared
// Producer and a Pool from any number of threads; a Ticket, a Batch, a
// State and an exclusive Producer from one thread at a time.
#ifndef PKQ_HPP
#define PKQ_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "pkq.h"

namespace pkq {

using Status = pkq_status;
using Completion = pkq_completion;

/// The name of `s` as pkq.h spells it ("PKQ_ERR_FULL").
inline const char *status_name(Status s) noexcept { return pkq_status_name(static_cast<int32_t>(s)); }

/// The message of this thread's last failed call.
inline std::string last_error() {
    char small[256];
    size_t n = pkq_last_error(small, sizeof small);
    if (n < sizeof small) return std::string(small, n);
    std::string s(n + 1, '\0');
    pkq_last_error(&s[0], s.size());
    s.resize(n);
    return s;
}

namespace detail {
template <class A>
constexpr void check_args() {
    static_assert(std::is_trivially_copyable<A>::value, "task arguments are plain bytes");
}
}  // namespace detail

/// How to build a runtime (pkq_options), with setters that chain.
class Options {
public:
    Options() noexcept { pkq_options_init(&o_, sizeof o_); }
    Options &device(uint32_t v) noexcept { o_.device = v; return *this; }
    Options &workers(uint32_t v) noexcept { o_.workers = v; return *this; }
    Options &pollers(uint32_t v) noexcept { o_.pollers = v; return *this; }
    Options &rings(uint32_t v) noexcept { o_.rings = v; return *this; }
    Options &capacity(uint32_t v) noexcept { o_.capacity = v; return *this; }
    /// A PKQ_WAIT_* value.
    Options &wait(uint32_t v) noexcept { o_.wait = v; return *this; }
    Options &stall_after_ms(uint32_t v) noexcept { o_.stall_after_ms = v; return *this; }
    Options &io(uint32_t input, uint32_t output) noexcept {
        o_.io_input = input;
        o_.io_output = output;
        return *this;
    }
    /// Each task on a block of `warps` warps.
    Options &block(uint32_t warps) noexcept {
        o_.width = PKQ_WIDTH_BLOCK;
        o_.width_warps = warps;
        return *this;
    }
    /// Each task on `blocks` blocks (0: one per SM) of `warps` warps.
    Options &group(uint32_t blocks, uint32_t warps) noexcept {
        o_.width = PKQ_WIDTH_GROUP;
        o_.width_blocks = blocks;
        o_.width_warps = warps;
        return *this;
    }
    Options &sm_partition(uint32_t sms) noexcept { o_.sm_partition = sms; return *this; }
    Options &state_memory(uint64_t bytes) noexcept { o_.state_memory = bytes; return *this; }
    /// A module in memory (copied when the runtime is built: `image` need
    /// only live until then), served by kernel `kernel`.
    Options &module(const void *image, size_t len, const char *kernel) noexcept {
        o_.module_image = image;
        o_.module_len = len;
        o_.module_kernel = kernel;
        return *this;
    }
    /// A module file, read when the runtime is built.
    Options &module_file(const char *path, const char *kernel) noexcept {
        o_.module_path = path;
        o_.module_kernel = kernel;
        return *this;
    }
    const pkq_options *get() const noexcept { return &o_; }
    pkq_options *get() noexcept { return &o_; }

private:
    pkq_options o_;
};

/// A submitted task (pkq_ticket, in place): wait, poll, or hand it to a
/// callback. Its destructor releases a task not taken.
class Ticket {
public:
    Ticket() noexcept { std::memset(&t_, 0, sizeof t_); }
    ~Ticket() { pkq_ticket_release(&t_); }
    Ticket(Ticket &&other) noexcept {
        std::memcpy(&t_, &other.t_, sizeof t_);
        std::memset(&other.t_, 0, sizeof other.t_);
    }
    Ticket &operator=(Ticket &&other) noexcept {
        if (this != &other) {
            pkq_ticket_release(&t_);
            std::memcpy(&t_, &other.t_, sizeof t_);
            std::memset(&other.t_, 0, sizeof other.t_);
        }
        return *this;
    }
    Ticket(const Ticket &) = delete;
    Ticket &operator=(const Ticket &) = delete;

    /// pkq_wait_timeout (UINT64_MAX: pkq_wait).
    Status wait(Completion &out, uint64_t timeout_ns = UINT64_MAX) noexcept {
        return pkq_wait_timeout(&t_, timeout_ns, &out);
    }
    /// pkq_poll: PKQ_PENDING until the task completed.
    Status poll(Completion &out) noexcept { return pkq_poll(&t_, &out); }
    /// pkq_wait_output: an IO task's result and output.
    Status wait_output(Completion &out, void *buf, size_t cap, size_t &len,
                       uint64_t timeout_ns = UINT64_MAX) noexcept {
        return pkq_wait_output(&t_, timeout_ns, &out, static_cast<uint8_t *>(buf), cap, &len);
    }
    /// pkq_ticket_set_wait.
    Status set_wait(uint32_t strategy) noexcept { return pkq_ticket_set_wait(&t_, strategy); }
    /// Calls `f(Status, const Completion&, const uint8_t *output, size_t
    /// output_len)` once when the task is done, on pkq's completion thread
    /// (pkq_ticket_on_complete), and empties the ticket. `f` is moved to
    /// the heap until then. An exception thrown by `f` terminates the
    /// process (the trampoline is noexcept: nothing crosses into pkq).
    template <class F>
    Status on_complete(F &&f) {
        using Fn = typename std::decay<F>::type;
        Fn *heap = new (std::nothrow) Fn(std::forward<F>(f));
        if (!heap) return PKQ_ERR_OTHER;
        Status s = pkq_ticket_on_complete(&t_, &trampoline<Fn>, heap);
        if (s != PKQ_OK) delete heap;
        return s;
    }
    /// Empties the ticket without taking its result.
    void release() noexcept { pkq_ticket_release(&t_); }
    pkq_ticket *raw() noexcept { return &t_; }

private:
    template <class Fn>
    static void trampoline(void *user, pkq_status s, const pkq_completion *c, const uint8_t *out,
                           size_t len) noexcept {
        Fn *f = static_cast<Fn *>(user);
        (*f)(s, *c, out, len);
        delete f;
    }

    pkq_ticket t_;
};

/// A submitted run of tasks (pkq_batch, in place). Its destructor releases
/// tasks not taken.
class Batch {
public:
    Batch() noexcept { std::memset(&b_, 0, sizeof b_); }
    ~Batch() { pkq_batch_release(&b_); }
    Batch(Batch &&other) noexcept {
        std::memcpy(&b_, &other.b_, sizeof b_);
        std::memset(&other.b_, 0, sizeof other.b_);
    }
    Batch &operator=(Batch &&other) noexcept {
        if (this != &other) {
            pkq_batch_release(&b_);
            std::memcpy(&b_, &other.b_, sizeof b_);
            std::memset(&other.b_, 0, sizeof other.b_);
        }
        return *this;
    }
    Batch(const Batch &) = delete;
    Batch &operator=(const Batch &) = delete;

    /// How many tasks (0 for an empty batch).
    size_t size() noexcept {
        size_t n = 0;
        pkq_batch_len(&b_, &n);
        return n;
    }
    /// pkq_batch_poll.
    Status poll(size_t &done) noexcept { return pkq_batch_poll(&b_, &done); }
    /// pkq_batch_wait: `results` and `statuses` hold size() elements.
    Status wait(Completion *results, Status *statuses, size_t count,
                uint64_t timeout_ns = UINT64_MAX) noexcept {
        return pkq_batch_wait(&b_, timeout_ns, results, statuses, count);
    }
    void release() noexcept { pkq_batch_release(&b_); }
    pkq_batch *raw() noexcept { return &b_; }

private:
    pkq_batch b_;
};

/// What submits: the submit calls shared by Runtime, Producer and Pool.
/// `Self` gives `submit_raw` and `submit_batch_raw`. A submit into a Ticket
/// or Batch that still holds tasks releases them first (the C API would
/// leave them to their slots).
template <class Self>
class Submitter {
public:
    /// A task without arguments.
    Status submit(uint16_t op, Ticket &t, uint32_t flags = 0) noexcept {
        t.release();
        return self().submit_raw(op, nullptr, 0, nullptr, 0, flags, t);
    }
    /// A task whose arguments are `args`'s bytes (at most 48).
    template <class A>
    Status submit(uint16_t op, const A &args, Ticket &t, uint32_t flags = 0) noexcept {
        detail::check_args<A>();
        t.release();
        return self().submit_raw(op, &args, sizeof args, nullptr, 0, flags, t);
    }
    /// PKQ_SUBMIT_TRY: PKQ_ERR_FULL at once when the ring has no room.
    template <class A>
    Status try_submit(uint16_t op, const A &args, Ticket &t) noexcept {
        return submit(op, args, t, PKQ_SUBMIT_TRY);
    }
    /// An IO task: `input_len` bytes at `input` in its slot's input area.
    template <class A>
    Status submit_io(uint16_t op, const A &args, const void *input, size_t input_len, Ticket &t,
                     uint32_t flags = 0) noexcept {
        detail::check_args<A>();
        t.release();
        return self().submit_raw(op, &args, sizeof args, input, input_len, flags, t);
    }
    /// `count` tasks, task i's arguments `args[i]` (PKQ_SUBMIT_PACKED: up
    /// to 32 to a slot).
    template <class A>
    Status submit_batch(uint16_t op, const A *args, size_t count, Batch &b,
                        uint32_t flags = 0) noexcept {
        detail::check_args<A>();
        b.release();
        return self().submit_batch_raw(op, args, sizeof(A), count, flags, b);
    }

private:
    Self &self() noexcept { return static_cast<Self &>(*this); }
};

/// pkq's resident kernel on one device (pkq_runtime). The destructor shuts
/// it down (its tasks run, every callback ran) and frees it.
class Runtime : public Submitter<Runtime> {
public:
    Runtime() noexcept = default;
    ~Runtime() { pkq_runtime_destroy(rt_); }
    Runtime(Runtime &&other) noexcept : rt_(other.rt_) { other.rt_ = nullptr; }
    Runtime &operator=(Runtime &&other) noexcept {
        if (this != &other) {
            pkq_runtime_destroy(rt_);
            rt_ = other.rt_;
            other.rt_ = nullptr;
        }
        return *this;
    }
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;

    /// Builds a runtime into `out` (replacing what it held).
    static Status create(Runtime &out, const Options &o = Options()) noexcept {
        pkq_runtime *rt = nullptr;
        Status s = pkq_runtime_new(o.get(), &rt);
        out = Runtime(rt);
        return s;
    }
    /// A runtime of several lanes (pkq_runtime_new_lanes), lane i as
    /// `lanes[i]` says, into `out` (replacing what it held). Past 16 lanes
    /// the options' pointers take memory of their own: `PKQ_ERR_OTHER`
    /// where there is none.
    static Status create(Runtime &out, std::initializer_list<Options> lanes) noexcept {
        const pkq_options *on_stack[16] = {};
        const pkq_options **p = on_stack;
        if (lanes.size() > 16) {
            p = new (std::nothrow) const pkq_options *[lanes.size()];
            if (p == nullptr) {
                out = Runtime();
                return PKQ_ERR_OTHER;
            }
        }
        size_t n = 0;
        for (const Options &o : lanes) p[n++] = o.get();
        pkq_runtime *rt = nullptr;
        Status s = pkq_runtime_new_lanes(p, n, &rt);
        if (p != on_stack) delete[] p;
        out = Runtime(rt);
        return s;
    }

    Status submit_raw(uint16_t op, const void *args, size_t len, const void *input,
                      size_t input_len, uint32_t flags, Ticket &t) noexcept {
        if (input == nullptr && input_len == 0 && (flags & ~PKQ_SUBMIT_TRY) == 0) {
            // The C API's own calls for a task without input.
            return (flags & PKQ_SUBMIT_TRY) ? pkq_try_submit(rt_, op, args, len, t.raw())
                                            : pkq_submit(rt_, op, args, len, t.raw());
        }
        return pkq_submit_io(rt_, op, args, len, input, input_len, flags, t.raw());
    }
    Status submit_batch_raw(uint16_t op, const void *args, size_t size, size_t count,
                            uint32_t flags, Batch &b) noexcept {
        return pkq_submit_batch(rt_, op, args, size, count, flags, b.raw());
    }
    Status health() const noexcept { return pkq_runtime_health(rt_); }
    Status shutdown() const noexcept { return pkq_runtime_shutdown(rt_); }
    Status cancel() const noexcept { return pkq_runtime_cancel(rt_); }
    explicit operator bool() const noexcept { return rt_ != nullptr; }
    pkq_runtime *raw() const noexcept { return rt_; }

private:
    explicit Runtime(pkq_runtime *rt) noexcept : rt_(rt) {}
    pkq_runtime *rt_ = nullptr;
};

/// A producer on one ring of one lane (pkq_producer). Destroy it before
/// its runtime.
class Producer : public Submitter<Producer> {
public:
    Producer() noexcept = default;
    ~Producer() { pkq_producer_destroy(p_); }
    Producer(Producer &&other) noexcept : p_(other.p_) { other.p_ = nullptr; }
    Producer &operator=(Producer &&other) noexcept {
        if (this != &other) {
            pkq_producer_destroy(p_);
            p_ = other.p_;
            other.p_ = nullptr;
        }
        return *this;
    }
    Producer(const Producer &) = delete;
    Producer &operator=(const Producer &) = delete;

    /// pkq_producer_new into `out`.
    static Status create(Producer &out, const Runtime &rt, uint32_t lane = 0,
                         uint32_t ring = PKQ_ANY_RING, uint32_t flags = 0) noexcept {
        pkq_producer *p = nullptr;
        Status s = pkq_producer_new(rt.raw(), lane, ring, flags, &p);
        out = Producer(p);
        return s;
    }

    Status submit_raw(uint16_t op, const void *args, size_t len, const void *input,
                      size_t input_len, uint32_t flags, Ticket &t) noexcept {
        return pkq_producer_submit(p_, op, args, len, input, input_len, flags, t.raw());
    }
    Status submit_batch_raw(uint16_t op, const void *args, size_t size, size_t count,
                            uint32_t flags, Batch &b) noexcept {
        return pkq_producer_submit_batch(p_, op, args, size, count, flags, b.raw());
    }
    Status ring(uint32_t &out) const noexcept { return pkq_producer_ring(p_, &out); }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    pkq_producer *raw() const noexcept { return p_; }

private:
    explicit Producer(pkq_producer *p) noexcept : p_(p) {}
    pkq_producer *p_ = nullptr;
};

/// Bytes of state in a runtime's device memory (pkq_state), stepped by
/// state ops.
class State {
public:
    State() noexcept = default;
    ~State() { pkq_state_destroy(s_); }
    State(State &&other) noexcept : s_(other.s_) { other.s_ = nullptr; }
    State &operator=(State &&other) noexcept {
        if (this != &other) {
            pkq_state_destroy(s_);
            s_ = other.s_;
            other.s_ = nullptr;
        }
        return *this;
    }
    State(const State &) = delete;
    State &operator=(const State &) = delete;

    /// A state holding a copy of `init`.
    template <class S>
    static Status create(State &out, const Runtime &rt, const S &init) noexcept {
        detail::check_args<S>();
        pkq_state *s = nullptr;
        Status st = pkq_state_new(rt.raw(), &init, sizeof init, &s);
        out = State(s);
        return st;
    }
    template <class S>
    Status read(S &out) const noexcept {
        detail::check_args<S>();
        return pkq_state_read(s_, &out, sizeof out);
    }
    template <class S>
    Status write(const S &data) noexcept {
        detail::check_args<S>();
        return pkq_state_write(s_, &data, sizeof data);
    }
    /// pkq_call_on_state: one task of state op `op` on this state, waited for.
    template <class A>
    Status call(const Runtime &rt, uint16_t op, const A &args, Completion &out) noexcept {
        detail::check_args<A>();
        return pkq_call_on_state(rt.raw(), s_, op, &args, sizeof args, &out);
    }
    /// pkq_call_on_state of an op that takes no arguments
    /// (PKQ_OP_INFO_STATE_NO_ARGS on the device).
    Status call(const Runtime &rt, uint16_t op, Completion &out) noexcept {
        return pkq_call_on_state(rt.raw(), s_, op, nullptr, 0, &out);
    }
    /// pkq_call_on_state_io: `call` as an IO task, `input_len` bytes at
    /// `input` in its slot's input area, the output copied into `buf` (`cap`
    /// bytes) and its length in `out_len`.
    template <class A>
    Status call_io(const Runtime &rt, uint16_t op, const A &args, const void *input, size_t input_len,
                   Completion &out, void *buf, size_t cap, size_t &out_len) noexcept {
        detail::check_args<A>();
        return pkq_call_on_state_io(rt.raw(), s_, op, &args, sizeof args, input, input_len, &out,
                                    static_cast<uint8_t *>(buf), cap, &out_len);
    }
    pkq_state *raw() const noexcept { return s_; }

private:
    explicit State(pkq_state *s) noexcept : s_(s) {}
    pkq_state *s_ = nullptr;
};

/// Several GPUs as one (pkq_pool).
class Pool : public Submitter<Pool> {
public:
    Pool() noexcept = default;
    ~Pool() { pkq_pool_destroy(p_); }
    Pool(Pool &&other) noexcept : p_(other.p_) { other.p_ = nullptr; }
    Pool &operator=(Pool &&other) noexcept {
        if (this != &other) {
            pkq_pool_destroy(p_);
            p_ = other.p_;
            other.p_ = nullptr;
        }
        return *this;
    }
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;

    /// A pool of runtimes on `count` devices at `devices` (0: every device).
    static Status create(Pool &out, const uint32_t *devices, size_t count,
                         const Options &o = Options(),
                         uint32_t routing = PKQ_ROUTE_LEAST_LOADED) noexcept {
        pkq_pool *p = nullptr;
        Status s = pkq_pool_new(devices, count, o.get(), routing, &p);
        out = Pool(p);
        return s;
    }

    Status submit_raw(uint16_t op, const void *args, size_t len, const void *input,
                      size_t input_len, uint32_t flags, Ticket &t) noexcept {
        return pkq_pool_submit(p_, op, args, len, input, input_len, flags, t.raw());
    }
    Status submit_batch_raw(uint16_t op, const void *args, size_t size, size_t count,
                            uint32_t flags, Batch &b) noexcept {
        return pkq_pool_submit_batch(p_, op, args, size, count, flags, b.raw());
    }
    /// A task to the device of `key` (pkq_pool_submit_keyed).
    template <class A>
    Status submit_keyed(uint64_t key, uint16_t op, const A &args, Ticket &t,
                        uint32_t flags = 0) noexcept {
        detail::check_args<A>();
        t.release();
        return pkq_pool_submit_keyed(p_, key, op, &args, sizeof args, nullptr, 0, flags, t.raw());
    }
    Status health() const noexcept { return pkq_pool_health(p_, nullptr, 0, nullptr); }
    Status shutdown() const noexcept { return pkq_pool_shutdown(p_); }
    pkq_pool *raw() const noexcept { return p_; }

private:
    explicit Pool(pkq_pool *p) noexcept : p_(p) {}
    pkq_pool *p_ = nullptr;
};

}  // namespace pkq

#endif  // PKQ_HPP
