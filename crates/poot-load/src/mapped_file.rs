use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::LoadError;

/// A weight file mapped read-only, named by its path relative to the checkpoint.
pub(crate) struct MappedFile {
    name: String,
    map: Mmap,
}

impl MappedFile {
    pub(crate) fn open(path: &Path, name: String) -> Result<MappedFile, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Like every memory-mapped
        // loader, it assumes no other process truncates or rewrites the checkpoint while it is
        // loaded; with an integrity manifest the mapped bytes are the ones that were hashed.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile { name, map })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}
