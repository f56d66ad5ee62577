//! CPU tests of pkq-bench's tools: what a machine without a GPU (or a build
//! without nvcc) can check.

use pkq_bench::Error;
use pkq_bench::bulk::{Bulk, BulkKind, bulk_copy};
use pkq_bench::floor::{Access, Floor, Shape, host_access_rate};

#[test]
fn access_rate_arguments_are_checked_before_the_driver() {
    let bad = [
        Access::reads(0, 64, 1),
        Access::reads(3, 64, 1),
        Access::reads(2048, 64, 1),
        Access::reads(8, 0, 1),
        Access::reads(8, 12, 1),
        Access::reads(8, 512, 1),
        Access {
            write_bytes: 32,
            write_stride: 16,
            ..Access::reads(8, 64, 1)
        },
        Access {
            write_bytes: 264,
            write_stride: 264,
            ..Access::reads(8, 0, 1)
        },
    ];
    for a in bad {
        assert!(
            matches!(host_access_rate(0, &a), Err(Error::InvalidArgument(_))),
            "{a:?}"
        );
    }
}

#[test]
fn floor_shapes_and_bulk_copies_are_checked_before_the_driver() {
    for (pollers, words, lines, depth) in [
        (3, 1, 1, 1),
        (16, 1, 1, 1),
        (1, 2, 1, 1),
        (1, 1, 0, 1),
        (1, 1, 1025, 1),
        (1, 1, 1, 0),
        (1, 1, 1, 3),
        (1, 1, 1, 8),
    ] {
        for bulk in [false, true] {
            let shape = Shape {
                pollers,
                words,
                lines,
                copies: false,
                depth,
                bulk,
            };
            // Eight bulk copies in flight are a shape.
            if bulk && depth == 8 {
                continue;
            }
            assert!(
                matches!(Floor::start(0, shape), Err(Error::InvalidArgument(_))),
                "{shape:?}"
            );
        }
    }
    let sixteen = Shape {
        depth: 16,
        bulk: true,
        ..Shape::pollers(1)
    };
    assert!(
        matches!(Floor::start(0, sixteen), Err(Error::InvalidArgument(_))),
        "{sixteen:?}"
    );
    let ok = Bulk {
        warps: 4,
        bytes: 1024,
        write: false,
        kind: BulkKind::RelaxedSys,
        inflight: 4,
        iters: 1,
    };
    for bad in [
        Bulk { warps: 0, ..ok },
        Bulk { warps: 33, ..ok },
        Bulk { bytes: 24, ..ok },
        Bulk {
            bytes: 2 << 20,
            ..ok
        },
        Bulk { inflight: 3, ..ok },
        Bulk { iters: 0, ..ok },
    ] {
        assert!(
            matches!(bulk_copy(0, &bad), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
}

/// Without a GPU (or without the kernels) a floor is an error, not a
/// panic: `NotBuilt` first when pkq-bench was built without nvcc, else the
/// device's typed error.
#[test]
fn no_gpu_is_an_error_not_a_panic() {
    if pkq::device_count().is_ok_and(|n| n > 0) {
        println!("a GPU is present: the GPU tests cover this machine");
        return;
    }
    let err = Floor::start(0, Shape::pollers(1)).err().expect("no GPU");
    println!("no GPU here: {err}");
    match pkq_bench::floor::image() {
        Ok(_) => assert!(matches!(err, Error::Device(_)), "{err:?}"),
        Err(_) => assert!(matches!(err, Error::NotBuilt(_)), "{err:?}"),
    }
    assert!(pkq_bench::floor::device_costs(0, 1).is_err());
    assert!(pkq_bench::floor::load(0).is_err());
}

/// A build without nvcc says so, and how to fix it. `.ci/run` runs this
/// file again from such a build.
#[test]
fn kernels_not_built_say_how_to_fix_it() {
    match pkq_bench::floor::image() {
        Ok(image) => {
            assert!(!image.is_empty());
            println!("this build carries the kernels (CI also runs this file without nvcc)");
        }
        Err(e) => {
            assert!(
                std::env::var_os("PKQ_REQUIRE_KERNEL").is_none(),
                "PKQ_REQUIRE_KERNEL is set but pkq-bench was built without nvcc"
            );
            let msg = e.to_string();
            assert!(matches!(e, Error::NotBuilt(_)), "{e:?}");
            assert!(msg.contains("nvcc") && msg.contains("NVCC"), "{msg}");
        }
    }
}
