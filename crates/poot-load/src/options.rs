use crate::manifest::Manifest;

/// How to load a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// When set, every file the load reads must be listed in the manifest with its length and
    /// SHA-256. Weight files are checked before any tensor is read; side files are hashed once
    /// and parsed from the same bytes. An unlisted or mismatching file fails the load.
    pub integrity: Option<Manifest>,
}
