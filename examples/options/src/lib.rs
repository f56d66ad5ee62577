//! The host half of `options.cu`: a book of European options priced by
//! Black-Scholes on the device, prices and greeks of every option of a task,
//! on one warp or over the GPU's width; the ops declared once, their
//! records, a safe call, and an `f64` reference to check the device against.
//! Used by the demo (`src/main.rs`), pkq's GPU tests and pkq-bench's width
//! bench.
//!
//! Laid out as a crate of your own that serves its handlers with pkq would
//! be: `options.cu` beside `build.rs`, which compiles it with `pkq-build`
//! against pkq's headers, and the fatbin embedded here ([`IMAGE`]).
//!
//! ```no_run
//! # fn main() -> pkq::Result<()> {
//! use options::{Greeks, OptionIn};
//! let stream = pkq::context(0)?.default_stream();
//! let book = stream.clone_htod(&options::random_book(100_000, 1))?;
//! let mut out = stream.clone_htod(&vec![Greeks::default(); 100_000])?;
//! // One block per SM, 8 warps each, all on each task.
//! let rt = options::runtime(pkq::Width::Group { blocks: 0, warps: 8 })?;
//! options::price(&rt, 0.03, &book, &mut out)?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use pkq::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use pkq::{DeviceBuffer, DeviceBufferMut, Lane, Runtime, TypedOp, Width};

/// options.cu compiled by this crate's build.rs with `pkq-build` (empty
/// when the crate was built without nvcc).
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/options.fatbin"));
/// The resident kernel of the module.
pub const KERNEL: &str = "options_worker_kernel";
/// The same loop as an ordinary kernel (`price_kernel(book, out, n, rate)`:
/// [`PriceArgs`]' fields), which pkq-bench launches to time against.
pub const LAUNCHED_KERNEL: &str = "price_kernel";

/// `struct option_in` of options.cu: one option of the book.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct OptionIn {
    /// The underlying's price.
    pub spot: f32,
    /// The strike price.
    pub strike: f32,
    /// Years to expiry.
    pub years: f32,
    /// Volatility: a year's standard deviation of the log price.
    pub vol: f32,
}

/// `struct greeks` of options.cu: an option's prices and greeks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Greeks {
    /// The call's price.
    pub call: f32,
    /// The put's price.
    pub put: f32,
    /// d call / d spot.
    pub call_delta: f32,
    /// d put / d spot.
    pub put_delta: f32,
    /// d² price / d spot² (call and put alike).
    pub gamma: f32,
    /// d price / d vol (call and put alike).
    pub vega: f32,
    /// The call's price change per year as expiry nears.
    pub call_theta: f32,
    /// The put's.
    pub put_theta: f32,
}

