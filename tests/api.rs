//! CPU tests of the public API: what a machine without a GPU can check.

use pkq::{Error, Runtime};

#[test]
fn invalid_settings_are_refused_before_the_driver_is_touched() {
    for (b, what) in [
        (Runtime::builder().capacity(0), "capacity 0"),
        (
            Runtime::builder().capacity(1000),
            "capacity not a power of two",
        ),
        (
            Runtime::builder().capacity(1 << 21),
            "capacity over the limit",
        ),
        (Runtime::builder().workers(0), "no workers"),
        (Runtime::builder().workers(6), "workers not a power of two"),
        (
            Runtime::builder().capacity(8).workers(16),
            "more workers than slots",
        ),
        (
            Runtime::builder().stall_after(std::time::Duration::from_millis(9)),
            "a stall bound under 10 ms",
        ),
        (
            Runtime::builder().idle(pkq::IdlePolicy::Backoff {
                spin: std::time::Duration::from_secs(5),
                max_sleep: std::time::Duration::from_micros(10),
            }),
            "a backoff spin over u32::MAX ns",
        ),
        (
            (0..pkq::MAX_LANES).fold(Runtime::builder(), |b, _| b.add_lane(Runtime::builder())),
            "more lanes than MAX_LANES",
        ),
        (
            Runtime::builder().state_memory(usize::MAX),
            "state memory too large to round up",
        ),
        (
            Runtime::builder().state_memory(usize::MAX / 2 + 1),
            "state memory past isize::MAX",
        ),
    ] {
        match b.build() {
            Err(Error::InvalidConfig(msg)) => assert!(!msg.is_empty()),
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
    }
    // A pool's runtime settings too, on every device there is.
    match pkq::Pool::builder()
        .runtime_builder(Runtime::builder().capacity(0))
        .build()
    {
        Err(Error::InvalidConfig(msg)) => assert!(!msg.is_empty()),
        other => panic!("a pool of capacity 0: expected InvalidConfig, got {other:?}"),
    }
}

/// A plain type aligned past a page, which pinned memory is not.
#[repr(C, align(8192))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PastAPage([u64; 1024]);

#[test]
fn host_buffers_past_what_memory_can_be_are_refused_before_the_driver() {
    for (r, what) in [
        (
            pkq::HostBuffer::<u8>::new(0, usize::MAX).map(drop),
            "usize::MAX bytes",
        ),
        (
            pkq::HostBuffer::<u64>::new(0, usize::MAX / 8).map(drop),
            "past isize::MAX bytes",
        ),
        (pkq::HostBuffer::<u8>::new(0, 0).map(drop), "no elements"),
        (
            pkq::HostBuffer::<()>::new(0, 5).map(drop),
            "elements of no bytes",
        ),
        (
            pkq::HostBuffer::<PastAPage>::new(0, 1).map(drop),
            "elements aligned past a page",
        ),
    ] {
        match r {
            Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty()),
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn no_gpu_is_an_error_not_a_panic() {
    let Err(why) = pkq::device_count().and_then(|n| {
        if n == 0 {
            Err(Error::NoDevice(String::new()))
        } else {
            Ok(n)
        }
    }) else {
        println!("a GPU is present: the GPU tests cover this machine");
        return;
    };
    println!("no GPU here ({why}); checking the errors");
    let kernel_built = pkq::kernel_image().is_ok();
    let err = Runtime::builder().build().unwrap_err();
    if kernel_built {
        assert!(
            matches!(err, Error::NoDriver(_) | Error::NoDevice(_)),
            "expected NoDriver/NoDevice, got {err:?}"
        );
    } else {
        assert!(matches!(err, Error::KernelNotBuilt(_)), "got {err:?}");
    }
    assert!(pkq::device_info(0).is_err());
}

/// The checked way to a device's context (for the caller's own streams and
/// buffers): a typed error where cudarc's `CudaContext::new` would panic.
#[test]
fn context_without_a_driver_is_a_typed_error() {
    match pkq::context(0) {
        Ok(ctx) => println!("a GPU is present (context {:?})", ctx.cu_ctx()),
        Err(e) => assert!(
            matches!(e, Error::NoDriver(_) | Error::NoDevice(_)),
            "expected NoDriver/NoDevice, got {e:?}"
        ),
    }
    assert!(pkq::context(usize::MAX).is_err(), "never a panic");
}

/// A pkq built without nvcc refuses `build` with `KernelNotBuilt` before it
/// touches the driver. `.ci/run` runs this file again from such a build.
#[test]
fn kernel_not_built_is_refused_first() {
    if pkq::kernel_image().is_ok() {
        println!("skipped: this build carries the kernel (CI also runs this file without nvcc)");
        return;
    }
    for b in [
        Runtime::builder(),
        Runtime::builder().device(99),
        // A module of one's own, and a lane on the embedded kernel.
        Runtime::builder()
            .module(vec![b'x'; 8], "k")
            .add_lane(Runtime::builder()),
    ] {
        let got = b.build();
        assert!(
            matches!(got, Err(Error::KernelNotBuilt(_))),
            "kernel-less build: {got:?}"
        );
    }
    // A pool of such runtimes, on every device there is.
    let got = pkq::Pool::builder().build();
    assert!(
        matches!(got, Err(Error::KernelNotBuilt(_))),
        "kernel-less pool: {got:?}"
    );
    // An invalid setting is still reported as such.
    assert!(matches!(
        Runtime::builder().capacity(3).build(),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn kernel_not_built_says_how_to_fix_it() {
    let msg = Error::KernelNotBuilt("nvcc not found").to_string();
    assert!(
        msg.contains("NVCC") && msg.contains("nvidia-cuda-nvcc==13.0.88"),
        "{msg}"
    );
}

#[test]
fn kernels_compile_without_register_spills() {
    if pkq::kernel_image().is_err() {
        assert!(
            std::env::var_os("PKQ_REQUIRE_KERNEL").is_none(),
            "PKQ_REQUIRE_KERNEL is set but pkq was built without nvcc"
        );
        println!("skipped: pkq was built without nvcc, so there is no ptxas report");
        return;
    }
    let report = pkq::build_info::PTXAS_REPORT;
    let found = pkq::build_info::spills(report);
    let archs = pkq::build_info::CUDA_ARCHS.split(',').count();
    let worker = found
        .iter()
        .filter(|s| s.function == "pkq_worker_kernel")
        .count();
    assert_eq!(
        worker, archs,
        "one ptxas entry for the worker kernel per architecture:\n{report}"
    );
    for s in found {
        assert_eq!(
            (s.stores, s.loads),
            (0, 0),
            "{} spills registers",
            s.function
        );
    }
}

/// The driver's module loader takes no length: an image it would read past
/// the end of (empty, or a fatbin or ELF whose own sizes run past its
/// bytes) is refused before the driver sees it, and a kernel name no module
/// can hold (an interior NUL) is a missing kernel, not a panic.
#[test]
fn module_images_the_driver_would_read_past_are_refused() {
    let refused = |image: Vec<u8>, what: &str| match Runtime::builder().module(image, "k").build() {
        Err(Error::InvalidModule(msg)) => assert!(!msg.is_empty(), "{what}"),
        other => panic!("{what}: expected InvalidModule, got {other:?}"),
    };
    refused(Vec::new(), "empty image");
    // A fatbin header (magic, version, header size 16) naming 4096 bytes
    // after itself, with 16 there.
    let mut fatbin = vec![0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0];
    fatbin.extend_from_slice(&4096u64.to_le_bytes());
    fatbin.extend_from_slice(&[0; 16]);
    refused(fatbin.clone(), "truncated fatbin");
    refused(fatbin[..10].to_vec(), "fatbin shorter than its header");
    // An ELF64 header whose section table lies past the end.
    let mut elf = vec![0u8; 64];
    elf[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
    elf[0x28..0x30].copy_from_slice(&4096u64.to_le_bytes()); // e_shoff
    elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    elf[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
    refused(elf.clone(), "ELF with its section table past the end");
    refused(elf[..20].to_vec(), "ELF shorter than its header");
    // A section whose contents run past the end.
    elf[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
    elf[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
    let mut section = vec![0u8; 64];
    section[4..8].copy_from_slice(&1u32.to_le_bytes()); // SHT_PROGBITS
    section[0x18..0x20].copy_from_slice(&128u64.to_le_bytes()); // sh_offset
    section[0x20..0x28].copy_from_slice(&4096u64.to_le_bytes()); // sh_size
    elf.extend_from_slice(&section);
    refused(elf, "ELF with a section past the end");

    for name in ["k\0", "\0", "pkq_worker_kernel\0x"] {
        match Runtime::builder().module(vec![b'x'; 8], name).build() {
            Err(Error::KernelMissing(n)) => assert_eq!(n, name),
            other => panic!("kernel name {name:?}: expected KernelMissing, got {other:?}"),
        }
    }
    // A lane's module is refused with the same errors.
    let lane = |image: Vec<u8>, name: &str| {
        Runtime::builder()
            .add_lane(Runtime::builder().module(image, name))
            .build()
    };
    match lane(Vec::new(), "k") {
        Err(Error::InvalidModule(msg)) => assert!(msg.contains("lane 1"), "{msg}"),
        other => panic!("a lane's empty image: expected InvalidModule, got {other:?}"),
    }
    match lane(vec![b'x'; 8], "k\0") {
        Err(Error::KernelMissing(n)) => assert_eq!(n, "k\0"),
        other => panic!("a lane's kernel name with a NUL: expected KernelMissing, got {other:?}"),
    }
}

/// `ClockMap::fit` takes any stamps: round trips far apart (past
/// `i64::MAX`) neither overflow nor pass for the tightest; ones that cannot
/// be round trips (received before sent, a device end before its start, a
/// device span longer than the host's) are left out, so with no two real
/// ones there is no map.
#[test]
fn clock_map_fit_takes_any_stamps() {
    use pkq::timing::{ClockMap, Exchange};
    let e = |host_send_ns, host_recv_ns, device_start_ns, device_end_ns| Exchange {
        host_send_ns,
        host_recv_ns,
        device_start_ns,
        device_end_ns,
    };
    let tight = e(1, 2, 3, 4); // no slack
    let loose = e(10, 110, 50, 60); // 90 ns of slack
    for far in [e(0, u64::MAX, 0, 0), e(1, 1 << 63, 0, 0)] {
        let map = ClockMap::fit(&[far, tight], 2).expect("two round trips");
        assert_eq!(map.error_bound_ns, 0.0, "{far:?} taken for the tightest");
    }
    for impossible in [
        e(0, i64::MAX as u64, 1, 0),
        e(u64::MAX, 0, 0, u64::MAX),
        e(5, 6, 0, u64::MAX),
        e(1000, 995, 2000, 1995),
    ] {
        assert!(
            ClockMap::fit(&[impossible, tight], 2).is_none(),
            "{impossible:?}"
        );
        let map = ClockMap::fit(&[impossible, tight, loose], 3).expect("two real ones");
        assert_eq!(
            map.error_bound_ns, 0.0,
            "{impossible:?} taken for the tightest"
        );
        assert_eq!(map.misfit_fraction, 0.0, "{impossible:?} counted");
    }
}
