//! Ops: the built-in ops and a custom module's, against CPU references;
//! op tables and modules refused.

use super::*;

/// Every buffer is allocated before the runtime starts: compute-sanitizer's
/// memcheck judges a kernel's accesses by the allocations that existed when
/// it was launched, so it flags (falsely) a resident kernel's reads of
/// buffers allocated later (docs/design/module-loading.md#allocations-before-launch).
pub(crate) fn axpy_random_vs_cpu() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(42);
    let mut sizes = vec![0usize, 1, 3, 4, 5, 31, 32, 33, 127, 1000, 4095, 4096];
    sizes.extend((0..40).map(|_| 1 + rng.below(4096) as usize));
    let cases: Vec<_> = sizes
        .into_iter()
        .map(|n| {
            let a = rng.unit() * 4.0;
            let x: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            let y: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            let xd = stream.clone_htod(&x).unwrap();
            let yd = stream.clone_htod(&y).unwrap();
            (a, x, y, xd, yd)
        })
        .collect();
    let xd = stream.clone_htod(&[1.0f32; 8]).unwrap();
    let mut yd = stream.clone_htod(&[1.0f32; 9]).unwrap();
    let rt = Runtime::builder().build().unwrap();
    assert!(matches!(
        rt.axpy(1.0, &xd, &mut yd),
        Err(Error::InvalidArgument(_))
    ));
    for (a, x, y, xd, mut yd) in cases {
        let n = x.len();
        rt.axpy(a, &xd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            let want = a.mul_add(x[i], y[i]);
            assert_eq!(
                got[i].to_bits(),
                want.to_bits(),
                "n {n}, i {i}: {} vs {want}",
                got[i]
            );
        }
        // Run again on the same buffers: the device must see the new y.
        rt.axpy(-a, &xd, &mut yd).unwrap();
        let back = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            assert_eq!(
                back[i].to_bits(),
                (-a).mul_add(x[i], got[i]).to_bits(),
                "second pass n {n}, i {i}"
            );
        }
    }
    rt.shutdown().unwrap();
}

pub(crate) fn axpy_bad_args_reported_by_device() {
    let rt = Runtime::builder().build().unwrap();
    let args = AxpyArgs {
        x: 0,
        y: 0,
        n: 4097,
        a: 1.0,
    };
    // SAFETY: n is over the limit, so the device refuses the task before it
    // touches any address.
    let t = unsafe { rt.submit(AXPY.args(&args).unchecked()) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task(TaskError {
            op: AXPY_OP,
            status: TaskStatus::BadArgs
        }))
    ));
    let args = AxpyArgs {
        x: 0,
        y: 0,
        n: 16,
        a: 1.0,
    };
    // SAFETY: null pointers are refused by the device before any access.
    let t = unsafe { rt.submit(AXPY.args(&args).unchecked()) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task(TaskError {
            status: TaskStatus::BadArgs,
            ..
        }))
    ));
    // The runtime still serves.
    assert_eq!(
        rt.submit(ECHO.args(&5u64)).unwrap().wait().unwrap().value,
        5
    );
    rt.shutdown().unwrap();
}

