//! The example crates' handlers at every width, on random inputs against
//! their host references: the custom-handler example's FK as a group op and
//! the options example's Black-Scholes pricer.

use super::width::WIDE;
use super::*;
use pkq::Width;

pub(crate) const TESTS: &[Test] = tests![fk_wide_random_vs_reference, options_random_vs_reference];

/// FK_WIDE on lanes of every wide shape: random batches (1 configuration to
/// past the warp op's limit) against the f64 reference, each task's value
/// its batch; a non-finite angle spoils its own transform only; the warp
/// op refused on a wide lane and the wide op on a lane of warps; lengths
/// checked on the host.
pub(crate) fn fk_wide_random_vs_reference() {
    if fk::IMAGE.is_empty() {
        return skip("pkq was built without nvcc, so fk.cu was not compiled");
    }
    let stream = pkq::context(0).unwrap().default_stream();
    let mut rng = Rng::new(0xf4);
    let mut sizes = vec![1usize, 31, 257, fk::MAX_N + 1, 16_384];
    sizes.extend((0..3).map(|_| 1 + rng.below(60_000) as usize));
    let mut batches: Vec<_> = sizes
        .into_iter()
        .map(|n| {
            let q = fk::random_angles(n, rng.next());
            let qd = stream.clone_htod(&q).unwrap();
            (n, q, qd)
        })
        .collect();
    let mut nan = fk::random_angles(40, 3);
    nan[6 * 17 + 2] = f32::NAN;
    let nan_d = stream.clone_htod(&nan).unwrap();
    // Room for the largest batch, filled with NaNs by a copy before each
    // task (no driver memset beside a lane over every SM: see Width::Group).
    let most = batches.iter().map(|b| b.0).max().unwrap();
    let nans = vec![f32::NAN; 12 * most];
    let mut pose = stream.clone_htod(&nans).unwrap();

    let narrow = fk::runtime().unwrap();
    let args = |q: u64, pose: u64, n: usize| fk::FkArgs {
        q,
        pose,
        n: n as u32,
        reserved: 0,
    };
    assert!(matches!(
        narrow.submit(fk::FK_WIDE.args(&args(0, 0, 0))),
        Err(Error::OpMismatch { code: 258, .. })
    ));
    drop(narrow);
    for width in WIDE {
        let rt = fk::wide_runtime(width).unwrap();
        assert!(
            matches!(
                rt.submit(fk::FK.args(&args(0, 0, 0))),
                Err(Error::OpMismatch { code: 256, .. })
            ),
            "{width:?}: the warp op on a wide lane"
        );
        // Another order on each lane (the largest batch not always last).
        let by = 1 + rng.below(batches.len() as u64 - 1) as usize;
        batches.rotate_left(by);
        for (n, q, qd) in &batches {
            stream.memcpy_htod(&nans, &mut pose).unwrap();
            let mut out = pose.slice_mut(..12 * n);
            assert_eq!(
                fk::forward_kinematics(&rt, qd, &mut out).unwrap(),
                *n as u64,
                "{width:?}, n {n}"
            );
            let got = stream.clone_dtoh(&pose.slice(..12 * n)).unwrap();
            let err = fk::max_error(q, &got);
            assert!(err < 1e-4, "{width:?}, n {n}: largest error {err}");
        }
        let mut out = pose.slice_mut(..12 * 40);
        assert_eq!(fk::forward_kinematics(&rt, &nan_d, &mut out).unwrap(), 40);
        let got = stream.clone_dtoh(&pose.slice(..12 * 40)).unwrap();
        for (i, (q, p)) in nan.chunks_exact(6).zip(got.chunks_exact(12)).enumerate() {
            if i == 17 {
                assert!(p.iter().any(|v| !v.is_finite()), "{width:?}: the NaN batch");
            } else {
                assert!(fk::max_error(q, p) < 1e-4, "{width:?}: configuration {i}");
            }
        }
        assert!(matches!(
            fk::forward_kinematics(&rt, &nan_d.slice(..6 * 3), &mut pose.slice_mut(..12 * 4)),
            Err(Error::InvalidArgument(_))
        ));
        rt.shutdown().unwrap();
    }
}

