//! Every shipped family's tiny deterministic checkpoint, keyed by family (and variant). The
//! checkpoints are random-weight `transformers` models written by
//! `scripts/ref/models/gen_random_checkpoints.py`, committed under `tests/fixtures/random/`.

use std::path::PathBuf;

/// One family's fixture.
#[derive(Clone, Copy, Debug)]
pub struct FamilyFixture {
    /// The family key as `ModelConfig::family` reports it (`bert/cross_encoder` for a variant).
    pub family: &'static str,
    /// The checkpoint directory, relative to the `poot-models` crate.
    pub dir: &'static str,
}

pub const FIXTURES: &[FamilyFixture] = &[
    FamilyFixture {
        family: "llama",
        dir: "tests/fixtures/random/llama",
    },
    FamilyFixture {
        family: "qwen2",
        dir: "tests/fixtures/random/qwen2",
    },
    FamilyFixture {
        family: "qwen3",
        dir: "tests/fixtures/random/qwen3",
    },
    FamilyFixture {
        family: "mixtral",
        dir: "tests/fixtures/random/mixtral",
    },
    FamilyFixture {
        family: "qwen3moe",
        dir: "tests/fixtures/random/qwen3moe",
    },
    FamilyFixture {
        family: "gemma3",
        dir: "tests/fixtures/random/gemma3",
    },
    FamilyFixture {
        family: "bert",
        dir: "tests/fixtures/random/bert",
    },
    FamilyFixture {
        family: "bert/cross_encoder",
        dir: "tests/fixtures/random/bert_cross_encoder",
    },
    FamilyFixture {
        family: "olmoe",
        dir: "tests/fixtures/random/olmoe",
    },
    FamilyFixture {
        family: "granite",
        dir: "tests/fixtures/random/granite",
    },
    FamilyFixture {
        family: "granitemoe",
        dir: "tests/fixtures/random/granitemoe",
    },
    FamilyFixture {
        family: "gemma2",
        dir: "tests/fixtures/random/gemma2",
    },
    FamilyFixture {
        family: "olmo2",
        dir: "tests/fixtures/random/olmo2",
    },
    FamilyFixture {
        family: "qwen2moe",
        dir: "tests/fixtures/random/qwen2_moe",
    },
    FamilyFixture {
        family: "smollm3",
        dir: "tests/fixtures/random/smollm3",
    },
    FamilyFixture {
        family: "phi3",
        dir: "tests/fixtures/random/phi3",
    },
    FamilyFixture {
        family: "gpt_oss",
        dir: "tests/fixtures/random/gpt_oss",
    },
    FamilyFixture {
        family: "mpt",
        dir: "tests/fixtures/random/mpt",
    },
    FamilyFixture {
        family: "bloom",
        dir: "tests/fixtures/random/bloom",
    },
];

impl FamilyFixture {
    pub fn path(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(self.dir)
    }
}

/// The fixture of `family`.
pub fn fixture(family: &str) -> Option<&'static FamilyFixture> {
    FIXTURES.iter().find(|f| f.family == family)
}