/// `Builder::module` refuses, with typed errors and nothing started: an
/// image the driver cannot load, a kernel the module lacks, and kernels
/// whose parameters are not one `pkq_params` (the tests' PTX module's). The
/// embedded image under the worker kernel's name serves.
pub(crate) fn modules_without_a_fitting_kernel_are_refused() {
    let image = pkq::kernel_image().unwrap();
    let build = |bytes: &[u8], kernel: &str| Runtime::builder().module(bytes, kernel).build();
    match build(&[0u8; 64], "pkq_worker_kernel") {
        Err(Error::InvalidModule(why)) => println!("    garbage image: {why}"),
        other => panic!("garbage image: {other:?}"),
    }
    // PTX-like text with no NUL after it (the driver reads to one), a
    // fatbin cut short, a kernel name with a NUL: refused, no crash.
    for (bytes, what) in [
        (&b".version 8.0"[..], "unterminated text"),
        (&image[..image.len() / 2], "half a fatbin"),
        (&[][..], "empty image"),
    ] {
        match build(bytes, "pkq_worker_kernel") {
            Err(Error::InvalidModule(why)) => println!("    {what}: {why}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    match build(image, "pkq_worker_kernel\0") {
        Err(Error::KernelMissing(name)) => assert_eq!(name, "pkq_worker_kernel\0"),
        other => panic!("kernel name with a NUL: {other:?}"),
    }
    match build(image, "no_such_kernel") {
        Err(Error::KernelMissing(name)) => assert_eq!(name, "no_such_kernel"),
        other => panic!("missing kernel: {other:?}"),
    }
    // Kernels of other parameters: the tests' PTX module's.
    let ptx = ptx::TEST_KERNELS.as_bytes();
    for wrong in [
        "pkq_test_no_params",
        "pkq_test_one_u64",
        "pkq_test_two_params",
    ] {
        match build(ptx, wrong) {
            Err(Error::InvalidModule(why)) => assert!(why.contains(wrong), "{why}"),
            other => panic!("{wrong}: {other:?}"),
        }
    }
    let rt = build(image, "pkq_worker_kernel").unwrap();
    assert_eq!(
        rt.submit(ECHO.args(&8u64)).unwrap().wait().unwrap().value,
        8
    );
    rt.shutdown().unwrap();
}

/// What one warp computes in `f32`: lane `l` chains fused multiply-adds over
/// columns `l, l + 32, ...`, then the lanes add in the shuffle butterfly
/// (16, 8, 4, 2, 1), as `warp_sum` does; bit for bit.
pub(crate) fn warp_dot_f32(a: &[f32], x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    for (l, acc) in lanes.iter_mut().enumerate() {
        for c in (l..a.len()).step_by(32) {
            *acc = a[c].mul_add(x[c], *acc);
        }
    }
    butterfly(lanes)
}

pub(crate) fn butterfly<T: Copy + std::ops::Add<Output = T>>(mut lanes: [T; 32]) -> T {
    for o in [16, 8, 4, 2, 1] {
        let before = lanes;
        for l in 0..32 {
            lanes[l] = before[l] + before[l ^ o];
        }
    }
    lanes[0]
}

/// DOT's sum in `f64`, as the device adds it (each product is exact).
pub(crate) fn warp_dot_f64(x: &[f32], y: Option<&[f32]>) -> f64 {
    let mut lanes = [0.0f64; 32];
    for (l, acc) in lanes.iter_mut().enumerate() {
        for i in (l..x.len()).step_by(32) {
            *acc += x[i] as f64 * y.map_or(1.0, |y| y[i] as f64);
        }
    }
    butterfly(lanes)
}

/// MEMCPY, MEMSET, DOT, sum, GEMV and FIR on random inputs and sizes (edge
/// sizes included, unaligned byte ranges for the copies), each compared
/// with its CPU reference bit for bit; then the limits, refused on the host
/// and (through `call_unchecked`) on the device. Buffers are allocated
/// before the runtime starts (see axpy_random_vs_cpu).
pub(crate) fn builtin_ops_random_vs_cpu() {
    use pkq::Submit;
    use pkq::builtin::{self, DotArgs, FirArgs, GemvArgs};
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(5);
    let vec = |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit()).collect() };

    // Copies: byte buffers, at offsets 0..16 for every alignment.
    let bytes: Vec<u8> = (0..70_000).map(|_| rng.next() as u8).collect();
    let src = stream.clone_htod(&bytes).unwrap();
    let mut dst = stream.alloc_zeros::<u8>(70_000).unwrap();
    let copies: Vec<(usize, usize, usize)> = [0usize, 1, 15, 16, 17, 4096, 65_535, 65_536]
        .into_iter()
        .chain((0..30).map(|_| rng.below(65_537) as usize))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|len| (len, rng.below(16) as usize, rng.below(16) as usize))
        .collect();
    // DOT / sum.
    let dots: Vec<_> = [0usize, 1, 31, 32, 33, 65_536]
        .into_iter()
        .chain((0..10).map(|_| rng.below(65_537) as usize))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|n| {
            let (x, y) = (vec(&mut rng, n), vec(&mut rng, n));
            let xd = stream.clone_htod(&x).unwrap();
            let yd = stream.clone_htod(&y).unwrap();
            (x, y, xd, yd)
        })
        .collect();
    // GEMV.
    let gemvs: Vec<_> = [
        (1usize, 1usize),
        (256, 256),
        (1, 256),
        (256, 1),
        (17, 255),
        (0, 5),
    ]
    .into_iter()
    .chain((0..12).map(|_| (1 + rng.below(256) as usize, 1 + rng.below(256) as usize)))
    .collect::<Vec<_>>()
    .into_iter()
    .map(|(r, c)| {
        let (a, x) = (vec(&mut rng, r * c), vec(&mut rng, c));
        let ad = stream.clone_htod(&a).unwrap();
        let xd = stream.clone_htod(&x).unwrap();
        let yd = stream.alloc_zeros::<f32>(r).unwrap();
        (r, c, a, x, ad, xd, yd)
    })
    .collect();
    // FIR.
    let firs: Vec<_> = [(1usize, 1usize), (65_536, 64), (33, 32), (1, 64), (0, 3)]
        .into_iter()
        .chain((0..12).map(|_| (rng.below(5000) as usize, 1 + rng.below(64) as usize)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|(n, taps)| {
            let (x, h) = (vec(&mut rng, n + taps - 1), vec(&mut rng, taps));
            let xd = stream.clone_htod(&x).unwrap();
            let hd = stream.clone_htod(&h).unwrap();
            let yd = stream.alloc_zeros::<f32>(n).unwrap();
            (n, taps, x, h, xd, hd, yd)
        })
        .collect();
    let big = stream.alloc_zeros::<f32>(65_537).unwrap();
    let mut big_out = stream.alloc_zeros::<f32>(65_537).unwrap();

    let rt = Runtime::builder().build().unwrap();
    let mut want = vec![0u8; 70_000];
    for &(len, so, d_o) in &copies {
        rt.memcpy(&mut dst.slice_mut(d_o..d_o + len), &src.slice(so..so + len))
            .unwrap();
        want[d_o..d_o + len].copy_from_slice(&bytes[so..so + len]);
        assert_eq!(
            stream.clone_dtoh(&dst).unwrap(),
            want,
            "memcpy {len} bytes, {so} -> {d_o}"
        );
        let byte = rng.next() as u8;
        let at = rng.below(16) as usize;
        rt.memset(&mut dst.slice_mut(at..at + len / 2), byte)
            .unwrap();
        want[at..at + len / 2].fill(byte);
        assert_eq!(
            stream.clone_dtoh(&dst).unwrap(),
            want,
            "memset {} at {at}",
            len / 2
        );
    }
    for (x, y, xd, yd) in &dots {
        assert_eq!(
            rt.dot(xd, yd).unwrap().to_bits(),
            warp_dot_f64(x, Some(y)).to_bits()
        );
        assert_eq!(
            rt.sum(xd).unwrap().to_bits(),
            warp_dot_f64(x, None).to_bits()
        );
    }
    for (r, c, a, x, ad, xd, mut yd) in gemvs {
        rt.gemv(&ad, r, c, &xd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..r {
            let w = warp_dot_f32(&a[i * c..(i + 1) * c], &x);
            assert_eq!(got[i].to_bits(), w.to_bits(), "gemv {r}x{c}, row {i}");
        }
    }
    for (n, taps, x, h, xd, hd, mut yd) in firs {
        rt.fir(&xd, &hd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            let w = (0..taps).fold(0.0f32, |s, k| h[k].mul_add(x[i + k], s));
            assert_eq!(
                got[i].to_bits(),
                w.to_bits(),
                "fir n {n}, taps {taps}, i {i}"
            );
        }
    }

    // Over the limits: refused on the host, before anything runs...
    let bad = |r: pkq::Result<()>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    bad(rt.memcpy(&mut dst.slice_mut(0..65_537), &src.slice(0..65_537)));
    bad(rt.memcpy(&mut dst.slice_mut(0..10), &src.slice(0..11)));
    bad(rt.memset(&mut dst.slice_mut(0..65_537), 1));
    bad(rt.dot(&big, &big).map(drop));
    bad(rt.sum(&big).map(drop));
    bad(rt.gemv(
        &big,
        257,
        255,
        &big.slice(0..255),
        &mut big_out.slice_mut(0..257),
    ));
    bad(rt.gemv(&big, 2, 3, &big.slice(0..3), &mut big_out.slice_mut(0..2)));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..65),
        &mut big_out.slice_mut(0..1),
    ));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..0),
        &mut big_out.slice_mut(0..10),
    ));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..2),
        &mut big_out.slice_mut(0..10),
    ));
    // ... and on the device, which checks every limit itself.
    let bad_args = |t: pkq::Result<pkq::Ticket>| {
        let r = t.unwrap().wait();
        assert!(
            matches!(
                r,
                Err(Error::Task(TaskError {
                    status: TaskStatus::BadArgs,
                    ..
                }))
            ),
            "{r:?}"
        );
    };
    // SAFETY: each is refused by the device before it touches memory (sizes
    // over the limits, or null addresses).
    unsafe {
        bad_args(
            rt.submit(
                builtin::DOT
                    .args(&DotArgs {
                        x: 0,
                        y: 0,
                        n: 65_537,
                        reserved: 0,
                    })
                    .unchecked(),
            ),
        );
        bad_args(
            rt.submit(
                builtin::DOT
                    .args(&DotArgs {
                        x: 0,
                        y: 0,
                        n: 5,
                        reserved: 0,
                    })
                    .unchecked(),
            ),
        );
        bad_args(
            rt.submit(
                builtin::GEMV
                    .args(&GemvArgs {
                        a: 0,
                        x: 0,
                        y: 0,
                        rows: 300,
                        cols: 1,
                    })
                    .unchecked(),
            ),
        );
        bad_args(
            rt.submit(
                builtin::FIR
                    .args(&FirArgs {
                        x: 0,
                        h: 0,
                        y: 0,
                        n: 1,
                        taps: 65,
                    })
                    .unchecked(),
            ),
        );
    }
    // Still serving.
    assert_eq!(rt.submit(ECHO.args(&6)).unwrap().wait().unwrap().value, 6);
    rt.shutdown().unwrap();
}

