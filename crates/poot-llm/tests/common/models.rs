//! The real checkpoints `scripts/fetch-models.sh` caches, found by the tests that use them.

#![allow(dead_code)] // not every test binary that includes `common` reads a real checkpoint

use std::path::PathBuf;

/// `$POOT_CACHE`, else `~/.cache/poot`.
pub fn cache() -> PathBuf {
    std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        })
}

/// The cached checkpoint `file`, or `None` after a SKIP line where it was not fetched.
pub fn cached_model(file: &str) -> Option<PathBuf> {
    let path = cache().join("models").join(file);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}
