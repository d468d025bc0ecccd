//! Where a model flag's checkpoint is: an existing path, or a Hugging Face Hub repository
//! (`org/name`, `org/name:QUANT`) fetched into the Hub's shared cache before loading.

use std::path::{Path, PathBuf};

use poot_hub::{Hub, RepoRef};

use crate::error::ServeError;

/// A checkpoint on disk.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    /// The Hub repository's `poot-manifest.json`, when it has one.
    pub manifest: Option<PathBuf>,
    /// The model id clients name when the flags give none: the repository id for a Hub model
    /// (as vLLM serves it), else the file or directory name without its extension.
    pub default_id: String,
}

impl Checkpoint {
    /// The manifest to check the load against: the flag's, else the repository's.
    pub fn verify<'a>(&'a self, flag: Option<&'a Path>) -> Option<&'a Path> {
        flag.or(self.manifest.as_deref())
    }
}

/// The checkpoint `model` (the value of `flag`) names, at Hub revision `revision` when it is a
/// repository.
pub fn locate(flag: &'static str, model: &str, revision: &str) -> Result<Checkpoint, ServeError> {
    let path = Path::new(model);
    if path.exists() {
        return Ok(Checkpoint {
            path: path.to_owned(),
            manifest: None,
            default_id: file_name(path),
        });
    }
    let Some(repo) = RepoRef::parse(model) else {
        return Err(ServeError::Options(format!(
            "{flag} {model}: no such file or directory (nor a Hugging Face repository name)"
        )));
    };
    let wrap = |source| ServeError::Hub {
        flag,
        model: model.to_owned(),
        source: Box::new(source),
    };
    let hub = Hub::from_env().map_err(wrap)?;
    eprintln!(
        "resolving {model} at {revision} on {}",
        hub.settings().endpoint
    );
    let fetched = hub.fetch(&repo, revision, &mut ()).map_err(wrap)?;
    if !fetched.downloaded.is_empty() {
        eprintln!(
            "downloaded {} into {}",
            fetched.downloaded.join(", "),
            hub.settings().cache_dir.display()
        );
    }
    Ok(Checkpoint {
        path: fetched.path,
        manifest: fetched.manifest,
        default_id: repo.repo,
    })
}

/// A file's or directory's name without its extension.
fn file_name(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(|| "model".to_owned(), |n| n.to_string_lossy().into_owned())
}
