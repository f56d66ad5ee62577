//! Waiting on the completion line with the CPU's monitor: UMONITOR/UMWAIT
//! (Intel's `waitpkg`) or MONITORX/MWAITX (AMD). The core then rests in a
//! light sleep state until the device's write of the completion entry
//! reaches the monitored line (or a short TSC deadline passes), instead of
//! spinning. Where the CPU lacks both, or the kernel hides them, the wait
//! falls back ([`crate::WaitStrategy::Monitor`]) and [`monitor_support`]
//! says why.

use crate::sync::OnceLock;

/// The monitor instructions this CPU offers to user code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MonitorKind {
    /// UMONITOR/UMWAIT (`waitpkg`, Intel).
    Umwait,
    /// MONITORX/MWAITX (AMD).
    Mwaitx,
}

/// Whether [`WaitStrategy::Monitor`](crate::WaitStrategy::Monitor) can use
/// the CPU's monitor here: the kind it uses, or why not (then a wait with
/// `Monitor` spins, then yields, as
/// [`WaitStrategy::SpinThenYield`](crate::WaitStrategy::SpinThenYield)).
/// Asked of the CPU (`cpuid`) and, on Linux, of the kernel (the flags of
/// `/proc/cpuinfo`, where a kernel that disabled the instructions hides
/// them) once per process.
///
/// ```
/// match pkq::monitor_support() {
///     Ok(kind) => println!("Monitor waits with {kind:?}"),
///     Err(why) => println!("Monitor falls back: {why}"),
/// }
/// ```
pub fn monitor_support() -> Result<MonitorKind, &'static str> {
    static SUPPORT: OnceLock<Result<MonitorKind, &'static str>> = OnceLock::new();
    *SUPPORT.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn detect() -> Result<MonitorKind, &'static str> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: `cpuid` exists on every x86-64 CPU (the intrinsics are safe
    // in newer Rust, unsafe in the oldest we support); leaf 7 and the
    // extended leaves are read only where the maximum leaves say they exist.
    #[allow(unused_unsafe)]
    let (waitpkg, mwaitx) = unsafe {
        let max = __cpuid(0).eax;
        let waitpkg = max >= 7 && __cpuid_count(7, 0).ecx & (1 << 5) != 0;
        let max_ext = __cpuid(0x8000_0000).eax;
        let mwaitx = max_ext >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 29) != 0;
        (waitpkg, mwaitx)
    };
    let (kind, flag) = match (waitpkg, mwaitx) {
        (true, _) => (MonitorKind::Umwait, "waitpkg"),
        (false, true) => (MonitorKind::Mwaitx, "mwaitx"),
        (false, false) => {
            return Err(
                "the CPU offers neither UMWAIT (waitpkg) nor MWAITX (common in virtual machines)",
            );
        }
    };
    if cfg!(target_os = "linux") {
        match std::fs::read_to_string("/proc/cpuinfo") {
            Ok(info) if !cpuinfo_has_flag(&info, flag) => {
                return Err("the CPU has the monitor instructions, but the kernel disabled them");
            }
            _ => {}
        }
    }
    Ok(kind)
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn detect() -> Result<MonitorKind, &'static str> {
    if cfg!(miri) {
        Err("Miri runs no CPU instructions")
    } else {
        Err("not an x86-64 CPU")
    }
}

/// Whether the first `flags` line of `/proc/cpuinfo` lists `flag`.
fn cpuinfo_has_flag(info: &str, flag: &str) -> bool {
    info.lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .is_some_and(|(_, flags)| flags.split_whitespace().any(|f| f == flag))
}

/// How many TSC cycles one monitored wait lasts at most (tens of µs: the
/// wait loop looks at the runtime's health between two).
const WAIT_CYCLES: u64 = 100_000;

