//! Pinning the completion thread to one CPU ([`Builder::completion_cpu`](crate::Builder::completion_cpu)).
//!
//! Linux has no affinity mask of a process, only one per thread (a new
//! thread starts with its creator's); the one limit set on the process as
//! a whole is its cgroup's cpuset, which `taskset` does not touch. What
//! stands in for "the CPUs the process may run on" here is the mask of the
//! process's main thread: what `taskset` or the parent gave the process,
//! unless the application narrowed its main thread since (then the
//! narrower mask, with no way to tell the two apart).

/// The affinity mask of the process's main thread now (the calling thread
/// may be pinned narrower), if the OS gives it.
#[cfg(target_os = "linux")]
fn process_mask() -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call writes at
    // most its size into it; getpid names the main thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        ) == 0)
            .then_some(set)
    }
}

/// Whether `cpu` is in the affinity mask of the process's main thread
/// (whatever the calling thread's).
#[cfg(target_os = "linux")]
pub(crate) fn allowed(cpu: usize) -> bool {
    // SAFETY: CPU_ISSET reads the set, `cpu` below its size.
    cpu < libc::CPU_SETSIZE as usize
        && process_mask().is_some_and(|set| unsafe { libc::CPU_ISSET(cpu, &set) })
}

/// Gives the calling thread the affinity mask of the process's main
/// thread (it started with its creator's, which may be one pinned core);
/// whether it could.
#[cfg(target_os = "linux")]
pub(crate) fn unpin_current() -> bool {
    // SAFETY: a valid set; the call reads its size in bytes.
    process_mask().is_some_and(|set| unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    })
}

/// Pins the calling thread to `cpu`; whether it could.
#[cfg(target_os = "linux")]
pub(crate) fn pin_current(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; `cpu` is below its
    // size; the call reads the set's size in bytes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Lets the calling thread run on `cpus` only; whether it could.
#[cfg(target_os = "linux")]
pub(crate) fn pin_to(cpus: &[usize]) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; each CPU set is
    // below its size; the call reads the set's size in bytes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_to(_cpus: &[usize]) -> bool {
    false
}

/// Elsewhere no thread is pinned: the builder refuses the setting.
#[cfg(not(target_os = "linux"))]
pub(crate) fn allowed(_cpu: usize) -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_current(_cpu: usize) -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn unpin_current() -> bool {
    false
}
