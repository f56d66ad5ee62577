//! The rules for sharing the GPU with a resident kernel (`Runtime`'s docs,
//! "Rules for sharing the GPU"): which CUDA calls of the application wait
//! for the resident kernel while a runtime lives.

use std::sync::mpsc;

use super::*;
use pkq::cudarc::driver::{result, sys};

/// How long a call that waits for the kernel is watched before the runtime
/// is shut down under it.
const WATCHED: Duration = Duration::from_millis(300);

/// Runs `call` on a thread of its own with device 0's primary context
/// current; returns the receiver of its end.
fn on_thread(call: impl FnOnce() + Send + 'static) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    let ctx = pkq::context(0).unwrap();
    std::thread::spawn(move || {
        ctx.bind_to_thread().unwrap();
        call();
        let _ = tx.send(());
    });
    rx
}

/// While a runtime lives, `cuMemFree`, `cuMemFreeHost` and
/// `cuCtxSynchronize` in its context wait for its resident kernel, and each
/// returns once the runtime is shut down; a stream-ordered free
/// (`cuMemFreeAsync` on a stream of the application's) and a free of
/// memory allocated from a pool return at once.
pub(crate) fn frees_wait_for_the_resident_kernel() {
    let ctx = pkq::context(0).unwrap();
    ctx.bind_to_thread().unwrap();
    // Everything allocated before the runtime starts (an allocation may
    // wait for room too).
    // SAFETY: a plain device allocation of the current context, freed once
    // below.
    let device = unsafe { result::malloc_sync(1 << 20) }.unwrap();
    let mut host = std::ptr::null_mut();
    // SAFETY: a plain pinned allocation, freed once below.
    unsafe { sys::cuMemHostAlloc(&mut host, 1 << 20, 0) }
        .result()
        .unwrap();
    let host = host as usize;
    let stream = ctx.new_stream().unwrap();
    // SAFETY: a stream-ordered allocation on the application's stream.
    let pooled = unsafe { result::malloc_async(stream.cu_stream(), 1 << 20) }.unwrap();
    stream.synchronize().unwrap();

    let rt = Runtime::builder().build().unwrap();
    // A stream-ordered free on the application's stream returns at once.
    let cu_stream = stream.cu_stream() as usize;
    let async_free = on_thread(move || {
        // SAFETY: allocated above on this stream, freed once.
        unsafe { result::free_async(pooled, cu_stream as sys::CUstream) }.unwrap();
    });
    assert!(
        async_free.recv_timeout(Duration::from_secs(10)).is_ok(),
        "cuMemFreeAsync on the application's stream waited for the resident kernel"
    );
    // The three that wait.
    let waits = [
        (
            "cuMemFree",
            on_thread(move || {
                // SAFETY: allocated above, freed once.
                let _ = unsafe { result::free_sync(device) };
            }),
        ),
        (
            "cuMemFreeHost",
            on_thread(move || {
                // SAFETY: allocated above, freed once.
                let _ = unsafe { sys::cuMemFreeHost(host as *mut _) };
            }),
        ),
        (
            "cuCtxSynchronize",
            on_thread(|| {
                // SAFETY: the current context (bound by `on_thread`).
                let _ = unsafe { sys::cuCtxSynchronize() };
            }),
        ),
    ];
    std::thread::sleep(WATCHED);
    for (call, rx) in &waits {
        assert!(
            rx.try_recv().is_err(),
            "{call} returned while the resident kernel ran: the rule in Runtime's docs is wrong here"
        );
        eprintln!("    {call}: still waiting after {WATCHED:?} beside a live runtime");
    }
    rt.shutdown().unwrap();
    drop(rt);
    for (call, rx) in waits {
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "{call} did not return once the runtime was shut down"
        );
    }
}

/// Every built-in op as `pkq::builtin` declares it matches pkq's kernel's
/// op table: a submit of each declaration is checked against the table
/// (`OpMismatch` on any difference of size, alignment or pointer flag),
/// and the ops that dereference pointers are refused only for that.
pub(crate) fn builtin_declarations_match_the_kernels_table() {
    let rt = Runtime::builder().io(64, 64).build().unwrap();
    assert_eq!(rt.submit(NOP.args(&())).unwrap().wait().unwrap().value, 0);
    assert_eq!(rt.submit(ECHO.args(&5)).unwrap().wait().unwrap().value, 5);
    let six = [1u64, 2, 3, 4, 5, 6];
    assert_eq!(
        rt.submit(ECHO_48.args(&six)).unwrap().wait().unwrap().value,
        echo_fold(&six)
    );
    assert!(rt.submit(SPIN.args(&1)).unwrap().wait().unwrap().value >= 1);
    let io = CopyIoArgs { out_len: 3, key: 0 };
    let (_, out) = rt
        .submit(COPY_IO.io(&io, b"abc"))
        .unwrap()
        .wait_output()
        .unwrap();
    assert_eq!(out, b"abc");
    let pointers = [
        rt.submit(AXPY.args(&AxpyArgs::default())).map(drop),
        rt.submit(TRAP.args(&())).map(drop),
        rt.submit(MEMCPY.args(&MemcpyArgs::default())).map(drop),
        rt.submit(MEMSET.args(&MemsetArgs::default())).map(drop),
        rt.submit(DOT.args(&DotArgs::default())).map(drop),
        rt.submit(GEMV.args(&GemvArgs::default())).map(drop),
        rt.submit(FIR.args(&FirArgs::default())).map(drop),
    ];
    for (i, refused) in pointers.into_iter().enumerate() {
        assert!(
            matches!(refused, Err(Error::UncheckedOp(_))),
            "pointer op {i}: {refused:?}"
        );
    }
    rt.shutdown().unwrap();
}

/// `running_kernels` counts the pkq kernels running on the device: one per
/// lane while a runtime lives, none once it is shut down.
pub(crate) fn running_kernels_are_counted() {
    let before = pkq::running_kernels(0).unwrap();
    let rt = Runtime::builder()
        .add_lane(Runtime::builder().workers(4))
        .build()
        .unwrap();
    assert_eq!(pkq::running_kernels(0).unwrap(), before + 2);
    rt.shutdown().unwrap();
    assert_eq!(pkq::running_kernels(0).unwrap(), before);
    drop(rt);
    assert!(matches!(
        pkq::running_kernels(99),
        Err(Error::DeviceOutOfRange { index: 99, .. })
    ));
}

pub(crate) const TESTS: &[Test] = tests![
    running_kernels_are_counted,
    builtin_declarations_match_the_kernels_table,
    frees_wait_for_the_resident_kernel,
];
