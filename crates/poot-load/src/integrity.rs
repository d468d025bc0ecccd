//! Checks a load's files against an optional [`Manifest`].

use sha2::{Digest, Sha256};

use crate::LoadError;
use crate::manifest::{Manifest, ManifestEntry};

/// A manifest that cannot be read, or a checkpoint file that does not match it.
#[derive(Debug, thiserror::Error)]
pub enum IntegrityError {
    /// The manifest is not JSON of the documented shape (`poot_manifest`, `files`).
    #[error("the manifest is not a poot manifest: {source}")]
    ManifestJson {
        #[source]
        source: serde_json::Error,
    },

    /// The manifest's format version is not one this build reads.
    #[error(
        "manifest format version {found} is not supported (this build reads version {supported})"
    )]
    ManifestVersion { found: u64, supported: u64 },

    /// The manifest lists one file twice.
    #[error("the manifest lists `{file}` twice")]
    ManifestRepeatedFile { file: String },

    /// One file's entry lacks `length_bytes` or `sha256`, or has another field.
    #[error("the manifest entry for `{file}` is malformed: {source}")]
    ManifestEntry {
        file: String,
        #[source]
        source: serde_json::Error,
    },

    /// A digest is not 64 lowercase hex digits.
    #[error("the manifest digest for `{file}` is not 64 lowercase hex digits: `{digest}`")]
    ManifestDigest { file: String, digest: String },

    /// The load would read a file the manifest does not list. List it (with its length and
    /// SHA-256) or remove it from the checkpoint.
    #[error("`{file}` is read by the load but not listed in the integrity manifest")]
    Unlisted { file: String },

    /// A file's length differs from the manifest's.
    #[error("`{file}` is {actual_bytes} B, the manifest says {expected_bytes} B")]
    LengthMismatch {
        file: String,
        expected_bytes: u64,
        actual_bytes: u64,
    },

    /// A file's SHA-256 differs from the manifest's: the file was modified or corrupted.
    #[error("`{file}` has SHA-256 {actual_sha256}, the manifest says {expected_sha256}")]
    DigestMismatch {
        file: String,
        expected_sha256: String,
        actual_sha256: String,
    },
}

/// Checks files against the manifest, or passes everything when there is none.
#[derive(Clone, Copy)]
pub(crate) struct Verifier<'a> {
    manifest: Option<&'a Manifest>,
}

impl<'a> Verifier<'a> {
    pub(crate) fn new(manifest: Option<&'a Manifest>) -> Verifier<'a> {
        Verifier { manifest }
    }

    /// The manifest entry for a file the load is about to read; refuses an unlisted file.
    fn entry(&self, file: &str) -> Result<Option<&'a ManifestEntry>, LoadError> {
        match self.manifest {
            None => Ok(None),
            Some(m) => m.get(file).map(Some).ok_or_else(|| {
                IntegrityError::Unlisted {
                    file: file.to_owned(),
                }
                .into()
            }),
        }
    }

    /// Checks a file's length before it is read or mapped.
    pub(crate) fn check_length(&self, file: &str, actual_bytes: u64) -> Result<(), LoadError> {
        if let Some(e) = self.entry(file)?
            && e.length_bytes != actual_bytes
        {
            return Err(IntegrityError::LengthMismatch {
                file: file.to_owned(),
                expected_bytes: e.length_bytes,
                actual_bytes,
            }
            .into());
        }
        Ok(())
    }

    /// Checks a file's bytes (length, then SHA-256).
    pub(crate) fn check_bytes(&self, file: &str, bytes: &[u8]) -> Result<(), LoadError> {
        self.check_length(file, bytes.len() as u64)?;
        if let Some(e) = self.entry(file)? {
            let actual: [u8; 32] = Sha256::digest(bytes).into();
            if actual != e.sha256 {
                return Err(IntegrityError::DigestMismatch {
                    file: file.to_owned(),
                    expected_sha256: hex::encode(e.sha256),
                    actual_sha256: hex::encode(actual),
                }
                .into());
            }
        }
        Ok(())
    }
}