/// A declared op is checked against the kernel's op table, by name: at call
/// and, with `Builder::op`, at load; an op the table takes "up to" a size
/// (ECHO) matches any declaration of that size or less and refuses a larger
/// one; ops that take pointers need an unchecked task.
pub(crate) fn typed_ops_are_checked_against_the_op_table() {
    use pkq::TypedOp;
    let rt = Runtime::builder().build().unwrap();
    let spun = rt
        .submit(pkq::builtin::SPIN.args(&1000))
        .unwrap()
        .wait()
        .unwrap();
    assert!(spun.value >= 1000, "{spun:?}");
    let short_echo: TypedOp<[u64; 2]> = TypedOp::new(ECHO_OP.0, "SHORT_ECHO");
    let folded = rt.submit(short_echo.args(&[1, 2])).unwrap().wait().unwrap();
    assert_eq!(folded.value, echo_fold(&[1, 2, 0, 0, 0, 0]));
    // Aligned to more than the row: refused by the table.
    let wide_echo: TypedOp<u128> = TypedOp::new(ECHO_OP.0, "WIDE_ECHO");
    match rt.submit(wide_echo.args(&1)) {
        Err(Error::OpMismatch { op, code, why }) => {
            assert_eq!((op.as_str(), code), ("WIDE_ECHO", ECHO_OP.0));
            println!("    refused: {}", Error::OpMismatch { op, code, why });
        }
        other => panic!("{other:?}"),
    }
    // Larger than the row (and a slot): refused before the table.
    let long_echo: TypedOp<[u64; 7]> = TypedOp::new(ECHO_OP.0, "LONG_ECHO");
    assert!(matches!(
        rt.submit(long_echo.args(&[1; 7])),
        Err(Error::PayloadTooLarge { len: 56, max: 48 })
    ));
    let unknown: TypedOp<u64> = TypedOp::new(4000, "NOT_THERE");
    assert!(matches!(
        rt.submit(unknown.args(&1)),
        Err(Error::OpMismatch { code: 4000, .. })
    ));
    assert!(matches!(
        rt.submit(pkq::builtin::GEMV.args(&Default::default())),
        Err(Error::UncheckedOp(GEMV_OP))
    ));
    // Raw submits of ops the table flags as dereferencing are refused too.
    assert!(matches!(
        rt.submit(Task::raw(MEMCPY_OP, bytemuck::bytes_of(&[0u64; 3]))),
        Err(Error::UncheckedOp(_))
    ));
    rt.shutdown().unwrap();
    Runtime::builder()
        .op(&short_echo)
        .build()
        .unwrap()
        .shutdown()
        .unwrap();
    match Runtime::builder().op(&long_echo).build() {
        Err(Error::OpMismatch { op, .. }) => assert_eq!(op, "LONG_ECHO"),
        other => panic!("{other:?}"),
    }
}

