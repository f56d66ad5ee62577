//! `include/pkq.h` is what cbindgen (the pinned version, `cbindgen.toml`)
//! generates from this crate's source: a change to the API that the
//! committed header does not show fails here. `PKQ_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_the_generated_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut generated);
    let path = dir.join("include/pkq.h");
    if std::env::var_os("PKQ_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/pkq.h is not what the code generates: PKQ_BLESS=1 cargo test -p pkq-ffi --test header, and commit it"
    );
}