// SAFETY: both are plain `repr(C)` structs of f32 (Pod): any bits are a
// value, all-zero bits included, so cudarc may copy and zero them.
unsafe impl DeviceRepr for OptionIn {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for OptionIn {}
// SAFETY: as above.
unsafe impl DeviceRepr for Greeks {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for Greeks {}

/// `struct price_args` of options.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct PriceArgs {
    /// Device address of `n` [`OptionIn`], 16-byte aligned.
    pub book: u64,
    /// Device address of room for `n` [`Greeks`], 16-byte aligned.
    pub out: u64,
    /// Options, at most [`MAX_N`] ([`WIDE_MAX_N`] for [`PRICE_WIDE`]).
    pub n: u32,
    /// The risk-free rate, continuously compounded, per year.
    pub rate: f32,
}

/// The book priced by one warp (options.cu's `PRICE_OP`).
pub const PRICE: TypedOp<PriceArgs> = TypedOp::with_pointers(256, "PRICE");
/// The largest book of one [`PRICE`] task.
pub const MAX_N: usize = 65_536;
/// The book priced by every thread of a lane's block or group (`PRICE_WIDE_OP`,
/// a group op: a lane of [`Width::Block`] or [`Width::Group`] serves it).
pub const PRICE_WIDE: TypedOp<PriceArgs> = TypedOp::with_pointers(257, "PRICE_WIDE");
/// The largest book of one [`PRICE_WIDE`] task.
pub const WIDE_MAX_N: usize = 1 << 24;

/// A runtime of one lane of `width` serving options.cu's kernel, the op of
/// that width ([`PRICE`] on warps, [`PRICE_WIDE`] on blocks or groups)
/// checked at load.
pub fn runtime(width: Width) -> pkq::Result<Runtime> {
    let op = match width {
        Width::Warp => &PRICE,
        _ => &PRICE_WIDE,
    };
    Runtime::builder()
        .module(IMAGE, KERNEL)
        .width(width)
        .op(op)
        .build()
}

/// Prices and greeks of every option of `book` at `rate` into `out` (of
/// the same length), on one warp of the resident kernel on a lane of warps
/// (up to [`MAX_N`] options), on every thread of the lane's block or group
/// on a wider lane (up to [`WIDE_MAX_N`]); returns once they are written.
/// An option whose spot, strike, years or volatility is not finite and
/// positive (or a rate that is not finite) gets NaNs.
///
/// Work queued on the buffers' streams is waited for first (their streams
/// are synchronized), so the task sees what came before.
pub fn price(
    lane: &Lane,
    rate: f32,
    book: &impl DeviceBuffer<OptionIn>,
    out: &mut impl DeviceBufferMut<Greeks>,
) -> pkq::Result<()> {
    let (op, most) = match lane.width() {
        Width::Warp => (&PRICE, MAX_N),
        _ => (&PRICE_WIDE, WIDE_MAX_N),
    };
    if book.len() != out.len() || book.len() > most {
        return Err(pkq::Error::InvalidArgument(format!(
            "price needs a book and room of one length, at most {most} on this lane (got {} and {})",
            book.len(),
            out.len()
        )));
    }
    let (bs, os) = (Arc::clone(book.stream()), Arc::clone(out.stream()));
    let (bp, _read) = book.device_ptr(&bs);
    let (op_out, _write) = out.device_ptr_mut(&os);
    let args = PriceArgs {
        book: bp,
        out: op_out,
        n: book.len() as u32,
        rate,
    };
    // SAFETY: book and out are live buffers of n records each (16 and 32
    // bytes: every element 16-byte aligned), borrowed (out exclusively)
    // for the call; their streams are passed along.
    unsafe { lane.call_on_buffers(op, &args, &[&bs, &os]) }.map(drop)
}

/// The reference, in `f64` from the same `f32` inputs: the option's
/// [`Greeks`] in the struct's order, NaNs where the device writes NaNs.
pub fn reference(o: &OptionIn, rate: f32) -> [f64; 8] {
    let (s, k, t, v, r) = (
        f64::from(o.spot),
        f64::from(o.strike),
        f64::from(o.years),
        f64::from(o.vol),
        f64::from(rate),
    );
    if !(s > 0.0 && k > 0.0 && t > 0.0 && v > 0.0 && (s + k + t + v + r).is_finite()) {
        return [f64::NAN; 8];
    }
    let (root, h) = (t.sqrt(), std::f64::consts::FRAC_1_SQRT_2);
    let vt = v * root;
    let d1 = ((s / k).ln() + (r + 0.5 * v * v) * t) / vt;
    let d2 = d1 - vt;
    let disc = k * (-r * t).exp();
    let (n1, n2) = (0.5 * libm::erfc(-d1 * h), 0.5 * libm::erfc(-d2 * h));
    let (m1, m2) = (0.5 * libm::erfc(d1 * h), 0.5 * libm::erfc(d2 * h));
    let pdf = (-0.5 * d1 * d1).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let decay = -s * pdf * v / (2.0 * root);
    [
        s * n1 - disc * n2,
        disc * m2 - s * m1,
        n1,
        -m1,
        pdf / (s * vt),
        s * pdf * root,
        decay - r * disc * n2,
        decay + r * disc * m2,
    ]
}

/// Below this magnitude a value is compared absolutely: the device stores
/// `f32`, whose normal range ends near 1e-38.
pub const TINY: f64 = 1e-30;

/// The largest relative difference between the device's records and the
/// reference (`|got - want| / |want|`, values under [`TINY`] compared
/// absolutely and scaled by it); NaN where the device and the reference
/// disagree on NaN.
pub fn max_rel_error(book: &[OptionIn], rate: f32, got: &[Greeks]) -> f64 {
    book.iter()
        .zip(got)
        .flat_map(|(o, g)| {
            let want = reference(o, rate);
            let got: [f32; 8] = bytemuck::cast(*g);
            (0..8).map(move |i| {
                let (a, b) = (f64::from(got[i]), want[i]);
                match (a.is_nan(), b.is_nan()) {
                    (true, true) => 0.0,
                    (false, false) => (a - b).abs() / b.abs().max(TINY),
                    _ => f64::NAN,
                }
            })
        })
        .fold(0.0, |m, e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        })
}

/// `n` options of random spot (80 to 120), strike (70 to 130), years (0.05
/// to 2) and volatility (0.1 to 0.6), from `seed` (xorshift).
pub fn random_book(n: usize, seed: u64) -> Vec<OptionIn> {
    let mut s = seed.max(1);
    let mut unit = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n)
        .map(|_| OptionIn {
            spot: 80.0 + 40.0 * unit(),
            strike: 70.0 + 60.0 * unit(),
            years: 0.05 + 1.95 * unit(),
            vol: 0.1 + 0.5 * unit(),
        })
        .collect()
}