/// The custom-handler example's module (fk.cu, built by build.rs with
/// pkq-build): forward kinematics of random configurations against the
/// `f64` reference, the handler's own status for a NaN, its length checks,
/// and a stale argument struct refused at load by the op's name.
pub(crate) fn custom_handler_vs_reference() {
    if fk::IMAGE.is_empty() {
        return skip("pkq was built without nvcc, so fk.cu was not compiled");
    }
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(12);
    let batches: Vec<_> = [1usize, 31, 32, 33, 1000, fk::MAX_N]
        .into_iter()
        .map(|n| {
            let q: Vec<f32> = (0..6 * n)
                .map(|_| rng.unit() * std::f32::consts::PI)
                .collect();
            let qd = stream.clone_htod(&q).unwrap();
            let pd = stream.alloc_zeros::<f32>(12 * n).unwrap();
            (n, q, qd, pd)
        })
        .collect();
    let mut nan = vec![0.5f32; 12];
    nan[7] = f32::INFINITY;
    let nan_d = stream.clone_htod(&nan).unwrap();
    let mut out = stream.alloc_zeros::<f32>(24).unwrap();

    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Stale {
        q: u64,
        pose: u64,
    }
    let stale: pkq::TypedOp<Stale> = pkq::TypedOp::with_pointers(fk::FK.op().0, "FK");
    match Runtime::builder()
        .module(fk::IMAGE, fk::KERNEL)
        .op(&stale)
        .build()
    {
        Err(e @ Error::OpMismatch { .. }) => {
            assert!(e.to_string().contains("FK"), "{e}");
            println!("    stale struct: {e}");
        }
        other => panic!("{other:?}"),
    }
    let rt = fk::runtime().unwrap();
    for (n, q, qd, mut pd) in batches {
        assert_eq!(fk::forward_kinematics(&rt, &qd, &mut pd).unwrap(), n as u64);
        let err = fk::max_error(&q, &stream.clone_dtoh(&pd).unwrap());
        assert!(err < 1e-4, "n {n}: largest error {err}");
    }
    assert!(matches!(
        fk::forward_kinematics(&rt, &nan_d, &mut out),
        Err(Error::Task(TaskError {
            status: TaskStatus::Other(fk::STATUS_NOT_FINITE),
            ..
        }))
    ));
    assert!(matches!(
        fk::forward_kinematics(&rt, &nan_d.slice(0..6), &mut out),
        Err(Error::InvalidArgument(_))
    ));
    // An op the module's table does not list is refused by the safe calls
    // (a module may fall back on anything); sent anyway, this module's
    // handlers answer it UnknownOp.
    assert!(matches!(
        rt.submit(ECHO.args(&1u64)),
        Err(Error::OpMismatch { code: 1, .. })
    ));
    // A raw task marked unchecked is not checked at all. SAFETY: fk.cu's
    // handlers answer ops other than FK without reading anything.
    let t =
        unsafe { rt.submit(Task::raw(ECHO_OP, bytemuck::bytes_of(&1u64)).unchecked()) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task(TaskError {
            status: TaskStatus::UnknownOp,
            ..
        }))
    ));
    rt.shutdown().unwrap();
}

