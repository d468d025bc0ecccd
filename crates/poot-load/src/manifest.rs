//! The integrity manifest: for every file a load reads, its length and SHA-256.
//!
//! The file format is JSON:
//!
//! ```json
//! {
//!   "poot_manifest": 1,
//!   "files": {
//!     "config.json":       { "length_bytes": 612,      "sha256": "<64 lowercase hex digits>" },
//!     "model.safetensors": { "length_bytes": 90864192, "sha256": "..." }
//!   }
//! }
//! ```
//!
//! Keys are paths relative to the checkpoint directory with `/` separators
//! (`1_Pooling/config.json`); for a GGUF checkpoint the key is the file's own name. Unknown
//! fields and repeated file names are refused, so a typo cannot silently drop a check.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::LoadError;
use crate::integrity::IntegrityError;
use crate::json_object::ObjectEntries;

/// The manifest format version this crate reads and writes.
pub const MANIFEST_VERSION: u64 = 1;

/// What a manifest records about one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    pub length_bytes: u64,
    pub sha256: [u8; 32],
}

impl ManifestEntry {
    /// Hashes a file by streaming it (no map, bounded memory).
    pub fn of_file(path: &Path) -> Result<ManifestEntry, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut length_bytes = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(buf.get(..n).unwrap_or_default());
            length_bytes += n as u64;
        }
        Ok(ManifestEntry {
            length_bytes,
            sha256: hasher.finalize().into(),
        })
    }

    /// The entry for bytes held in memory.
    pub fn of_bytes(bytes: &[u8]) -> ManifestEntry {
        ManifestEntry {
            length_bytes: bytes.len() as u64,
            sha256: Sha256::digest(bytes).into(),
        }
    }
}

/// File name (relative to the checkpoint) -> length and SHA-256. See the module docs for the
/// JSON format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    files: BTreeMap<String, ManifestEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    poot_manifest: u64,
    files: ObjectEntries,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    length_bytes: u64,
    sha256: String,
}

impl Manifest {
    pub fn new() -> Manifest {
        Manifest::default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Manifest, LoadError> {
        let raw: RawManifest = serde_json::from_slice(bytes)
            .map_err(|source| IntegrityError::ManifestJson { source })?;
        if raw.poot_manifest != MANIFEST_VERSION {
            return Err(IntegrityError::ManifestVersion {
                found: raw.poot_manifest,
                supported: MANIFEST_VERSION,
            }
            .into());
        }
        if let Some(file) = raw.files.first_repeated_key() {
            return Err(IntegrityError::ManifestRepeatedFile {
                file: file.to_owned(),
            }
            .into());
        }
        let mut manifest = Manifest::new();
        for (file, value) in raw.files.0 {
            let entry: RawEntry =
                serde_json::from_value(value).map_err(|source| IntegrityError::ManifestEntry {
                    file: file.clone(),
                    source,
                })?;
            let sha256 =
                parse_digest(&entry.sha256).ok_or_else(|| IntegrityError::ManifestDigest {
                    file: file.clone(),
                    digest: entry.sha256.clone(),
                })?;
            manifest.insert(
                file,
                ManifestEntry {
                    length_bytes: entry.length_bytes,
                    sha256,
                },
            );
        }
        Ok(manifest)
    }

    /// The manifest as JSON, in the format [`Manifest::from_json`] reads.
    pub fn to_json(&self) -> String {
        let files: serde_json::Map<String, serde_json::Value> = self
            .files
            .iter()
            .map(|(name, e)| {
                let entry = serde_json::json!({ "length_bytes": e.length_bytes, "sha256": hex::encode(e.sha256) });
                (name.clone(), entry)
            })
            .collect();
        let doc = serde_json::json!({ "poot_manifest": MANIFEST_VERSION, "files": files });
        // A `Value` built from strings and integers always serializes.
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }

    pub fn insert(&mut self, file: impl Into<String>, entry: ManifestEntry) {
        self.files.insert(file.into(), entry);
    }

    pub fn get(&self, file: &str) -> Option<&ManifestEntry> {
        self.files.get(file)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ManifestEntry)> {
        self.files.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Records the manifest of everything a load of `path` would read as it is now: for a
    /// directory its weight files and the side files present, for a GGUF the file itself.
    pub fn record(path: &Path) -> Result<Manifest, LoadError> {
        let mut manifest = Manifest::new();
        for name in crate::checkpoint::files_read_by_load(path)? {
            let entry = ManifestEntry::of_file(&crate::checkpoint::file_path(path, &name))?;
            manifest.insert(name, entry);
        }
        Ok(manifest)
    }
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}
