//! Compiles `options.cu` into `$OUT_DIR/options.fatbin`, which `src/lib.rs` embeds,
//! exactly as the build script of a crate of your own would: nvcc and its
//! flags from `pkq-build`, pkq's device headers from `DEP_PKQ_INCLUDE`
//! (pkq's `links = "pkq"` exports them to the crates that depend on it).
//! Without nvcc the fatbin is empty and the crate still builds: the demo
//! then says so, and a runtime on the image is refused (`InvalidModule`).

use std::env;
use std::path::PathBuf;

fn main() {
    pkq_build::rerun_if_env_changed();
    println!("cargo::rerun-if-changed=options.cu");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let fatbin = out.join("options.fatbin");
    let pkq_include = env::var("DEP_PKQ_INCLUDE").expect("pkq is a dependency");
    // options.cu includes pkq's headers.
    println!("cargo::rerun-if-changed={pkq_include}");
    match pkq_build::Fatbin::new("options.cu")
        .include(pkq_include)
        .compile(&fatbin)
    {
        Ok(_built) => {}
        Err(pkq_build::Error::NoNvcc(why)) => {
            println!("cargo::warning=options.cu not compiled: {why}");
            std::fs::write(&fatbin, []).unwrap();
        }
        Err(e) => panic!("options.cu: {e}"),
    }
}
