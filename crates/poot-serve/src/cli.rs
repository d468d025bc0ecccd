//! The command line. Flag names follow llama-server and vLLM where they agree (`--host`,
//! `--port`, `--api-key`), and accept the other's spelling as an alias where they differ
//! (`--ctx-size`/`--max-model-len`, `--parallel`/`--max-num-seqs`).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use poot_models::KvType;

const LONG_ABOUT: &str = "\
An OpenAI-compatible HTTP server over one poot engine.

  poot-serve --model ~/.cache/poot/models/smollm2-135m-instruct-q4_1.gguf --port 8080
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"model\": \"smollm2-135m-instruct-q4_1\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'

Routes: POST /v1/completions, POST /v1/chat/completions (both with \"stream\": true for
server-sent events), POST /v1/messages, POST /v1/responses, GET /v1/models, POST /v1/embeddings
(with --embedding-model), POST /v1/rerank and /v1/score (with --rerank-model), POST /tokenize,
POST /detokenize, GET /health, GET /metrics/prometheus.

One engine thread owns the model: requests wait in a queue until a sequence row is free, and
every open sequence advances in each step. A client that disconnects frees its row.";

/// Which GPU runtime runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// PTX if a CUDA device opens, else wgpu on a hardware GPU, else the CPU.
    Auto,
    /// Vulkan through wgpu (software Vulkan included).
    Wgpu,
    /// NVIDIA through PTX.
    Ptx,
    /// The host CPU (kernels compiled by the system's C compiler).
    Cpu,
    /// AMD GPUs through ROCm (HSA and hipRTC); planned and compiled in CI, not yet run on an
    /// AMD GPU.
    Rocm,
    /// Any Vulkan device through raw Vulkan (ash; software Vulkan included). Never picked by
    /// auto.
    Vulkan,
}

/// When the engine prepares its step variants (row-count buckets of the decode step, prompt
/// chunk sizes, sampling heads) beyond the decode step over every row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrepareArg {
    /// Ready at once; idle time prepares the rest, and a step needing one prepares it.
    Idle,
    /// All before the server is ready (slowest start, no preparation later).
    Start,
    /// Only when a step first needs one.
    FirstUse,
}

#[derive(Debug, Parser)]
#[command(name = "poot-serve", version, about = "An OpenAI-compatible HTTP server over one poot engine", long_about = LONG_ABOUT)]
pub struct ServeArgs {
    /// The generation model: a GGUF file, a Hugging Face checkpoint directory, or a Hugging
    /// Face Hub repository (org/name, or org/name:QUANT for one of its GGUFs), fetched into the
    /// Hub's cache (HF_HUB_CACHE, else $HF_HOME/hub; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE).
    #[arg(short, long, value_name = "MODEL")]
    pub model: String,

    /// The Hub revision (branch, tag or commit) of --model when it is a repository.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub revision: String,

    /// The model id clients name in requests (default: the repository id of a Hub model, else
    /// the file or directory name without its extension).
    #[arg(long, value_name = "NAME", alias = "alias")]
    pub served_model_name: Option<String>,

    /// Check every file the generation model's load reads against this integrity manifest (a
    /// poot manifest: each file's length and SHA-256) before any tensor is read.
    #[arg(long, value_name = "MANIFEST")]
    pub verify: Option<PathBuf>,

    /// The same check for the embedding model's files (--embedding-model).
    #[arg(long, value_name = "MANIFEST", requires = "embedding_model")]
    pub embedding_verify: Option<PathBuf>,

    /// An encoder checkpoint (a BERT-family directory such as all-MiniLM-L6-v2, or a Hub
    /// repository at its main revision) that serves POST /v1/embeddings.
    #[arg(long, value_name = "MODEL")]
    pub embedding_model: Option<String>,

    /// The embedding model's id (default: its directory name).
    #[arg(long, value_name = "NAME")]
    pub embedding_model_name: Option<String>,

    /// Most texts one embedding step encodes; a request with more is encoded in several steps.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub embedding_batch: u32,

    /// Longest embedding input in tokens (longer inputs are refused); default: the encoder's
    /// positions.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub embedding_max_tokens: Option<u32>,

    /// A cross-encoder checkpoint (a BERT sequence classifier with one label, such as
    /// cross-encoder/ms-marco-MiniLM-L6-v2; a directory or a Hub repository at its main
    /// revision) that serves POST /v1/rerank and /v1/score.
    #[arg(long, value_name = "MODEL")]
    pub rerank_model: Option<String>,

    /// The rerank model's id (default: its repository id, or its directory name).
    #[arg(long, value_name = "NAME")]
    pub rerank_model_name: Option<String>,

    /// Check the rerank model's files against this integrity manifest (as --verify does).
    #[arg(long, value_name = "MANIFEST", requires = "rerank_model")]
    pub rerank_verify: Option<PathBuf>,

    /// Most (query, document) pairs one rerank step scores; more run in several steps.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub rerank_batch: u32,

    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on (0 picks a free one; the bound address is printed on stdout).
    #[arg(long, value_name = "PORT", default_value_t = 8080)]
    pub port: u16,

    /// The GPU runtime.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    /// Split the model over the first N CUDA devices as one tensor-parallel group (NCCL; the
    /// ptx backend): each GPU holds its share of every layer's heads and feed-forward and of
    /// the KV cache. 1 runs on one device without NCCL.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub tensor_parallel: u32,

