//! Everything fetching a model from the Hub can fail with.

use std::path::PathBuf;

/// Why a model could not be fetched from the Hub (or found in its cache).
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The Hub (or `HF_ENDPOINT`) answered that the repository does not exist. Private
    /// repositories answer the same to a request without a token.
    #[error(
        "repository `{repo}` not found on {endpoint} (check the name; a private repository needs HF_TOKEN)"
    )]
    RepoNotFound { repo: String, endpoint: String },
    /// The repository exists but has no such branch, tag or commit.
    #[error("repository `{repo}` has no revision `{revision}`")]
    RevisionNotFound { repo: String, revision: String },
    /// A file the listing named is not there to download.
    #[error("repository `{repo}` has no file `{file}` at revision `{revision}`")]
    EntryNotFound {
        repo: String,
        revision: String,
        file: String,
    },
    /// The repository is gated: its terms must be accepted on the Hub, and the request must
    /// carry the token of an account that did.
    #[error(
        "repository `{repo}` is gated (HTTP {status}): accept its terms on the Hub, then set HF_TOKEN to a token of that account{}",
        token_note(*token_sent)
    )]
    Gated {
        repo: String,
        status: u16,
        token_sent: bool,
    },
    /// The Hub refused the request (401 or 403): the repository needs a token, or a token
    /// with access to it.
    #[error(
        "not authorized to read `{repo}` (HTTP {status}): set HF_TOKEN to a token with access to it{}",
        token_note(*token_sent)
    )]
    Unauthorized {
        repo: String,
        status: u16,
        token_sent: bool,
    },
    /// The endpoint could not be reached (no network, DNS, refused connection, TLS), and the
    /// cache holds no copy of this revision.
    #[error("cannot reach {endpoint} for `{repo}`: {detail}")]
    Unreachable {
        endpoint: String,
        repo: String,
        detail: String,
    },
    /// Another HTTP failure.
    #[error("{url}: HTTP {status}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Http {
        url: String,
        status: u16,
        message: String,
    },
    /// The file listing is not the JSON the Hub's API answers, or names a file outside the
    /// repository (an absolute path, `..`).
    #[error("the file listing of `{repo}` is malformed: {detail}")]
    BadListing { repo: String, detail: String },
    /// The repository holds neither a safetensors checkpoint poot loads (`config.json` with
    /// `model.safetensors` or `model.safetensors.index.json`) nor a GGUF.
    #[error(
        "repository `{repo}` has no checkpoint poot can load: neither config.json with model.safetensors (or its index) nor a .gguf file"
    )]
    NoCheckpoint { repo: String },
    /// `org/name:QUANT` names a quantization the repository has no GGUF of.
    #[error(
        "repository `{repo}` has no GGUF of quantization `{quant}`{}",
        available_note(available)
    )]
    NoSuchQuant {
        repo: String,
        quant: String,
        available: Vec<String>,
    },
    /// The quantization matches several GGUFs.
    #[error("`{quant}` matches several GGUFs of `{repo}`: {}; name the file's quantization exactly", candidates.join(", "))]
    AmbiguousQuant {
        repo: String,
        quant: String,
        candidates: Vec<String>,
    },
    /// The repository has several GGUFs, none of them Q4_K_M (the default), and no
    /// quantization was named.
    #[error("repository `{repo}` has several GGUFs: name one as `{repo}:QUANT` ({})", available.join(", "))]
    QuantNeeded {
        repo: String,
        available: Vec<String>,
    },
    /// A split GGUF is missing parts in the listing.
    #[error("split GGUF `{file}` of `{repo}` lists {found} of its {count} parts")]
    IncompleteSplit {
        repo: String,
        file: String,
        found: usize,
        count: usize,
    },
    /// The shard index is malformed.
    #[error("{file} of `{repo}`: {source}")]
    ShardIndex {
        repo: String,
        file: String,
        source: poot_load::safetensors::ShardIndexError,
    },
    /// The shard index names a shard the repository does not list.
    #[error("the shard index of `{repo}` names `{shard}`, which the repository does not have")]
    MissingShard { repo: String, shard: String },
    /// A downloaded file's length is not the one the listing gives; it was removed.
    #[error(
        "{file}: downloaded {actual_bytes} bytes, the Hub lists {expected_bytes}; the copy was removed, try again"
    )]
    SizeMismatch {
        file: String,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    /// A downloaded LFS file's SHA-256 is not the one the listing gives; it was removed.
    #[error("{file}: SHA-256 {actual}, the Hub lists {expected}; the copy was removed, try again")]
    DigestMismatch {
        file: String,
        expected: String,
        actual: String,
    },
    /// The branch moved to another commit while files were downloading.
    #[error(
        "`{repo}` revision `{revision}` moved from {listed} to {served} during the download; try again"
    )]
    RevisionMoved {
        repo: String,
        revision: String,
        listed: String,
        served: String,
    },
    /// Offline (`HF_HUB_OFFLINE`, or the endpoint unreachable) and the cache holds no complete
    /// copy of this revision.
    #[error("`{repo}` revision `{revision}` is not in the cache at {} and the Hub is not asked{}", cache.display(), if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    NotCached {
        repo: String,
        revision: String,
        cache: PathBuf,
        detail: String,
    },
    /// The download itself failed in `hf-hub` (a header missing, a lock held, a write).
    #[error("downloading {file} of `{repo}`: {detail}")]
    Download {
        repo: String,
        file: String,
        detail: String,
    },
    /// The HTTP client could not be set up (its TLS configuration).
    #[error("setting up the Hub client: {detail}")]
    Client { detail: String },
    /// A cache file or folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No cache folder: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME is set.
    #[error("cannot find the Hugging Face cache: set HF_HUB_CACHE or HF_HOME (or HOME)")]
    NoCacheDir,
}

fn token_note(sent: bool) -> &'static str {
    if sent {
        " (the token sent was refused)"
    } else {
        " (no token was sent)"
    }
}

fn available_note(available: &[String]) -> String {
    if available.is_empty() {
        " (it has no GGUF files)".to_owned()
    } else {
        format!(" (available: {})", available.join(", "))
    }
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> HubError {
        HubError::Io {
            path: path.into(),
            source,
        }
    }
}
