//! pkq from async code: tokio tasks await tickets and batches, 10 000 tasks
//! in flight at once, every result checked. A `Ticket` and a `Batch` are
//! futures woken by the runtime's completion thread; pkq depends on no
//! executor.
//!
//!     cargo run --release --example async_tasks

use pkq::Submit;
use pkq::builtin::*;
use std::sync::Arc;
use std::time::Instant;

use pkq::Runtime;

/// What ECHO returns for a task whose one argument word is `v`.
fn echo(v: u64) -> u64 {
    pkq::builtin::echo_fold(&[v, 0, 0, 0, 0, 0])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> pkq::Result<()> {
    // A ring of 16 384 slots holds every task in flight at once.
    let rt = Arc::new(Runtime::builder().capacity(16_384).workers(8).build()?);
    let started = Instant::now();

    // 100 async tasks, each with 100 tickets in flight: 10 000 at once.
    let mut handles = Vec::new();
    for t in 0..100u64 {
        let rt = rt.clone();
        handles.push(tokio::spawn(async move {
            let tickets: Vec<_> = (0..100u64)
                .map(|i| rt.submit(ECHO.args(&(t << 32 | i))))
                .collect::<pkq::Result<_>>()?;
            let mut checked = 0u64;
            for (i, ticket) in tickets.into_iter().enumerate() {
                let done = ticket.await?;
                assert_eq!(done.value, echo(t << 32 | i as u64), "task {t}, ticket {i}");
                checked += 1;
            }
            // A batch is a future too.
            let args: Vec<u64> = (0..64).map(|i| t * 1000 + i).collect();
            let results = rt.submit(ECHO.batch(&args))?.await?;
            for (a, r) in args.iter().zip(&results) {
                assert_eq!(r.as_ref().expect("ECHO never fails").value, echo(*a));
                checked += 1;
            }
            Ok::<u64, pkq::Error>(checked)
        }));
    }
    let mut checked = 0;
    for h in handles {
        checked += h.await.expect("no task panicked")?;
    }
    assert_eq!(checked, 100 * (100 + 64));
    println!(
        "{checked} results checked ({} tickets in flight at once) in {:.1} ms",
        100 * 100,
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
