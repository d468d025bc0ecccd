//! Everything `poot` can fail with. `main` prints one `error: ...` line and exits nonzero.

use std::io;
use std::path::{Path, PathBuf};

use poot_llm::{BackendError, DriverError, EncoderError, HandleError};
use poot_models::ModelError;
use poot_text::{ChatError, TokenizerError};

use crate::fetch::FetchError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The `--lora` adapter could not be read.
    #[error("LoRA adapter {}: {source}", path.display())]
    Lora {
        path: PathBuf,
        source: poot_models::LoraError,
    },
    /// MODEL is neither an existing path nor a packaged name.
    #[error(
        "no model `{name}`: it is not a file or directory, nor a packaged checkpoint (packaged: {known}; see `poot models`)"
    )]
    UnknownModel { name: String, known: String },
    /// MODEL looks like a path (it has a `/` or a `.gguf` ending) and nothing is there.
    #[error("no such file or directory: {}", path.display())]
    MissingPath { path: PathBuf },
    /// A name given to `poot models` is not packaged.
    #[error("no packaged checkpoint `{name}` (packaged: {known})")]
    UnknownPackaged { name: String, known: String },
    /// MODEL names something that does not generate text (an embedding model).
    #[error(
        "`{name}` is a {kind} model and cannot generate text; `poot run` needs a text-generation model (packaged: {known})"
    )]
    NotAGenerator {
        name: String,
        kind: &'static str,
        known: String,
    },
    /// A Hugging Face Hub repository could not be fetched (or found in the cache).
    #[error("{source}")]
    Hub {
        repo: String,
        source: Box<poot_hub::HubError>,
    },
    /// Neither POOT_CACHE nor HOME says where the cache is.
    #[error("cannot find the model cache: set POOT_CACHE (or HOME)")]
    NoCacheDir,
    /// Fetching a packaged checkpoint failed.
    #[error("fetching `{name}`: {source}")]
    Fetch { name: String, source: FetchError },
    /// The built-in family registry failed to build.
    #[error("model registry: {0}")]
    Registry(ModelError),
    /// The checkpoint could not be loaded.
    #[error("{}", load_message(path, source))]
    Load {
        path: PathBuf,
        source: Box<HandleError>,
    },
    /// `--verify`'s manifest could not be read or parsed.
    #[error("--verify {}: {source}", path.display())]
    Manifest {
        path: PathBuf,
        source: Box<HandleError>,
    },
    /// The checkpoint has no tokenizer.
    #[error("{}: {source}", path.display())]
    Text {
        path: PathBuf,
        source: Box<HandleError>,
    },
    /// Chat needs a template and the checkpoint ships none.
    #[error(
        "{} has no chat template, so it cannot chat; give a PROMPT without --chat/--system for plain completion",
        path.display()
    )]
    NoChatTemplate { path: PathBuf },
    /// The chat template failed to render the conversation.
    #[error("the chat template failed: {0}")]
    Chat(#[from] ChatError),
    /// The prompt could not be tokenized.
    #[error("tokenizing the prompt: {0}")]
    Tokenize(#[from] TokenizerError),
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// `--prompt-file` could not be read as text.
    #[error("reading the prompt file {}: {source}", path.display())]
    PromptFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A `--json-schema` or `--grammar` file could not be read, or the schema is not JSON.
    #[error("reading {flag} {}: {reason}", path.display())]
    GuideFile {
        flag: &'static str,
        path: std::path::PathBuf,
        reason: String,
    },
    /// `--capacity` is above what the model was built for.
    #[error("--capacity {capacity} exceeds the model's {max_positions} positions")]
    CapacityOverModel {
        capacity: usize,
        max_positions: usize,
    },
    /// The prompt plus `--max-new` do not fit the model at all.
    #[error(
        "the prompt ({prompt} tokens) plus --max-new {max_new} need {} positions, more than the model's {max_positions}; shorten the prompt or lower --max-new",
        prompt + max_new
    )]
    PromptOverModel {
        prompt: usize,
        max_new: usize,
        max_positions: usize,
    },
    /// The prompt plus `--max-new` do not fit the KV cache.
    #[error(
        "the prompt ({prompt} tokens) plus --max-new {max_new} need {} positions, more than the capacity of {capacity}; raise --capacity or lower --max-new",
        prompt + max_new
    )]
    PromptOverCapacity {
        prompt: usize,
        max_new: usize,
        capacity: usize,
    },
    /// `--prefill-chunk` is larger than the capacity.
    #[error("--prefill-chunk {chunk} is larger than the capacity of {capacity}")]
    ChunkOverCapacity { chunk: usize, capacity: usize },
    /// `--logit-bias` was given more often than the driver takes.
    #[error("--logit-bias given {given} times; at most {max} tokens can be biased")]
    TooManyLogitBiases { given: usize, max: usize },
    /// `--stop ""`: an empty stop string would end generation before its first token.
    #[error("--stop is empty; a stop string needs at least one character")]
    EmptyStop,
    /// `--top-k` above what the device draws from: it would be cut to the limit silently.
    #[error(
        "--top-k {given} exceeds the {limit} candidates the device draws from (use 0..={limit})"
    )]
    TopKOverLimit { given: u32, limit: usize },
    /// `--logit-bias` names a token outside the model's vocabulary.
    #[error("--logit-bias names token {id}, but the model's token ids are below {vocab}")]
    LogitBiasToken { id: u32, vocab: usize },
    /// No executor could be opened on the chosen backend.
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// The driver refused the model or failed while generating.
    #[error("{0}")]
    Driver(#[from] DriverError),
    /// Reading the conversation from stdin failed.
    #[error("reading stdin: {0}")]
    Stdin(io::Error),
    /// `poot bench`'s prompt plus new tokens do not fit the model or the capacity.
    #[error(
        "--prompt-tokens {prompt} plus --gen-tokens {generate} need {needed} positions, more than {limit} ({what})"
    )]
    BenchSize {
        prompt: usize,
        generate: usize,
        needed: usize,
        limit: usize,
        what: &'static str,
    },
    /// A benchmark run ended before its tokens (it ignores end-of-text, so this is a bug).
    #[error("a benchmark run generated {got} of {want} tokens")]
    BenchShort { got: usize, want: usize },
    /// MODEL names a text-generation model where an embedding model is needed.
    #[error(
        "`{name}` is a text-generation model; `poot embed` needs a sentence-embedding model (packaged: {known})"
    )]
    NotAnEncoder { name: String, known: String },
    /// The rerank query leaves no room for a document within the model's positions.
    #[error(
        "the query is {tokens} tokens with the pair's special tokens; this cross-encoder takes at most {max_tokens} to leave room for a document"
    )]
    QueryTooLong { tokens: usize, max_tokens: usize },
    /// A packaged name where a cross-encoder is needed (none is packaged).
    #[error(
        "`{name}` is a packaged model but not a cross-encoder; `poot rerank` needs a cross-encoder checkpoint (a directory or a Hugging Face repository such as cross-encoder/ms-marco-MiniLM-L6-v2)"
    )]
    NotACrossEncoder { name: String },
    /// The embedding model could not be loaded or run.
    #[error("{0}")]
    Encoder(#[from] EncoderError),
    /// A checkpoint's sentence-transformers file is not valid JSON.
    #[error("{}: {reason}", path.display())]
    SentenceConfig { path: PathBuf, reason: String },
}

/// "cannot load PATH: why", naming the path once (most load errors name it already).
fn load_message(path: &Path, source: &HandleError) -> String {
    let why = source.to_string();
    let shown = path.display().to_string();
    if why.contains(&shown) {
        format!("cannot load the model: {why}")
    } else {
        format!("cannot load {shown}: {why}")
    }
}
