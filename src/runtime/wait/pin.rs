//! Pinning the completion thread to one CPU ([`Builder::completion_cpu`](crate::Builder::completion_cpu)).

/// Whether this process may run on `cpu` (its affinity mask has it).
#[cfg(target_os = "linux")]
pub(crate) fn allowed(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call writes at
    // most its size into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
            && libc::CPU_ISSET(cpu, &set)
    }
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
