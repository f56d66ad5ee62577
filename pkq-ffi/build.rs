//! Tells the tests the target they are built for (`tests/c_api.rs` compiles
//! its C program for it with the `cc` crate, which asks for one).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    println!("cargo::rustc-env=PKQ_FFI_TARGET={target}");
}
