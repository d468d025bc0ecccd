//! Any bytes as a GGUF file on disk: `load`, `peek_config` and the header-only reader return
//! values or typed errors; a loaded store hands out in-bounds views and row views.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use poot_load::gguf::GgufFile;
use poot_load::{LoadOptions, load, peek_config};

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("poot-fuzz-{}.gguf", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(path, data).is_err() {
        return;
    }
    let opened = GgufFile::open(path);
    let parsed = GgufFile::parse(data);
    assert_eq!(opened.is_ok(), parsed.is_ok());
    let _ = peek_config(path);
    let Ok(ck) = load(path, &LoadOptions::default()) else { return };
    let store = ck.store();
    let mut total = 0;
    for t in store.iter() {
        assert_eq!(Some(t.size_bytes()), t.stored_type().bytes_for(t.n_elems()));
        total += t.size_bytes();
        if let Ok(n) = t.n_rows() {
            let half = n / 2;
            if let (Ok(a), Ok(b)) = (t.rows(0..half), t.rows(half..n)) {
                assert_eq!(a.size_bytes() + b.size_bytes(), t.size_bytes());
            }
            let _ = t.split_rows(&[half, n - half]);
        }
    }
    assert_eq!(total, store.total_bytes());
});
