//! The one facade through which every atomic, lock, thread handshake and
//! clock reading of pkq's library code goes: std's, or loom's when the host
//! protocol is model-checked (`RUSTFLAGS="--cfg loom" cargo test --lib
//! loom_`). The rest of the library names none of std's: `tests/layers.rs`
//! fails on a use of them outside this file.
//!
//! Two kinds of item are std's under loom too, each said where it is:
//! process-wide statics ([`statics`]: a loom object cannot outlive one
//! execution of a model; a model may touch them, but nothing it checks
//! rests on their ordering) and [`OnceLock`] (loom has none; the runtime's
//! latched fault uses it, and a model sees it as a plain value).

#[cfg(loom)]
pub(crate) use loom::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence},
};

/// A value set once (std's under loom too: see the module's docs).
pub(crate) use std::sync::OnceLock;

/// A compiler fence (no loom twin: the light side of `proto::barrier`,
/// which loom builds replace with a `SeqCst` fence).
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::compiler_fence;

/// Locks `m`, going on with the data of a lock whose holder panicked (every
/// lock of pkq guards data that stays whole between statements).
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Threads that sleep until another wakes them (the waits that park).
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current};

/// Sleeps until unparked, or at most `timeout` (under loom, until
/// unparked: a wake-up the protocol loses then shows as a deadlock).
#[cfg(loom)]
pub(crate) fn park_timeout(_timeout: std::time::Duration) {
    loom::thread::park();
}
#[cfg(not(loom))]
pub(crate) use std::thread::park_timeout;

/// Lets other threads run while a thread waits for one of them.
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

/// The calling OS thread's id (std's in every build: it is compared with
/// a join handle's, whose thread is std's).
pub(crate) fn thread_id() -> std::thread::ThreadId {
    std::thread::current().id()
}

/// Sleeps the calling thread (outside loom models, which never sleep: see
/// [`now`]).
pub(crate) use std::thread::sleep;

/// The clock of the runtime's timing decisions: the probe schedule, stall
/// bounds, the spin before yielding, deadlines. Under loom time stands
/// still: loom replays a model's executions and needs each to take the
/// branches its schedule alone decides, and a probe falling due after a
/// preemption on a loaded machine broke the exploration. A model therefore
/// probes only on its first look, never stalls and never times out.
#[cfg(loom)]
pub(crate) fn now() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}
#[cfg(not(loom))]
#[inline]
pub(crate) fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// The deadline `timeout` from now; `None` (no deadline) for a timeout too
/// long to add, and for `Duration::MAX` without reading the clock (a wait
/// without limit through a call that takes a timeout costs no clock read).
#[inline]
pub(crate) fn deadline_after(timeout: std::time::Duration) -> Option<std::time::Instant> {
    if timeout == std::time::Duration::MAX {
        None
    } else {
        now().checked_add(timeout)
    }
}

/// A small number for the calling thread, for a trace's host tracks: the
/// order in which threads first asked for one (a count of its own: the
/// ring a thread submits to is not picked by it).
///
/// The number lives in a `const`-initialised thread-local with no
/// destructor: a read is one load from the thread's own block, with no
/// check of a lazy initialisation on the way; `u32::MAX` stands for "none
/// yet" (a number is never that).
#[inline(always)]
pub(crate) fn thread_number() -> u32 {
    use std::cell::Cell;
    thread_local!(static NUMBER: Cell<u32> = const { Cell::new(u32::MAX) });
    #[cold]
    #[inline(never)]
    fn first() -> u32 {
        use statics::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT
            .fetch_add(1, Ordering::Relaxed)
            .min(u32::MAX as usize - 1) as u32;
        NUMBER.set(n);
        n
    }
    match NUMBER.get() {
        u32::MAX => first(),
        n => n,
    }
}

/// The host's cheapest steady clock, in ticks of its own (a trace's host
/// stamps; [`TickRate`] turns them into nanoseconds): x86-64's time-stamp
/// counter where it is known to be one clock for every core
/// ([`ticks_are_tsc`]), else the monotonic clock's nanoseconds since the
/// process first read it (and under Miri and loom, which have no
/// time-stamp counter).
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(not(any(miri, loom)))]
    if tsc::usable() {
        // SAFETY: RDTSC exists on every x86-64 processor (the only target:
        // lib.rs) and has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// [`ticks`], read once every load before it has completed: RDTSC alone
/// may run ahead of an earlier load still in flight, so x86-64's LFENCE
/// (no later instruction starts before every earlier one completed) comes
/// first. What those loads found was there before the time read (a trace's
/// seen time: never before the completion landed). The monotonic clock's
/// read is ordered so already (Linux reads the counter behind a fence).
#[inline(always)]
pub(crate) fn ticks_after_loads() -> u64 {
    // SAFETY: LFENCE (SSE2) exists on every x86-64 processor (the only
    // target: lib.rs) and has no preconditions.
    #[cfg(not(any(miri, loom)))]
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    ticks()
}

/// Nanoseconds of the monotonic clock since the process first read it.
fn monotonic_ns() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    std::time::Instant::now().duration_since(epoch).as_nanos() as u64
}

