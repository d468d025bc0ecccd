//! Fetching a model: list the repository at the revision, choose its files, download each one
//! missing from the cache with `hf-hub`, and check it against the listing.

use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};

use crate::listing::is_commit;
use crate::progress::Forward;
use crate::select::{Weights, shards};
use crate::{
    DownloadProgress, HubError, HubSettings, ListedFile, Listing, RepoRef, Selection, select,
};

/// A poot integrity manifest at a repository's root (the format of
/// `poot_load::Manifest`): fetched with the checkpoint when the repository has one, for the
/// loader to check every file it reads.
pub const MANIFEST_FILE: &str = "poot-manifest.json";

/// A fetched checkpoint, in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// What to load: the snapshot folder of a safetensors checkpoint, or the GGUF file (its
    /// first part, for a split one).
    pub path: PathBuf,
    /// The repository's [`MANIFEST_FILE`], when it has one.
    pub manifest: Option<PathBuf>,
    /// The commit the files are of.
    pub commit: String,
    /// The files downloaded by this call (the others were in the cache).
    pub downloaded: Vec<String>,
    /// Whether the Hub was not asked (offline, or unreachable with the revision cached).
    pub from_cache_only: bool,
}

/// A client of one Hub endpoint and cache.
pub struct Hub {
    settings: HubSettings,
    api: Api,
}

impl Hub {
    pub fn new(settings: HubSettings) -> Result<Hub, HubError> {
        let api = ApiBuilder::from_cache(Cache::new(settings.cache_dir.clone()))
            .with_endpoint(settings.endpoint.clone())
            .with_token(settings.token.clone())
            .with_progress(false)
            .build()
            .map_err(|e| HubError::Client {
                detail: e.to_string(),
            })?;
        Ok(Hub { settings, api })
    }

    /// A client set up from the environment ([`HubSettings::from_env`]).
    pub fn from_env() -> Result<Hub, HubError> {
        Hub::new(HubSettings::from_env()?)
    }

    pub fn settings(&self) -> &HubSettings {
        &self.settings
    }

