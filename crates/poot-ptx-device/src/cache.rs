//! The PTX cache: compiled PTX keyed by a SHA-256 of everything that decides it (the CUDA source,
//! the NVRTC options, the target architecture and the NVRTC version), kept on disk under
//! `${POOT_CACHE:-$HOME/.cache/poot}/ptx/<key>.ptx` across processes.
//!
//! The disk cache is an optimization only: a file that cannot be read, written or loaded is
//! treated as a miss and the kernel is compiled again (and the failure counted in
//! [`CompileStats`](crate::CompileStats)). Files are written to a temporary name and renamed,
//! so a reader never sees half a file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// The content key of one compiled kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey(pub(crate) [u8; 32]);

impl CacheKey {
    /// Hashes the inputs of one NVRTC compile. Each field is framed by its length, so no two
    /// different inputs hash the same bytes.
    pub(crate) fn new(
        source: &str,
        options: &[String],
        arch: u32,
        nvrtc_version: (i32, i32),
    ) -> CacheKey {
        let mut h = Sha256::new();
        h.update(b"poot-ptx-cache v1\0");
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(source.as_bytes());
        field(&(options.len() as u64).to_le_bytes());
        for o in options {
            field(o.as_bytes());
        }
        field(&arch.to_le_bytes());
        field(&nvrtc_version.0.to_le_bytes());
        field(&nvrtc_version.1.to_le_bytes());
        CacheKey(h.finalize().into())
    }

    pub(crate) fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// The default cache root: `$POOT_CACHE`, else `$HOME/.cache/poot`; `None` when neither is set.
pub(crate) fn default_root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("POOT_CACHE").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("poot"))
}

/// PTX files under one directory (`<root>/ptx`).
#[derive(Clone, Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub(crate) fn under(root: &Path) -> DiskCache {
        DiskCache {
            dir: root.join("ptx"),
        }
    }

    fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.ptx", key.hex()))
    }

    /// The cached PTX for `key`, when a plausible one is stored: text without NUL bytes that
    /// declares `entry`.
    pub(crate) fn get(&self, key: &CacheKey, entry: &str) -> Option<String> {
        let text = fs::read_to_string(self.path(key)).ok()?;
        plausible_ptx(&text, entry).then_some(text)
    }

    /// Stores PTX for `key`, atomically (a temporary file renamed into place).
    pub(crate) fn put(&self, key: &CacheKey, ptx: &str) -> std::io::Result<()> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        fs::create_dir_all(&self.dir)?;
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(
            "{}.ptx.tmp.{}.{serial}",
            key.hex(),
            std::process::id()
        ));
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(ptx.as_bytes())?;
            f.sync_all()
        });
        let renamed = written.and_then(|()| fs::rename(&tmp, self.path(key)));
        if renamed.is_err() {
            // Best effort: a leftover temporary file is harmless, but do not leave one behind.
            let _ = fs::remove_file(&tmp);
        }
        renamed
    }
}

/// Whether `text` looks like a complete PTX module with entry `entry`.
pub(crate) fn plausible_ptx(text: &str, entry: &str) -> bool {
    !text.is_empty()
        && !text.contains('\0')
        && text.contains(".version")
        && text
            .lines()
            .any(|l| l.contains(&format!(".entry {entry}(")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Vec<String> {
        vec![
            "--gpu-architecture=compute_90".into(),
            "--fmad=false".into(),
        ]
    }

    #[test]
    fn key_is_deterministic_and_sensitive_to_every_input() {
        let k = CacheKey::new("src", &opts(), 90, (13, 0));
        assert_eq!(k, CacheKey::new("src", &opts(), 90, (13, 0)));
        assert_eq!(k.hex().len(), 64);
        assert_ne!(k, CacheKey::new("src ", &opts(), 90, (13, 0)));
        assert_ne!(k, CacheKey::new("src", &opts()[..1], 90, (13, 0)));
        assert_ne!(k, CacheKey::new("src", &opts(), 89, (13, 0)));
        assert_ne!(k, CacheKey::new("src", &opts(), 90, (13, 1)));
        // Framing: moving bytes between fields changes the key.
        let a = CacheKey::new("ab", &["c".to_string()], 90, (13, 0));
        let b = CacheKey::new("a", &["bc".to_string()], 90, (13, 0));
        assert_ne!(a, b);
    }

    #[test]
    fn key_is_stable_across_releases() {
        // Pinned so an accidental change of the key derivation (which would orphan every cached
        // file) shows up as a test failure.
        let k = CacheKey::new("extern \"C\" __global__ void k() {}", &opts(), 90, (13, 0));
        assert_eq!(k.hex(), PINNED_KEY);
    }

    // Computed independently (Python hashlib over the same framing).
    const PINNED_KEY: &str = "f8894e145a837dff92f302914c6f431bdd9b39a83d52a8cb7504910a501c8ca9";

    const PTX: &str =
        ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n)\n{\n ret;\n}\n";

    #[test]
    fn disk_round_trip_and_validation() {
        let root = std::env::temp_dir().join(format!("poot-ptx-cache-test-{}", std::process::id()));
        let cache = DiskCache::under(&root);
        let key = CacheKey::new("src", &opts(), 90, (13, 0));
        assert_eq!(cache.get(&key, "k"), None);
        cache.put(&key, PTX).unwrap();
        assert_eq!(cache.get(&key, "k").as_deref(), Some(PTX));
        // A file for another entry, or a truncated file, is a miss.
        assert_eq!(cache.get(&key, "other"), None);
        fs::write(cache.path(&key), &PTX[..10]).unwrap();
        assert_eq!(cache.get(&key, "k"), None);
        // No temporary files are left behind.
        let leftovers: Vec<_> = fs::read_dir(root.join("ptx"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn plausibility() {
        assert!(plausible_ptx(PTX, "k"));
        assert!(!plausible_ptx("", "k"));
        assert!(!plausible_ptx(&PTX.replace(".version", ".vers"), "k"));
        assert!(!plausible_ptx(&format!("{PTX}\0"), "k"));
    }
}