/// Whether [`ticks`] reads the time-stamp counter (else the monotonic
/// clock): decided once per process, where the processor says the counter
/// is invariant (CPUID 0x8000_0007, EDX bit 8: one rate, in every core and
/// power state) or, on Linux, where the kernel's clock source is the
/// counter (`/sys/devices/system/clocksource/clocksource0/current_clocksource`
/// reads `tsc`: the kernel found it synchronized across the cores and
/// steady, and its own monotonic clock counts it; a virtual machine may
/// hide the CPUID bit and still run its clock on the counter). A kernel
/// that later finds the counter unstable and switches its clock source
/// away is not followed: the trace's rate is measured against the
/// monotonic clock over the whole trace, and its clock map's misfit share
/// shows a counter that jumped.
pub(crate) fn ticks_are_tsc() -> bool {
    #[cfg(not(any(miri, loom)))]
    return tsc::usable();
    #[cfg(any(miri, loom))]
    return false;
}

#[cfg(not(any(miri, loom)))]
mod tsc {
    /// Where Linux names its current clock source.
    pub(super) const CLOCK_SOURCE: &str =
        "/sys/devices/system/clocksource/clocksource0/current_clocksource";

    /// [`super::ticks_are_tsc`] (asked once).
    #[inline(always)]
    pub(super) fn usable() -> bool {
        static USABLE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            let source = std::fs::read_to_string(CLOCK_SOURCE);
            chosen(invariant(), source.as_deref().ok())
        });
        *USABLE
    }

    /// The choice, from the CPUID bit and the kernel's clock source (if
    /// it could be read).
    pub(super) fn chosen(invariant: bool, clock_source: Option<&str>) -> bool {
        invariant || clock_source.is_some_and(|s| s.trim() == "tsc")
    }

    /// Whether the processor says the time-stamp counter is invariant.
    fn invariant() -> bool {
        // `__cpuid` is an unsafe fn before Rust 1.89 (the MSRV is older)
        // and safe after, hence the allowance.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is present on every x86_64 processor; leaf
        // 0x8000_0000 says which extended leaves there are, and leaf
        // 0x8000_0007 is read only when it is one of them.
        unsafe {
            let top = core::arch::x86_64::__cpuid(0x8000_0000).eax;
            top >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
        }
    }
}

/// Turns [`ticks`] into nanoseconds: the rate measured against the
/// monotonic clock between `start` and the reading.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TickRate {
    tick0: u64,
    at0: std::time::Instant,
}

impl TickRate {
    /// Starts measuring now.
    pub(crate) fn start() -> Self {
        Self {
            at0: std::time::Instant::now(),
            tick0: ticks(),
        }
    }

    /// Nanoseconds per tick, as measured from `start` to now (1 where no
    /// tick has passed yet).
    pub(crate) fn ns_per_tick(&self) -> f64 {
        let ns = self.at0.elapsed().as_nanos() as f64;
        let dt = ticks().wrapping_sub(self.tick0) as f64;
        if dt > 0.0 && ns > 0.0 { ns / dt } else { 1.0 }
    }

    /// The first tick (nanosecond 0 of the host times it gives).
    pub(crate) fn origin(&self) -> u64 {
        self.tick0
    }
}

/// Process-wide statics: std's atomics and locks in every build, loom's
/// included (a loom object cannot outlive one execution of a model; a
/// model may touch these, the count of live lanes and the thread's ring,
/// but nothing it checks rests on their ordering; the module cache and the
/// membarrier registration it never reaches).
pub(crate) mod statics {
    pub(crate) use std::sync::atomic::{AtomicU8, AtomicUsize};
    pub(crate) use std::sync::{LazyLock, Mutex, MutexGuard};

    /// [`super::lock`] for a static's lock.
    pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::thread_number;

    #[test]
    fn a_thread_keeps_its_number_and_no_two_threads_share_one() {
        let mine = thread_number();
        assert_eq!(thread_number(), mine);
        let theirs: Vec<u32> = (0..4)
            .map(|_| std::thread::spawn(|| (thread_number(), thread_number())))
            .map(|h| h.join().unwrap())
            .map(|(a, b)| {
                assert_eq!(a, b, "one number per thread");
                a
            })
            .collect();
        let mut all = theirs.clone();
        all.push(mine);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5, "{mine} and {theirs:?}");
        assert!(all.iter().all(|&n| n != u32::MAX));
    }

    #[test]
    #[cfg(not(miri))]
    fn the_counter_is_read_where_cpuid_or_the_kernels_clock_source_vouches_for_it() {
        use super::tsc::chosen;
        assert!(chosen(true, None));
        assert!(chosen(true, Some("kvm-clock\n")));
        assert!(chosen(false, Some("tsc\n")));
        assert!(!chosen(false, Some("kvm-clock\n")));
        assert!(!chosen(false, Some("tsc-early\n")));
        assert!(!chosen(false, Some("")));
        assert!(!chosen(false, None));
        // Here: a kernel whose clock runs on the counter means the counter.
        let here = std::fs::read_to_string(super::tsc::CLOCK_SOURCE);
        if here.as_deref().is_ok_and(|s| s.trim() == "tsc") {
            assert!(super::ticks_are_tsc());
        }
    }
}