/// Arms the monitor on the line of `word` (the address of a word of live
/// memory); then, unless `ready()` already says so, rests until that line
/// is written or about `WAIT_CYCLES` pass (or an
/// interrupt, or any other wake-up the CPU chooses: the caller looks again
/// whatever the reason).
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) fn wait_on(kind: MonitorKind, word: *const u8, ready: impl FnOnce() -> bool) {
    let addr = word;
    match kind {
        MonitorKind::Umwait => {
            // SAFETY: `kind` came from `monitor_support`, which found
            // `waitpkg` in CPUID and the kernel's flags; UMONITOR only
            // watches the address's line for coherence traffic (it neither
            // reads nor writes it), and `word` is live (the contract).
            unsafe {
                std::arch::asm!("umonitor {0}", in(reg) addr, options(nostack, preserves_flags))
            };
            if ready() {
                return;
            }
            // SAFETY: as above; `rdtsc` has no preconditions.
            let now = unsafe { std::arch::x86_64::_rdtsc() };
            let deadline = now.wrapping_add(WAIT_CYCLES);
            // Control 1: the C0.1 state (the faster wake-up of the two).
            // SAFETY: UMWAIT waits for the monitor armed above (or returns
            // at once if none is armed); it changes only the carry flag.
            unsafe {
                std::arch::asm!(
                    "umwait {ctl:e}",
                    ctl = in(reg) 1u32,
                    in("edx") (deadline >> 32) as u32,
                    in("eax") deadline as u32,
                    options(nostack),
                )
            };
        }
        MonitorKind::Mwaitx => {
            // SAFETY: `kind` came from `monitor_support`, which found
            // MONITORX in CPUID and the kernel's flags; MONITORX only
            // watches the line of `word` (no extensions, no hints).
            unsafe {
                std::arch::asm!(
                    "monitorx",
                    in("rax") addr,
                    in("ecx") 0u32,
                    in("edx") 0u32,
                    options(nostack, preserves_flags),
                )
            };
            if ready() {
                return;
            }
            // EBX holds the timeout, and LLVM reserves RBX: swap it in and
            // back around the instruction.
            // SAFETY: MWAITX with the timer enabled (ECX bit 1) and hint 0
            // (C1) waits for the monitor armed above or the timeout; RBX
            // is restored before the block ends.
            unsafe {
                std::arch::asm!(
                    "xchg {t}, rbx",
                    "mwaitx",
                    "xchg {t}, rbx",
                    t = inout(reg) WAIT_CYCLES => _,
                    in("eax") 0u32,
                    in("ecx") 2u32,
                    options(nostack, preserves_flags),
                )
            };
        }
    }
}

/// Without the instructions (never called: `monitor_support` refuses).
#[cfg(not(all(target_arch = "x86_64", not(miri))))]
pub(crate) fn wait_on(_kind: MonitorKind, _word: *const u8, ready: impl FnOnce() -> bool) {
    let _ = ready();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_flags_are_read_whole_words() {
        let info = "processor: 0\nflags\t\t: fpu sse2 waitpkg_x avx\nflags: waitpkg\n";
        assert!(!cpuinfo_has_flag(info, "waitpkg"));
        assert!(cpuinfo_has_flag(info, "sse2"));
        assert!(cpuinfo_has_flag("flags : a waitpkg b", "waitpkg"));
        assert!(!cpuinfo_has_flag("no flags line", "waitpkg"));
    }

    /// The instruction path where the CPU has it (another thread's write
    /// ends the wait, and so does the deadline); the fallback's reason
    /// where it has not. Either way the answer is stable.
    #[test]
    fn the_monitor_waits_for_a_write_or_says_why_not() {
        let first = monitor_support();
        assert_eq!(first, monitor_support());
        match first {
            Err(why) => assert!(!why.is_empty()),
            Ok(kind) => {
                let word = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
                let writer = {
                    let word = word.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        word.store(1, std::sync::atomic::Ordering::Release);
                    })
                };
                let start = crate::sync::now();
                while word.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    wait_on(kind, word.as_ptr().cast(), || {
                        word.load(std::sync::atomic::Ordering::Acquire) != 0
                    });
                    assert!(start.elapsed() < std::time::Duration::from_secs(10));
                }
                writer.join().unwrap();
            }
        }
    }
}