pub(crate) fn callers_context_is_kept_and_foreign_buffers_refused() {
    use pkq::cudarc::driver::sys;
    // Buffers of another context on the same device are not the runtime's.
    let other = CudaContext::new_non_primary(0, 0).unwrap();
    let stream = other.default_stream();
    let x = stream.clone_htod(&[1.0f32; 4]).unwrap();
    let mut y = stream.clone_htod(&[1.0f32; 4]).unwrap();
    // pkq's calls that open the device (a build, a host buffer, reports)
    // and its own driver calls (here the liveness probe of try_result, due
    // on every call) leave the calling thread's current context as they
    // found it.
    other.bind_to_thread().unwrap();
    let current = || {
        let mut c = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cuCtxGetCurrent(&mut c) };
        c
    };
    let before = current();
    assert_eq!(before, other.cu_ctx());
    let rt = Runtime::builder()
        .probe_interval(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(current(), before, "the build changed the thread's context");
    let host = rt.host_buffer::<u64>(4).unwrap();
    pkq::device_info(0).unwrap();
    pkq::running_kernels(0).unwrap();
    let _ = pkq::sm_partition_support(0);
    assert_eq!(current(), before, "a report or a host buffer changed it");
    drop(host);
    assert!(matches!(
        rt.axpy(1.0, &x, &mut y),
        Err(Error::InvalidArgument(_))
    ));
    other.bind_to_thread().unwrap();
    let mut t = rt.submit(ECHO.args(&3u64)).unwrap();
    let c = loop {
        if let Some(c) = t.try_result().unwrap() {
            break c;
        }
    };
    assert_eq!(c.value, 3);
    assert_eq!(current(), before, "the thread's current context changed");
    // A state outlives its runtime: the last of them frees the state
    // memory (cudarc's drops make a context current), and neither drop
    // changes the thread's context.
    let state = rt.state(&[1u32]).unwrap();
    rt.shutdown().unwrap();
    assert_eq!(current(), before, "the shutdown changed it");
    drop(rt);
    assert_eq!(current(), before, "the runtime's drop changed it");
    drop(state);
    assert_eq!(current(), before, "the last state's drop changed it");
    // A runtime's drop, with state memory and without: the last of pkq's
    // handles of the device's context goes with it (cudarc's drop of one
    // makes its context current), and the thread's context stays.
    for bytes in [0, 1 << 20] {
        let rt = Runtime::builder().state_memory(bytes).build().unwrap();
        assert_eq!(current(), before, "a build changed it");
        drop(rt);
        assert_eq!(
            current(),
            before,
            "dropping a runtime with state_memory({bytes}) changed it"
        );
    }
    drop((x, y));
}