    /// Run the model as a layer pipeline over the first N CUDA devices (NCCL; the ptx
    /// backend): each GPU holds consecutive layers and their KV cache (the first also the
    /// embedding, the last the final norm and the head). At most the model's layer count; not
    /// with --tensor-parallel. 1 runs on one device without NCCL.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64), conflicts_with = "tensor_parallel")]
    pub pipeline_stages: u32,

    /// KV positions per sequence: prompt plus generated tokens (default: the smaller of 2048
    /// and the model's positions).
    #[arg(short = 'c', long, value_name = "N", alias = "max-model-len", value_parser = clap::value_parser!(u32).range(1..))]
    pub ctx_size: Option<u32>,

    /// Sequences decoded together (rows); further requests wait in the queue. Above 1 the KV
    /// cache is the paged pool, which needs a family that traces the paged layout.
    #[arg(long, value_name = "N", alias = "max-num-seqs", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub parallel: u32,

    /// Positions per KV block; the context must be a multiple of it.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub block_size: u32,

    /// What the KV cache stores: f32, or f16 (half the memory, so twice the blocks; keys and
    /// values rounded to f16 as written).
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub kv_type: KvType,

    /// KV blocks in the pool (default: enough for every row at full context). Fewer blocks
    /// admit fewer long sequences at once; a request waits until its blocks are free.
    #[arg(long, value_name = "N", alias = "num-gpu-blocks-override", value_parser = clap::value_parser!(u32).range(1..))]
    pub kv_blocks: Option<u32>,

    /// Decode steps the device runs per host wait while every row is decoding (streamed text
    /// arrives in bursts of this many tokens); 1 waits after every token.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub decode_chain: u32,

    /// Speculative decoding by prompt lookup: draft the tokens that followed the latest earlier
    /// occurrence of a sequence's last 1 to 4 tokens, and verify --spec-tokens of them in one
    /// step. A request sends `"speculative": false` to decode one token a step.
    #[arg(long)]
    pub spec_ngram: bool,

    /// Speculative decoding with a draft model (a GGUF file or a Hugging Face directory) whose
    /// tokenizer is the model's (refused otherwise); it decodes greedily on the same backend
    /// with a KV cache of the same layout. With --spec-ngram it drafts where lookup finds
    /// nothing.
    #[arg(long, value_name = "PATH")]
    pub draft_model: Option<PathBuf>,

    /// Drafted tokens one verification step checks (with --spec-ngram or --draft-model).
    #[arg(long, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub spec_tokens: u32,

    /// The largest prompt chunk one prefill runs (default: the smaller of 512 and the context
    /// size); a prompt's last piece runs as the smallest power-of-two chunk that holds it,
    /// reaching back over positions already written.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill_chunk: Option<u32>,

    /// Tokens one engine step may feed: a token for every decoding row, then prompt chunks
    /// from waiting prompts up to this budget, each prompt at most one chunk a step (default:
    /// 2048 or the prefill chunk if larger, plus --parallel), so a long prompt stalls running
    /// streams by at most one chunk, and a burst of prompts by at most the budget.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_num_batched_tokens: Option<u32>,

    /// When step variants are prepared.
    #[arg(long, value_enum, default_value_t = PrepareArg::Idle)]
    pub prepare_variants: PrepareArg,

    /// Requests that may wait for a row; one more is answered 503 at once.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_queue: u32,

    /// Require `Authorization: Bearer KEY` on /v1 routes (also read from POOT_API_KEY).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,

    /// max_tokens when a completion request names none (OpenAI's default is 16); chat
    /// requests without one may fill the context.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub default_max_tokens: u32,

    /// A PEFT LoRA adapter directory loaded at start, served as model NAME (repeatable).
    /// Adapters load and unload at run time too (POST /v1/load_lora_adapter and
    /// /v1/unload_lora_adapter) when --max-loras is given.
    #[arg(long = "lora", value_name = "NAME=PATH", value_parser = parse_lora)]
    pub loras: Vec<(String, std::path::PathBuf)>,

    /// LoRA adapters held at once (compiled into every step; default: the --lora count).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_loras: Option<u32>,

    /// The largest LoRA rank an adapter may have.
    #[arg(long, value_name = "R", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_lora_rank: u32,
}

fn parse_lora(s: &str) -> Result<(String, std::path::PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_owned(), path.into()))
        }
        _ => Err(format!("`{s}` is not NAME=PATH")),
    }
}

impl ServeArgs {
    /// Where the driver places the generating model.
    pub fn placement(&self) -> poot_llm::Placement {
        poot_llm::Placement::from_counts(
            self.tensor_parallel as usize,
            self.pipeline_stages as usize,
        )
    }
}

impl ServeArgs {
    /// The LoRA tables every step carries, when adapters are asked for.
    pub fn lora(&self) -> Option<poot_models::LoraShape> {
        let max_loras = self
            .max_loras
            .map(|n| n as usize)
            .or((!self.loras.is_empty()).then_some(self.loras.len()))?;
        Some(poot_models::LoraShape::new(
            max_loras,
            self.max_lora_rank as usize,
        ))
    }

    /// The driver's speculation settings (off unless a draft source is named).
    pub fn speculation(&self) -> poot_llm::Speculation {
        if !self.spec_ngram && self.draft_model.is_none() {
            return poot_llm::Speculation::OFF;
        }
        poot_llm::Speculation {
            tokens: self.spec_tokens as usize,
            lookup: self.spec_ngram.then(poot_llm::PromptLookup::default),
        }
    }
}
