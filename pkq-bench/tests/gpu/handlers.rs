//! The bench programs' handlers against CPU references: control_loop's
//! controller (IO tasks on device state) and risk_check's book (a state op).

use super::*;

/// IO tasks on device state (`Runtime::call_on_state_io`): control.cu's
/// controller stepped by random sensor frames, each tick's outputs and
/// count checked against the host's twin stepped alongside, the state
/// compared as it goes; four controllers stepped from four threads at
/// once; refusals, with the state untouched.
pub(crate) fn state_io_random_vs_cpu() {
    if control::IMAGE.is_empty() {
        return skip("pkq-bench was built without nvcc, so control.cu was not compiled");
    }
    use control::{CtlState, FRAME_BYTES, Frame};
    let rt = control::runtime(None).unwrap();
    let frame_of = |rng: &mut Rng| -> Frame { std::array::from_fn(|_| 2.0 * rng.unit() - 1.0) };
    let close = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-4 * y.abs().max(1.0))
    };
    let ticks = |seed: u64, n: u32| {
        let mut rng = Rng::new(seed);
        let mut want = CtlState::new(1e-4 * (1 + rng.below(10)) as f32, seed);
        let mut state = rt.state(&[want]).unwrap();
        for i in 1..=n {
            let frame = frame_of(&mut rng);
            let out = want.step(&frame).unwrap();
            let (c, got) = rt
                .call_on_state_io(&control::STEP, &mut state, &(), bytemuck::bytes_of(&frame))
                .unwrap();
            assert_eq!(c.value, u64::from(i), "tick {i}: the device's count");
            assert_eq!(got.len(), control::OUT_BYTES, "tick {i}");
            let got: &[f32] = bytemuck::cast_slice(&got);
            assert!(close(got, &out), "tick {i}: {got:?} against {out:?}");
            if i % 250 == 0 {
                let s = state.read().unwrap()[0];
                assert_eq!(s.ticks, want.ticks, "tick {i}");
                assert!(close(&s.integral, &want.integral), "tick {i}: {s:?}");
                assert!(close(&s.prev_error, &want.prev_error), "tick {i}: {s:?}");
                assert_eq!(s.w, want.w, "tick {i}: the observer is read only");
            }
        }
        (state, want)
    };
    let (mut state, want) = ticks(60, 3_000);
    let mut rng = Rng::new(61);
    // A frame the handler refuses leaves the state as it was.
    let mut bad = frame_of(&mut rng);
    bad[77] = f32::INFINITY;
    assert!(matches!(
        rt.call_on_state_io(&control::STEP, &mut state, &(), bytemuck::bytes_of(&bad)),
        Err(Error::Task(TaskError {
            status: TaskStatus::Other(16),
            ..
        }))
    ));
    let frame = frame_of(&mut rng);
    let bytes = bytemuck::bytes_of(&frame);
    assert!(
        matches!(
            rt.call_on_state_io(&control::STEP, &mut state, &(), &bytes[..FRAME_BYTES - 8]),
            Err(Error::Task(TaskError {
                status: TaskStatus::BadArgs,
                ..
            }))
        ),
        "a short frame is the handler's to refuse"
    );
    assert!(matches!(
        rt.call_on_state_io(&control::STEP, &mut state, &(), &vec![0u8; 1 << 20]),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(
        state.read().unwrap(),
        [want],
        "refused ticks touched nothing"
    );
    // The count goes on from the last tick that ran.
    let (c, _) = rt
        .call_on_state_io(&control::STEP, &mut state, &(), bytes)
        .unwrap();
    assert_eq!(c.value, u64::from(want.ticks) + 1);
    // Four controllers from four threads at once.
    std::thread::scope(|s| {
        for t in 0..4 {
            let ticks = &ticks;
            s.spawn(move || ticks(200 + t, 600));
        }
    });
    // A runtime of the same module without IO areas (the module is loaded:
    // it is reused), and a state of another runtime (two resident kernels
    // at once: not under a sanitizer).
    if !under_sanitizer() {
        let plain = Runtime::builder()
            .module(control::IMAGE, control::KERNEL)
            .state_op(&control::STEP)
            .workers(1)
            .build()
            .unwrap();
        let mut theirs = plain.state(&[CtlState::new(1e-3, 1)]).unwrap();
        assert!(matches!(
            plain.call_on_state_io(&control::STEP, &mut theirs, &(), bytes),
            Err(Error::InvalidConfig(_))
        ));
        assert!(matches!(
            rt.call_on_state_io(&control::STEP, &mut theirs, &(), bytes),
            Err(Error::InvalidArgument(_))
        ));
        plain.shutdown().unwrap();
    }
    rt.shutdown().unwrap();
    assert!(matches!(
        rt.call_on_state_io(&control::STEP, &mut state, &(), bytes),
        Err(Error::Closed)
    ));
    println!(
        "    3000 + 4 x 600 control ticks (IO tasks on device state) checked against the host"
    );
}

/// The risk-check bench's book on the device (`risk_check/book.cu`, a
/// state op): random orders, each decision checked against the host's
/// twin of the book, then the whole book compared; out-of-range orders
/// rejected, not followed.
pub(crate) fn risk_check_random_vs_cpu() {
    if risk::IMAGE.is_empty() {
        return skip("pkq-bench was built without nvcc, so book.cu was not compiled");
    }
    let rt = risk::runtime(None).unwrap();
    let mut want = risk::Book::new(9);
    let mut state = rt.state(&[want]).unwrap();
    let mut rng = risk::Rng(0x1234_5678_9abc_def1);
    let mut decisions = [0usize; 5];
    for k in 0..20_000 {
        let mut o = want.order(&mut rng);
        match k % 1000 {
            1 => o.qty = i64::MIN,
            2 => o.price = -1,
            3 => o.account = u32::MAX,
            _ => {}
        }
        let got = rt
            .call_on_state(&risk::CHECK, &mut state, &o)
            .unwrap()
            .value;
        let expect = want.check(&o);
        assert_eq!(got, expect, "order {k}: {o:?}");
        decisions[(got & 0xff) as usize] += 1;
    }
    assert_eq!(
        state.read().unwrap(),
        [want],
        "the book after 20 000 orders"
    );
    assert!(
        decisions.iter().all(|&d| d > 0),
        "every decision taken: {decisions:?}"
    );
    // A book written with values out of range is refused, not computed on
    // (nothing overflows), on the device as on the host.
    let mut wild = risk::Book::new(10);
    wild.mid[0] = i64::MAX;
    wild.position[risk::INSTRUMENTS + 1] = i64::MIN;
    wild.notional[2] = i64::MAX;
    wild.position_limit[3] = -1;
    state.write(&[wild]).unwrap();
    for (account, instrument) in [(5, 0), (1, 1), (2, 4), (3, 6)] {
        let o = risk::Order {
            account,
            instrument,
            qty: 1,
            price: wild.mid[instrument as usize].clamp(1, 1 << 30),
        };
        let got = rt
            .call_on_state(&risk::CHECK, &mut state, &o)
            .unwrap()
            .value;
        let expect = wild.check(&o);
        assert_eq!(got, expect, "{o:?}");
        let want = if account == 3 {
            risk::REJECT_POSITION
        } else {
            risk::REJECT_UNKNOWN
        };
        assert_eq!(got, want, "{o:?}");
    }
    assert_eq!(state.read().unwrap(), [wild], "nothing written");
    rt.shutdown().unwrap();
    println!("    20 000 orders checked against the host's book: {decisions:?}");
}
