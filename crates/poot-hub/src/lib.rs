//! Models from the Hugging Face Hub.
//!
//! A model named `org/name` is fetched with the `hf-hub` crate into the cache the Python
//! `huggingface_hub` shares (`models--org--name/{blobs,refs,snapshots}` under `HF_HUB_CACHE`,
//! by default `$HF_HOME/hub`), so a checkpoint one tool downloaded is found by the other. What is
//! fetched is decided from the repository's file listing (`/api/models/{repo}/revision/{rev}`):
//!
//! - a safetensors checkpoint: `config.json`, the tokenizer and the other side files the loader
//!   reads, and `model.safetensors` or the shards its index names;
//! - a GGUF, chosen by quantization name (`org/name:Q4_K_M`, case-insensitive, as llama.cpp's
//!   `-hf` takes it); a split GGUF (`-00001-of-00003.gguf`) is fetched whole.
//!
//! Every file downloaded is checked against the size the listing gives and, for LFS files,
//! against the SHA-256 it gives; a repository that carries a poot integrity manifest
//! ([`MANIFEST_FILE`]) has it fetched too, for the loader to check every file it reads. Once
//! fetched, a model opens from the cache without the network (and with `HF_HUB_OFFLINE=1`, never
//! asks it).

mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod fetch;
mod listing;
mod progress;
mod repo_ref;
mod select;
mod settings;

pub use error::HubError;
pub use fetch::{Fetched, Hub, MANIFEST_FILE};
pub use listing::{ListedFile, Listing};
pub use progress::DownloadProgress;
pub use repo_ref::RepoRef;
pub use select::{Selection, select};
pub use settings::HubSettings;