/// Ops on device state (`StateOp`, `Runtime::call_on_state`): fk.cu's arm
/// kept on the device, stepped by random joint velocities, each step
/// checked against the host's twin applied to the state the device held
/// before it; four arms stepped from four threads at once; refusals.
pub(crate) fn state_ops_random_vs_cpu() {
    if fk::IMAGE.is_empty() {
        return skip("pkq was built without nvcc, so fk.cu was not compiled");
    }
    let rt = fk::runtime().unwrap();
    let close = |a: &[f32], b: &[f32], tol: f32| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol);
    let steps = |seed: u64, n: usize| {
        let mut rng = Rng::new(seed);
        let mut arm = fk::ArmState {
            q: std::array::from_fn(|_| rng.unit() * std::f32::consts::PI),
            pose: [0.0; 12],
        };
        let mut state = rt.state(&[arm]).unwrap();
        assert_eq!(
            state.read().unwrap(),
            [arm],
            "the state holds what it was made with"
        );
        for i in 0..n {
            let step = fk::ArmStep {
                qd: std::array::from_fn(|_| rng.unit() * 4.0),
                dt: 1e-3 * (1 + rng.below(10)) as f32,
                reserved: 0,
            };
            let want = fk::arm_step_reference(&arm, &step).unwrap();
            let c = rt.call_on_state(&fk::ARM_STEP, &mut state, &step).unwrap();
            let got = state.read().unwrap()[0];
            assert!(
                close(&got.q, &want.q, 1e-5),
                "step {i}: {got:?} against {want:?}"
            );
            assert!(
                close(&got.pose, &want.pose, 1e-4),
                "step {i}: {got:?} against {want:?}"
            );
            assert_eq!(c.value as u32, got.pose[3].to_bits(), "the value is x");
            arm = got;
        }
        (state, arm)
    };
    let (mut state, arm) = steps(40, 2_000);
    // A step the handler refuses leaves the state as it was.
    let bad = fk::ArmStep {
        qd: [0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0],
        dt: 1e-3,
        reserved: 0,
    };
    assert!(matches!(
        rt.call_on_state(&fk::ARM_STEP, &mut state, &bad),
        Err(Error::Task(TaskError {
            status: TaskStatus::Other(16),
            ..
        }))
    ));
    assert_eq!(state.read().unwrap(), [arm]);
    // Written by the host, seen by the next step.
    let reset = fk::ArmState::default();
    state.write(&[reset]).unwrap();
    let step = fk::ArmStep {
        qd: [1.0; 6],
        dt: 0.5,
        reserved: 0,
    };
    rt.call_on_state(&fk::ARM_STEP, &mut state, &step).unwrap();
    let got = state.read().unwrap()[0];
    assert!(close(&got.q, &[0.5; 6], 1e-6), "{got:?}");
    // The same step as bytes (the bindings' call): the same state after it;
    // a length the table's struct does not hold refused.
    let raw = bytemuck::bytes_of(&step);
    rt.call_on_state_raw(fk::ARM_STEP.op(), &mut state, raw)
        .unwrap();
    let got = state.read().unwrap()[0];
    assert!(close(&got.q, &[1.0; 6], 1e-6), "{got:?}");
    assert!(matches!(
        rt.call_on_state_raw(fk::ARM_STEP.op(), &mut state, &raw[..8]),
        Err(Error::OpMismatch { .. })
    ));
    assert!(matches!(
        rt.call_on_state_raw(fk::ARM_STEP.op(), &mut state, &[0; 33]),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        state.write(&[reset, reset]),
        Err(Error::InvalidArgument(_))
    ));
    // Four arms from four threads at once.
    std::thread::scope(|s| {
        for t in 0..4 {
            let steps = &steps;
            s.spawn(move || steps(100 + t, 500));
        }
    });
    // State memory goes back when a state is dropped; more than there is
    // is refused.
    for i in 0..10_000u32 {
        let s = rt.state(&[i; 256]).unwrap();
        assert_eq!(s.len(), 256);
    }
    assert!(matches!(
        rt.state(&vec![0u8; 2 << 20]),
        Err(Error::InvalidConfig(_))
    ));
    // A state of another runtime (two resident kernels at once: not under
    // a sanitizer, which runs them one after the other).
    if !under_sanitizer() {
        let other = fk::runtime().unwrap();
        let mut theirs = other.state(&[fk::ArmState::default()]).unwrap();
        assert!(matches!(
            rt.call_on_state(&fk::ARM_STEP, &mut theirs, &step),
            Err(Error::InvalidArgument(_))
        ));
        other
            .call_on_state(&fk::ARM_STEP, &mut theirs, &step)
            .unwrap();
        other.shutdown().unwrap();
    }
    // Refusals: nothing submitted.
    let empty: &[fk::ArmState] = &[];
    assert!(matches!(rt.state(empty), Err(Error::InvalidArgument(_))));
    assert!(matches!(rt.state(&[(); 4]), Err(Error::InvalidArgument(_))));
    let not_state: pkq::StateOp<fk::ArmState, fk::ArmStep> = pkq::StateOp::new(fk::FK.op().0, "FK");
    assert!(matches!(
        rt.call_on_state(&not_state, &mut state, &step),
        Err(Error::OpMismatch { .. })
    ));
    // Arguments that cannot fit a slot after the state's address and
    // length: refused for their size, before the op table is asked.
    let too_big: pkq::StateOp<fk::ArmState, [u64; 5]> =
        pkq::StateOp::new(fk::ARM_STEP.op().0, "ARM_STEP");
    assert!(matches!(
        rt.call_on_state(&too_big, &mut state, &[0u64; 5]),
        Err(Error::PayloadTooLarge { len: 56, max: 48 })
    ));
    let typed: pkq::TypedOp<fk::ArmStep> = pkq::TypedOp::new(fk::ARM_STEP.op().0, "ARM_STEP");
    assert!(matches!(
        rt.submit(typed.args(&step)),
        Err(Error::OpMismatch { .. })
    ));
    assert!(matches!(
        rt.submit(Task::raw(fk::ARM_STEP.op(), bytemuck::bytes_of(&[0u64; 6]))),
        Err(Error::UncheckedOp(_))
    ));
    rt.shutdown().unwrap();
    assert!(matches!(
        rt.call_on_state(&fk::ARM_STEP, &mut state, &step),
        Err(Error::Closed)
    ));
    println!("    2000 + 4 x 500 arm steps on device state checked against the host");
}

/// One IO task checked against the host: COPY_IO's output and value.
fn check_copy_io((t, input, args): (pkq::Ticket, Vec<u8>, pkq::builtin::CopyIoArgs)) {
    let (c, out) = t.wait_output().unwrap();
    let key = args.key as u8;
    assert_eq!(out.len(), args.out_len as usize);
    for (i, o) in out.iter().enumerate() {
        let want = input.get(i).copied().unwrap_or(0) ^ key;
        assert_eq!(*o, want, "byte {i} of {}", out.len());
    }
    assert_eq!(c.value, input.iter().map(|&b| u64::from(b)).sum::<u64>());
}

/// `tasks` IO tasks of COPY_IO from each of four threads on `rt` (areas of
/// `most` bytes each way), each checked against the host, with up to 24 in
/// flight: sizes from `size`; every `nops`-th task (0: never) is preceded
/// by a run of `nop_run` NOPs, which leave the areas alone for as many
/// laps. The tasks checked.
fn io_random(
    rt: &Runtime,
    seed: u64,
    tasks: usize,
    size: &(dyn Fn(&mut Rng) -> usize + Sync),
    nops: usize,
    nop_run: usize,
) -> usize {
    use pkq::builtin::CopyIoArgs;
    let mut n = 0;
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed + t);
                    let mut held = VecDeque::new();
                    for i in 0..tasks {
                        if nops != 0 && i % nops == nops - 1 {
                            for _ in 0..nop_run {
                                rt.submit(NOP.args(&())).unwrap().wait().unwrap();
                            }
                        }
                        let input: Vec<u8> =
                            (0..size(&mut rng)).map(|_| rng.next() as u8).collect();
                        let args = CopyIoArgs {
                            out_len: size(&mut rng) as u32,
                            key: rng.next() as u32,
                        };
                        let t = rt.submit(COPY_IO.io(&args, &input)).unwrap();
                        held.push_back((t, input, args));
                        if held.len() > 1 + i % 24 {
                            check_copy_io(held.pop_front().unwrap());
                        }
                    }
                    held.into_iter().for_each(check_copy_io);
                    tasks
                })
            })
            .collect();
        for t in threads {
            n += t.join().unwrap();
        }
    });
    n
}