/// The options example's pricer at every width (a warp, and lanes of
/// every wide shape): random books of 1 option to a million (the warp op up
/// to its limit) and one far into the normal distribution's tails, some
/// options not options (negative, zero, NaN and infinite fields: NaNs),
/// books at an offset (views), prices and greeks
/// within 1e-5 relative of the f64 reference; a book past the warp op's
/// limit refused on the host, a misaligned one on the device.
pub(crate) fn options_random_vs_reference() {
    if options::IMAGE.is_empty() {
        return skip("pkq was built without nvcc, so options.cu was not compiled");
    }
    let stream = pkq::context(0).unwrap().default_stream();
    let mut rng = Rng::new(0x0b5);
    let mut sizes = vec![
        1usize,
        33,
        1_000,
        options::MAX_N,
        options::MAX_N + 1,
        1_000_000,
    ];
    sizes.extend((0..3).map(|_| 1 + rng.below(200_000) as usize));
    // The last book reaches far into the normal distribution's tails:
    // spots and strikes 1 to 1000, up to 30 years, volatility up to 3.
    sizes.push(100_000);
    let last = sizes.len() - 1;
    let books: Vec<_> = sizes
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let mut book = options::random_book(n, 100 + i as u64);
            if i == last {
                for o in &mut book {
                    let mut u = || rng.unit().abs();
                    *o = options::OptionIn {
                        spot: 1.0 + 999.0 * u(),
                        strike: 1.0 + 999.0 * u(),
                        years: 0.001 + 30.0 * u(),
                        vol: 0.01 + 3.0 * u(),
                    };
                }
            }
            for _ in 0..n / 100 {
                let o = &mut book[rng.below(n as u64) as usize];
                match rng.below(4) {
                    0 => o.vol = -0.2,
                    1 => o.years = 0.0,
                    2 => o.spot = f32::NAN,
                    _ => o.strike = f32::INFINITY,
                }
            }
            let rate = 0.1 * rng.unit().abs();
            let book_d = stream.clone_htod(&book).unwrap();
            (book, rate, book_d)
        })
        .collect();
    let most = books.iter().map(|b| b.0.len()).max().unwrap();
    let blank = vec![options::Greeks::default(); most];
    let mut out = stream.clone_htod(&blank).unwrap();
    for width in std::iter::once(Width::Warp).chain(WIDE) {
        let rt = options::runtime(width).unwrap();
        let limit = if width == Width::Warp {
            options::MAX_N
        } else {
            options::WIDE_MAX_N
        };
        for (book, rate, book_d) in &books {
            let n = book.len();
            // Every other book from an offset: views of both buffers.
            let off = if n > 1 && rng.below(2) == 1 {
                1 + rng.below(n as u64 - 1) as usize
            } else {
                0
            };
            stream.memcpy_htod(&blank, &mut out).unwrap();
            let got = options::price(&rt, *rate, &book_d.slice(off..), &mut out.slice_mut(off..n));
            if n - off > limit {
                assert!(
                    matches!(got, Err(Error::InvalidArgument(_))),
                    "{width:?}, {n}: {got:?}"
                );
                continue;
            }
            got.unwrap();
            let got = stream.clone_dtoh(&out.slice(off..n)).unwrap();
            let err = options::max_rel_error(&book[off..], *rate, &got);
            assert!(
                err <= 1e-5,
                "{width:?}, {n} options from {off}: largest relative error {err}"
            );
        }
        // A misaligned book, past the safe call: refused by the handler.
        let (book_at, out_at) = {
            use pkq::cudarc::driver::{DevicePtr, DevicePtrMut};
            let (b, _r) = books[1].2.device_ptr(&stream);
            let (o, _w) = out.device_ptr_mut(&stream);
            (b, o)
        };
        let op = if width == Width::Warp {
            &options::PRICE
        } else {
            &options::PRICE_WIDE
        };
        let bad = options::PriceArgs {
            book: book_at + 4,
            out: out_at,
            n: 2,
            rate: 0.0,
        };
        // SAFETY: the handler refuses the misaligned book before it reads
        // or writes anything; both buffers hold more than 2 records.
        let t = rt.submit(unsafe { op.args(&bad).unchecked() }).unwrap();
        assert!(
            matches!(
                t.wait(),
                Err(Error::Task(TaskError {
                    status: TaskStatus::BadArgs,
                    ..
                }))
            ),
            "{width:?}: a misaligned book"
        );
        rt.shutdown().unwrap();
    }
}
