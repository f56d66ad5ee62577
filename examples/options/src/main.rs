//! A trading loop's pricer on pkq: Black-Scholes prices and greeks of a book
//! of European options (`options.cu`), on one warp for small books and on
//! every SM for large ones, each checked against the `f64` reference.
//!
//! `cargo run --release -p options`
//!
//! Its timings against the same loop launched as an ordinary kernel are the
//! `options` rows of pkq-bench's width bench (`pkq-bench/results/width.json`).

use std::time::Instant;

use options::{Greeks, MAX_N, max_rel_error, price, random_book, runtime};
use pkq::Width;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if options::IMAGE.is_empty() {
        println!("skipped: the crate was built without nvcc, so options.cu was not compiled");
        return Ok(());
    }
    let rate = 0.03;
    // Buffers first: a lane over every SM leaves no room for the driver's
    // own kernels (pkq::Width::Group).
    let stream = pkq::context(0)?.default_stream();
    let mut books = Vec::new();
    for (i, n) in [1usize, 1_000, MAX_N, 1_000_000].into_iter().enumerate() {
        let mut book = random_book(n, 11 + i as u64);
        if n == 1_000 {
            // Not an option: its record is NaNs, the others priced.
            book[7].vol = -1.0;
        }
        let book_d = stream.clone_htod(&book)?;
        let out_d = stream.clone_htod(&vec![Greeks::default(); n])?;
        books.push((book, book_d, out_d));
    }

    for width in [
        Width::Warp,
        Width::Group {
            blocks: 0,
            warps: 8,
        },
    ] {
        let rt = runtime(width)?;
        for (book, book_d, out_d) in books.iter_mut() {
            if width == Width::Warp && book.len() > MAX_N {
                continue;
            }
            let t = Instant::now();
            price(&rt, rate, book_d, out_d)?;
            let took = t.elapsed();
            let got: Vec<Greeks> = stream.clone_dtoh(out_d)?;
            let err = max_rel_error(book, rate, &got);
            println!(
                "{width:?}: {:>9} options in {:>9.1?} (first call), largest relative error vs f64 {err:.1e}",
                book.len(),
                took
            );
            assert!(err <= 1e-5, "{width:?}, {} options: {err}", book.len());
        }
        rt.shutdown()?;
    }
    Ok(())
}