/// IO tasks (`Builder::io`, `submit_io`): input and output bytes in mapped
/// memory, every size from 0 to 64 KiB each way (the edges of a 7-byte word
/// among them), COPY_IO's output and value checked against the host, from
/// four threads across many laps of a small ring with two pollers per
/// worker (areas this large: rooms in device memory); refusals.
pub(crate) fn io_tasks_random_vs_cpu() {
    use pkq::builtin::CopyIoArgs;
    const MOST: usize = 65536;
    let rt = Runtime::builder()
        .capacity(16)
        .workers(4)
        .pollers(2)
        .io(MOST, MOST)
        .build()
        .unwrap();
    let edges = [
        0usize, 1, 3, 4, 6, 7, 8, 13, 14, 15, 255, 1024, 4096, 65535, MOST,
    ];
    let size = |rng: &mut Rng| match rng.below(4) {
        0 => edges[rng.below(edges.len() as u64) as usize],
        1 => rng.below(MOST as u64 + 1) as usize,
        _ => rng.below(300) as usize,
    };
    let tasks = if under_sanitizer() { 200 } else { 3_000 };
    let n = io_random(&rt, 800, tasks, &size, 0, 0);
    // Refused by the device: more output than the room; plain tasks of the
    // op have none.
    let over = CopyIoArgs {
        out_len: MOST as u32 + 1,
        key: 0,
    };
    assert!(matches!(
        rt.submit(COPY_IO.io(&over, &[1])).unwrap().wait_output(),
        Err(Error::Task(TaskError {
            status: TaskStatus::BadArgs,
            ..
        }))
    ));
    let none = CopyIoArgs { out_len: 0, key: 0 };
    assert_eq!(
        rt.submit(COPY_IO.args(&none))
            .unwrap()
            .wait()
            .unwrap()
            .value,
        0
    );
    let some = CopyIoArgs { out_len: 1, key: 0 };
    assert!(matches!(
        rt.submit(COPY_IO.args(&some)).unwrap().wait(),
        Err(Error::Task(_))
    ));
    // Refused on the host, nothing submitted.
    assert!(matches!(
        rt.submit(COPY_IO.io(&none, &vec![0; MOST + 1])),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        Runtime::builder().io(MOST + 1, 0).build(),
        Err(Error::InvalidConfig(_))
    ));
    rt.shutdown().unwrap();
    let plain = Runtime::builder().build().unwrap();
    assert!(matches!(
        plain.submit(COPY_IO.io(&none, &[])),
        Err(Error::InvalidConfig(_))
    ));
    plain.shutdown().unwrap();
    println!("    {n} IO tasks of 0 to 64 KiB each way checked against the host");
}

/// `io_random` on runtimes of capacity 8 (slots of many laps) with IO areas
/// of `most` bytes each way, one for each of `shapes` (workers, rings,
/// pollers), seeded `seed` + workers; `nops` is io_random's (every how
/// many tasks, how many NOPs). The tasks checked.
fn io_random_on_small_rings(
    most: usize,
    shapes: &[(usize, usize, u32)],
    seed: u64,
    tasks: usize,
    size: &(dyn Fn(&mut Rng) -> usize + Sync),
    (nops, nop_run): (usize, usize),
) -> usize {
    let mut n = 0;
    for &(workers, rings, pollers) in shapes {
        let rt = Runtime::builder()
            .capacity(8)
            .workers(workers)
            .rings(rings)
            .pollers(pollers)
            .io(most, most)
            .build()
            .unwrap();
        n += io_random(&rt, seed + workers as u64, tasks, size, nops, nop_run);
        rt.shutdown().unwrap();
    }
    n
}

/// IO tasks of large inputs (several chunks of 512 words: the worker's
/// pollers read them together) on a small ring served by one worker of eight
/// pollers, then by two workers of four: most tasks the same size as the one
/// before in their slot (their outputs' tags tell: no fence), some of any
/// size up to 64 KiB, runs of over 256 laps without an IO task (the worker
/// must fence before an output's word 0), every output checked against the
/// host.
pub(crate) fn io_tasks_large_inputs_read_by_the_workers_pollers() {
    const MOST: usize = 65536;
    let tasks = if under_sanitizer() { 60 } else { 1_500 };
    let (nops, nop_run) = if under_sanitizer() {
        (0, 0)
    } else {
        (500, 4_200)
    };
    let size = |rng: &mut Rng| match rng.below(8) {
        0 => rng.below(MOST as u64 + 1) as usize,
        1 => 3584 + rng.below(8) as usize,
        2 => rng.below(8) as usize,
        _ => 40_000,
    };
    let n = io_random_on_small_rings(
        MOST,
        &[(1, 1, 8), (2, 1, 4)],
        950,
        tasks,
        &size,
        (nops, nop_run),
    );
    println!(
        "    {n} IO tasks of up to 64 KiB each way checked against the host, inputs read by several pollers"
    );
}

