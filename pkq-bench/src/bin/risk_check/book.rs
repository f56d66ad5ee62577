//! The host half of `book.cu`: the book, the order, the check declared once,
//! an order flow, and a reference to check the device against. Shared by
//! the bench and pkq-bench's GPU tests.
#![allow(dead_code)]

use bytemuck::{Pod, Zeroable};
use pkq::{Runtime, StateOp};
pub use pkq_bench::rng::Rng;

/// book.cu compiled by pkq-bench's build.rs with `pkq-build`, as a
/// downstream crate's build.rs would (empty when built without nvcc).
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/risk_check.fatbin"));
/// The resident kernel of the module (`PKQ_KERNEL(risk_worker_kernel, ...)`).
pub const KERNEL: &str = "risk_worker_kernel";
/// The same check as an ordinary kernel (one thread).
pub const LAUNCHED: &str = "risk_kernel";

pub const INSTRUMENTS: usize = 64;
pub const ACCOUNTS: usize = 64;

/// The decisions (a completion's value, low byte; an accepted order's new
/// position in the bits above).
pub const ACCEPT: u64 = 0;
pub const REJECT_PRICE: u64 = 1;
pub const REJECT_POSITION: u64 = 2;
pub const REJECT_NOTIONAL: u64 = 3;
/// No such account or instrument, or an order or book value out of range.
pub const REJECT_UNKNOWN: u64 = 4;

/// `struct risk_book` of book.cu: the book kept on the device. Prices in
/// ticks, quantities in lots.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct Book {
    pub mid: [i64; INSTRUMENTS],
    pub band: [i64; INSTRUMENTS],
    pub position_limit: [i64; ACCOUNTS],
    pub notional_limit: [i64; ACCOUNTS],
    /// Gross: the sum of `|qty| * price` of the accepted orders.
    pub notional: [i64; ACCOUNTS],
    /// `[account][instrument]`.
    pub position: [i64; ACCOUNTS * INSTRUMENTS],
}

/// `struct risk_order` of book.cu: a signed quantity (buy > 0) at a price.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Order {
    pub account: u32,
    pub instrument: u32,
    pub qty: i64,
    pub price: i64,
}

/// The pre-trade check of one order on the book kept on the device
/// (book.cu's `RISK_CHECK_OP`); its value is the decision.
pub const CHECK: StateOp<Book, Order> = StateOp::new(256, "RISK_CHECK");

/// The latency setting (one worker of eight pollers) serving book.cu's
/// kernel.
pub fn runtime(trace_records: Option<usize>) -> pkq::Result<Runtime> {
    let b = Runtime::builder()
        .module(IMAGE, KERNEL)
        .state_op(&CHECK)
        .workers(1)
        .pollers(8);
    match trace_records {
        Some(n) => b.trace(n),
        None => b,
    }
    .build()
}

impl Book {
    /// Mids around 10 000 ticks with bands of 1%, position limits of 100
    /// to 500 lots, and notional limits that every fourth account reaches.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng(seed | 1);
        let mut b = Self::zeroed();
        for i in 0..INSTRUMENTS {
            b.mid[i] = 9_000 + rng.below(2_000) as i64;
            b.band[i] = b.mid[i] / 100;
        }
        for a in 0..ACCOUNTS {
            b.position_limit[a] = 100 + rng.below(400) as i64;
            // Every fourth account with a gross notional limit it reaches.
            b.notional_limit[a] = if a % 4 == 0 {
                50_000_000 + rng.below(50_000_000) as i64
            } else {
                1 << 50
            };
        }
        b
    }

    /// The host's twin of `RISK_CHECK_OP`: the decision, the book updated
    /// as the device updates it.
    pub fn check(&mut self, o: &Order) -> u64 {
        let (a, i) = (o.account as usize, o.instrument as usize);
        if a >= ACCOUNTS
            || i >= INSTRUMENTS
            || o.qty == 0
            || !(-(1 << 30)..=1 << 30).contains(&o.qty)
            || o.price <= 0
            || o.price > 1 << 30
        {
            return REJECT_UNKNOWN;
        }
        let sane = |v: i64| (-(1 << 40)..=1 << 40).contains(&v);
        let gross_ok = |v: i64| (0..=1 << 61).contains(&v);
        let (mid, band) = (self.mid[i], self.band[i]);
        let (held, limit) = (self.position[a * INSTRUMENTS + i], self.position_limit[a]);
        let (gross, gross_limit) = (self.notional[a], self.notional_limit[a]);
        let in_range = sane(mid) && sane(band) && sane(held) && sane(limit);
        if !(in_range && gross_ok(gross) && gross_ok(gross_limit)) {
            return REJECT_UNKNOWN;
        }
        if (o.price - mid).abs() > band {
            return REJECT_PRICE;
        }
        let after = held + o.qty;
        if after.abs() > limit {
            return REJECT_POSITION;
        }
        let notional = gross + o.qty.abs() * o.price;
        if notional > gross_limit {
            return REJECT_NOTIONAL;
        }
        self.position[a * INSTRUMENTS + i] = after;
        self.notional[a] = notional;
        ACCEPT | ((after as u64) << 8)
    }

    /// A random order: mostly inside the band, some outside, now and then
    /// one of no account or instrument.
    pub fn order(&self, rng: &mut Rng) -> Order {
        let instrument = rng.below(INSTRUMENTS as u64 + 1) as u32;
        let mid = self.mid[(instrument as usize).min(INSTRUMENTS - 1)];
        let qty = 1 + rng.below(100) as i64;
        Order {
            account: rng.below(ACCOUNTS as u64 + 1) as u32,
            instrument,
            qty: if rng.next() & 1 == 0 { qty } else { -qty },
            price: mid - mid / 80 + rng.below((mid / 40) as u64 + 1) as i64,
        }
    }
}