    /// Fetches the checkpoint `model` names at `revision` (a branch, tag or commit) into the
    /// cache, or finds it there, and says where it is.
    pub fn fetch(
        &self,
        model: &RepoRef,
        revision: &str,
        progress: &mut dyn DownloadProgress,
    ) -> Result<Fetched, HubError> {
        let repo = model.repo.as_str();
        let (listing, online) = if self.settings.offline {
            (
                self.cached_listing(repo, revision, "HF_HUB_OFFLINE is set")?,
                false,
            )
        } else {
            match self.list(repo, revision) {
                Ok(listing) => (listing, true),
                Err(unreachable @ HubError::Unreachable { .. }) => {
                    match self.cached_listing(repo, revision, "") {
                        Ok(listing) => (listing, false),
                        Err(_) => return Err(unreachable),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let mut run = Run {
            hub: self,
            repo,
            revision,
            listing: &listing,
            online,
            progress,
            downloaded: Vec::new(),
        };
        let snapshot = run.snapshot_dir();
        let path = match select(repo, &listing, model.quant.as_deref())? {
            Selection::Safetensors {
                side_files,
                weights,
            } => {
                for file in &side_files {
                    run.ensure(file)?;
                }
                match weights {
                    Weights::Single(file) => {
                        run.ensure(&file)?;
                    }
                    Weights::Sharded { index } => {
                        let index_path = run.ensure(&index)?;
                        let bytes =
                            std::fs::read(&index_path).map_err(|e| HubError::io(&index_path, e))?;
                        for shard in shards(repo, &listing, &bytes)? {
                            run.ensure(&shard)?;
                        }
                    }
                }
                snapshot
            }
            Selection::Gguf { parts, .. } => {
                let mut first = None;
                for part in &parts {
                    let path = run.ensure(part)?;
                    first.get_or_insert(path);
                }
                first.ok_or_else(|| HubError::NoCheckpoint {
                    repo: repo.to_owned(),
                })?
            }
        };
        let manifest = match listing.get(MANIFEST_FILE) {
            Some(_) => Some(run.ensure(MANIFEST_FILE)?),
            None => None,
        };
        Ok(Fetched {
            path,
            manifest,
            commit: listing.commit.clone(),
            downloaded: run.downloaded,
            from_cache_only: !online,
        })
    }

    /// The repository's files at `revision`, from the Hub's API.
    pub fn list(&self, repo: &str, revision: &str) -> Result<Listing, HubError> {
        let response = self
            .api_repo(repo, revision)
            .info_request()
            .query("blobs", "true")
            .call()
            .map_err(|e| self.http_error(e, repo, revision, None))?;
        let mut bytes = Vec::new();
        response
            .into_reader()
            .take(64 << 20)
            .read_to_end(&mut bytes)
            .map_err(|e| HubError::Unreachable {
                endpoint: self.settings.endpoint.clone(),
                repo: repo.to_owned(),
                detail: e.to_string(),
            })?;
        Listing::parse(repo, &bytes)
    }

    /// The files of the cached snapshot `revision` resolves to (a commit's own folder, or the
    /// commit a cached branch or tag last pointed at).
    fn cached_listing(&self, repo: &str, revision: &str, why: &str) -> Result<Listing, HubError> {
        let dir = self.settings.repo_dir(repo);
        let commit = if is_commit(revision) && dir.join("snapshots").join(revision).is_dir() {
            Some(revision.to_owned())
        } else {
            std::fs::read_to_string(dir.join("refs").join(revision))
                .ok()
                .map(|c| c.trim().to_owned())
                .filter(|c| is_commit(c))
        };
        let snapshot = commit
            .as_ref()
            .map(|c| dir.join("snapshots").join(c))
            .filter(|d| d.is_dir());
        match (commit, snapshot) {
            (Some(commit), Some(snapshot)) => Listing::of_snapshot(&commit, &snapshot),
            _ => Err(HubError::NotCached {
                repo: repo.to_owned(),
                revision: revision.to_owned(),
                cache: self.settings.cache_dir.clone(),
                detail: why.to_owned(),
            }),
        }
    }

    fn api_repo(&self, repo: &str, revision: &str) -> hf_hub::api::sync::ApiRepo {
        self.api.repo(Repo::with_revision(
            repo.to_owned(),
            RepoType::Model,
            revision.to_owned(),
        ))
    }

    /// The typed error of a failed request: the Hub's `X-Error-Code` first (`RepoNotFound`,
    /// `RevisionNotFound`, `EntryNotFound`, `GatedRepo`), then the status.
    fn http_error(
        &self,
        err: ureq::Error,
        repo: &str,
        revision: &str,
        file: Option<&str>,
    ) -> HubError {
        let (status, response) = match err {
            ureq::Error::Status(status, response) => (status, response),
            ureq::Error::Transport(t) => {
                return HubError::Unreachable {
                    endpoint: self.settings.endpoint.clone(),
                    repo: repo.to_owned(),
                    detail: t.to_string(),
                };
            }
        };
        let code = response.header("x-error-code").unwrap_or("").to_owned();
        let message = response.header("x-error-message").unwrap_or("").to_owned();
        let token_sent = self.settings.token.is_some();
        match (code.as_str(), status) {
            ("RepoNotFound", _) | ("", 404) if file.is_none() => HubError::RepoNotFound {
                repo: repo.to_owned(),
                endpoint: self.settings.endpoint.clone(),
            },
            ("RevisionNotFound", _) => HubError::RevisionNotFound {
                repo: repo.to_owned(),
                revision: revision.to_owned(),
            },
            ("EntryNotFound", _) | ("", 404) => HubError::EntryNotFound {
                repo: repo.to_owned(),
                revision: revision.to_owned(),
                file: file.unwrap_or_default().to_owned(),
            },
            ("GatedRepo", _) => HubError::Gated {
                repo: repo.to_owned(),
                status,
                token_sent,
            },
            (_, 401 | 403) => HubError::Unauthorized {
                repo: repo.to_owned(),
                status,
                token_sent,
            },
            _ => HubError::Http {
                url: response.get_url().to_owned(),
                status,
                message,
            },
        }
    }

    fn download_error(&self, err: ApiError, repo: &str, revision: &str, file: &str) -> HubError {
        match err {
            ApiError::RequestError(e) => self.http_error(*e, repo, revision, Some(file)),
            ApiError::TooManyRetries(e) => self.download_error(*e, repo, revision, file),
            other => HubError::Download {
                repo: repo.to_owned(),
                file: file.to_owned(),
                detail: other.to_string(),
            },
        }
    }
}

/// One fetch in progress.
struct Run<'a> {
    hub: &'a Hub,
    repo: &'a str,
    revision: &'a str,
    listing: &'a Listing,
    online: bool,
    progress: &'a mut dyn DownloadProgress,
    downloaded: Vec<String>,
}

impl Run<'_> {
    fn snapshots(&self) -> PathBuf {
        self.hub.settings.repo_dir(self.repo).join("snapshots")
    }

    fn snapshot_dir(&self) -> PathBuf {
        self.snapshots().join(&self.listing.commit)
    }

    /// `file` in the snapshot: found there at its listed size, or downloaded and checked.
    fn ensure(&mut self, file: &str) -> Result<PathBuf, HubError> {
        let target = self.snapshot_dir().join(file);
        let listed = self.listing.get(file);
        let cached_len = std::fs::metadata(&target).ok().map(|m| m.len());
        if let Some(len) = cached_len
            && listed
                .and_then(|l| l.size_bytes)
                .is_none_or(|want| want == len)
        {
            return Ok(target);
        }
        if !self.online {
            return Err(HubError::NotCached {
                repo: self.repo.to_owned(),
                revision: self.revision.to_owned(),
                cache: self.hub.settings.cache_dir.clone(),
                detail: format!("{file} is missing"),
            });
        }
        let path = self
            .hub
            .api_repo(self.repo, self.revision)
            .download_with_progress(file, Forward(&mut *self.progress))
            .map_err(|e| self.hub.download_error(e, self.repo, self.revision, file))?;
        if path != target {
            let served = path
                .strip_prefix(self.snapshots())
                .ok()
                .and_then(|p| p.components().next())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            return Err(HubError::RevisionMoved {
                repo: self.repo.to_owned(),
                revision: self.revision.to_owned(),
                listed: self.listing.commit.clone(),
                served,
            });
        }
        if let Some(listed) = listed
            && let Err(e) = check(file, &path, listed)
        {
            remove_download(&path);
            return Err(e);
        }
        self.downloaded.push(file.to_owned());
        Ok(path)
    }
}

/// The downloaded `path` against what the listing says of it: its length, and for an LFS file
/// its SHA-256.
fn check(file: &str, path: &Path, listed: &ListedFile) -> Result<(), HubError> {
    let actual_bytes = std::fs::metadata(path)
        .map_err(|e| HubError::io(path, e))?
        .len();
    if let Some(expected_bytes) = listed.size_bytes
        && expected_bytes != actual_bytes
    {
        return Err(HubError::SizeMismatch {
            file: file.to_owned(),
            expected_bytes,
            actual_bytes,
        });
    }
    if let Some(expected) = &listed.sha256 {
        let actual = sha256_file(path)?;
        if &actual != expected {
            return Err(HubError::DigestMismatch {
                file: file.to_owned(),
                expected: expected.clone(),
                actual,
            });
        }
    }
    Ok(())
}

fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut file = std::fs::File::open(path).map_err(|e| HubError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| HubError::io(path, e))?;
        let Some(bytes) = buf.get(..n).filter(|b| !b.is_empty()) else {
            break;
        };
        hasher.update(bytes);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Removes a download that failed its check: the blob the snapshot links to, and the link.
fn remove_download(path: &Path) {
    // Best effort: what cannot be removed is checked again (and fails again) on the next try.
    if let Ok(blob) = std::fs::canonicalize(path) {
        let _ = std::fs::remove_file(blob);
    }
    let _ = std::fs::remove_file(path);
}