/// Plain streams (PLAIN in cuda/pkq_layout.h: 4 KiB or more, untagged)
/// between tagged ones in the same slots, one submitting thread, in order:
/// one lap of every 300 of each slot moves both ways plain bytes whose
/// every 8-byte word's top byte is the next lap's tag (what a tag check
/// alone would take for that lap's word), the other laps move 1000 tagged
/// bytes each way: the 255 after a plain lap carry the fresh mark (the
/// worker uses no knowledge of the output area), the rest run on what it
/// knows (no fence before the output's word 0), every output checked
/// against the host. On one worker of
/// eight pollers (rooms in shared memory: the bulk copy engine) and on four
/// workers of two pollers with 64 KiB areas (rooms in device memory: the
/// warp's loads). A poller that reads its knowledge late (the case the
/// fresh mark is for) cannot be forced from here: the software device's
/// tests check the marks.
pub(crate) fn io_tasks_plain_between_tagged_in_the_same_slots() {
    use pkq::builtin::CopyIoArgs;
    let (rounds, period) = if under_sanitizer() {
        (40, 20)
    } else {
        (1_500, 300)
    };
    let mut n = 0;
    for (cap, workers, pollers, most) in [(2usize, 1usize, 8u32, 8192usize), (8, 4, 2, 65536)] {
        let rt = Runtime::builder()
            .capacity(cap)
            .workers(workers)
            .pollers(pollers)
            .io(most, most)
            .start_sequence(0)
            .build()
            .unwrap();
        let mut rng = Rng::new(970 + workers as u64);
        let mut held = VecDeque::new();
        for i in 0..rounds * cap {
            let lap = i / cap;
            let (input, args) = if lap % period == period / 2 {
                let next_tag = (lap + 1) as u8;
                let len = 4096 + rng.below(most as u64 - 4095) as usize;
                let input: Vec<u8> = (0..len)
                    .map(|k| {
                        if k % 8 == 7 {
                            next_tag
                        } else {
                            rng.next() as u8
                        }
                    })
                    .collect();
                // Within the input: every output word's top byte is the
                // next lap's tag too (key 0).
                let out_len = 4096 + rng.below(len as u64 - 4095) as u32;
                (input, CopyIoArgs { out_len, key: 0 })
            } else {
                let input: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
                (
                    input,
                    CopyIoArgs {
                        out_len: 1000,
                        key: rng.next() as u32,
                    },
                )
            };
            held.push_back((rt.submit(COPY_IO.io(&args, &input)).unwrap(), input, args));
            if held.len() > cap / 2 {
                check_copy_io(held.pop_front().unwrap());
            }
            n += 1;
        }
        held.into_iter().for_each(check_copy_io);
        rt.shutdown().unwrap();
    }
    println!(
        "    {n} IO tasks, plain streams between tagged ones in the same slots, checked against the host"
    );
}

/// IO tasks on small areas (rooms in shared memory) of a small ring served by
/// one worker of eight pollers: most tasks the same size as the one before
/// in their slot (their tags alone tell: the output written without a
/// fence), some longer or shorter, and runs of over 256 laps without an IO
/// task (a word then carries its tag again: the worker must fence), every
/// output checked against the host; then the same on two rings of four
/// workers of two pollers.
pub(crate) fn io_tasks_reuse_small_areas_across_laps() {
    const MOST: usize = 1024;
    let tasks = if under_sanitizer() { 150 } else { 4_000 };
    // Capacity 8: a run of 4200 NOPs from one thread alone is over 256
    // laps of each slot, on one ring or two.
    let (nops, nop_run) = if under_sanitizer() {
        (0, 0)
    } else {
        (1_000, 4_200)
    };
    let size = |rng: &mut Rng| match rng.below(8) {
        0 => rng.below(MOST as u64 + 1) as usize,
        1 => rng.below(8) as usize,
        _ => 1000,
    };
    let n = io_random_on_small_rings(
        MOST,
        &[(1, 1, 8), (8, 2, 2)],
        900,
        tasks,
        &size,
        (nops, nop_run),
    );
    println!("    {n} IO tasks of up to 1 KiB each way checked against the host, areas reused");
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    axpy_random_vs_cpu,
    axpy_bad_args_reported_by_device,
    modules_without_a_fitting_kernel_are_refused,
    builtin_ops_random_vs_cpu,
    typed_ops_are_checked_against_the_op_table,
    custom_handler_vs_reference,
    state_ops_random_vs_cpu,
    io_tasks_random_vs_cpu,
    io_tasks_reuse_small_areas_across_laps,
    io_tasks_large_inputs_read_by_the_workers_pollers,
    io_tasks_plain_between_tagged_in_the_same_slots,
    callers_context_is_kept_and_foreign_buffers_refused,
];
