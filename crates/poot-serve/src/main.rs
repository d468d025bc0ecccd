//! `poot-serve`: loads a model, starts the engine thread that owns its driver (and, with
//! `--embedding-model`, an encoder thread), then serves the OpenAI-compatible routes until
//! interrupted. Prints `listening on http://ADDR` on stdout once it accepts connections.

mod chat;
mod checkpoint;
mod cli;
mod completions;
mod embeddings;
mod engine;
mod error;
mod guided;
mod http;
mod lora;
mod messages;
mod metrics;
mod openai;
mod params;
mod reply;
mod rerank;
mod responses;
mod rows;
mod tokenize;
mod tool_calls;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use poot_llm::capacity::Planner;
use poot_llm::{
    BackendChoice, Driver, DriverOptions, Layout, LoadOptions, ModelHandle, OpenedExecutor,
    Placement, open_executor, open_placed_executor,
};
use poot_models::{KvType, ModelKind, Program, Registry, Stage};

use crate::cli::{BackendArg, PrepareArg, ServeArgs};
use crate::embeddings::Embedder;
use crate::engine::Engine;
use crate::error::ServeError;
use crate::http::App;
use crate::metrics::Metrics;
use crate::rerank::Reranker;
use crate::tool_calls::ToolSyntax;

/// The context when `--ctx-size` is not given (capped by the model's positions).
const DEFAULT_CONTEXT: usize = 2048;
/// The largest default prefill chunk.
const DEFAULT_PREFILL_CHUNK: usize = 512;
/// Prompt tokens a step may feed besides its decoding rows, unless --max-num-batched-tokens
/// says otherwise.
const DEFAULT_BATCHED_TOKENS: usize = 2048;

fn main() {
    let args = ServeArgs::parse();
    if args.placement().devices() > 1 {
        // NCCL's settings (NVLink multicast off), before any thread that could read the
        // environment starts; a value the caller set stays.
        for (key, value) in poot_llm::backend::GROUP_ENV_DEFAULTS {
            if std::env::var_os(key).is_none() {
                // SAFETY: the process is still single-threaded here.
                unsafe { std::env::set_var(key, value) };
            }
        }
    }
    // Quiets the Vulkan probes' "XDG_RUNTIME_DIR is invalid or not set" on headless machines.
    if let Some(dir) = poot_llm::backend::private_runtime_dir() {
        // SAFETY: the process is still single-threaded here.
        unsafe { std::env::set_var(poot_llm::backend::RUNTIME_DIR_ENV, dir) };
    }
    if let Err(e) = serve(args) {
        eprintln!("poot-serve: {e}");
        std::process::exit(1);
    }
}

fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let metrics =
        Arc::new(Metrics::new().map_err(|e| ServeError::Options(format!("metrics: {e}")))?);
    let model = checkpoint::locate("--model", &args.model, &args.revision)?;
    let handle = load(&model.path, model.verify(args.verify.as_deref()))?;
    let model_id = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| model.default_id.clone());
    let max_positions = handle.config().max_positions;
    let context = match args.ctx_size {
        Some(c) if c as usize > max_positions => {
            return Err(ServeError::Options(format!(
                "--ctx-size {c} exceeds the model's {max_positions} positions"
            )));
        }
        Some(c) => c as usize,
        None => DEFAULT_CONTEXT.min(max_positions),
    };
    // Rotary tables for the context served, not for the one the checkpoint declares.
    let mut handle = handle;
    handle
        .narrow_positions(context)
        .map_err(|source| ServeError::Load {
            path: model.path.clone(),
            source: Box::new(source),
        })?;
    let handle = Arc::new(handle);
    let prefill_chunk = match args.prefill_chunk {
        Some(c) if c as usize > context => {
            return Err(ServeError::Options(format!(
                "--prefill-chunk {c} exceeds the context of {context}"
            )));
        }
        Some(c) => c as usize,
        None => DEFAULT_PREFILL_CHUNK.min(context),
    };
    let placement = args.placement();
    if let Placement::Pipeline { stages } = placement {
        // More stages than layers fails before the devices open.
        Stage::new(0, stages)
            .and_then(|s| s.layers(handle.config().n_layers))
            .map_err(|e| ServeError::Options(format!("--pipeline-stages {stages}: {e}")))?;
    }
    let rows = args.parallel as usize;
    let block_tokens = args.block_size as usize;
    let kv_blocks = args.kv_blocks;
    // Checked here so a bad flag fails before the device opens; sized again once it has.
    layout(rows, context, block_tokens, kv_blocks, None)?;
    let weight_bytes = handle.store().total_bytes();
    let fit_handle = Arc::clone(&handle);
    let mut options = DriverOptions::new(context, prefill_chunk)
        .with_rows(rows)
        .with_chain(args.decode_chain as usize)
        .with_speculation(args.speculation())
        .with_lora(args.lora())
        .with_kv_type(args.kv_type);
    // Adapters named at start are read now, so a bad one fails before the device opens.
    let start_loras = args
        .loras
        .iter()
        .map(|(name, path)| {
            poot_models::LoraAdapter::read(path)
                .map(|a| (name.clone(), a))
                .map_err(|source| ServeError::Lora {
                    path: path.clone(),
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let lora_names: Vec<String> = start_loras.iter().map(|(n, _)| n.clone()).collect();
    // The draft model, loaded now (a bad path fails before the device opens) and served on the
    // engine thread with the target's layout.
    let draft_handle = match &args.draft_model {
        Some(path) => {
            let mut draft = load(path, None)?;
            draft
                .narrow_positions(context)
                .map_err(|source| ServeError::Load {
                    path: path.clone(),
                    source: Box::new(source),
                })?;
            Some(Arc::new(draft))
        }
        None => None,
    };
    // By default several prompts' chunks share a step (as vLLM's 2048-token budget does), so a
    // burst of prompts waits for fewer decode steps between its chunks.
    let batched = args
        .max_num_batched_tokens
        .map_or(DEFAULT_BATCHED_TOKENS.max(prefill_chunk) + rows, |t| {
            t as usize
        });
    options = options.with_max_batched_tokens(batched);
    let backend = args.backend;
    let prepare = args.prepare_variants;
    let engine_handle = Arc::clone(&handle);
    let started = Instant::now();
    let engine = Engine::spawn(
        move || {
            let opened = open_placed(backend, placement)?;
            eprintln!("backend {} on {}", opened.backend, opened.device_name);
            // A device that reports no memory size is not capped.
            let target = opened.executor.target();
            let fit = blocks_on_every_device(
                &fit_handle,
                target,
                placement,
                block_tokens,
                weight_bytes,
                options.kv_type,
            )?;
            let layout = layout(rows, context, block_tokens, kv_blocks, fit)?;
            eprintln!(
                "KV {layout:?} ({fit:?} blocks of {block_tokens} positions fit each device's memory)"
            );
            let mut driver = Driver::placed(engine_handle, opened.executor, placement, options)?
                .serve(layout)
                .map_err(|refused| ServeError::Driver(refused.1))?;
            if let Some(draft) = draft_handle {
                let opened = open(backend)?;
                let draft_options = DriverOptions::new(context, prefill_chunk)
                    .with_rows(rows)
                    .with_kv_type(options.kv_type);
                let draft = Driver::new(draft, opened.executor, draft_options)?
                    .serve(layout)
                    .map_err(|refused| ServeError::Driver(refused.1))?;
                driver.attach_draft(draft)?;
                eprintln!(
                    "draft model on {}: {} drafted tokens per verification step",
                    opened.device_name, options.speculation.tokens
                );
            }
            for (name, adapter) in &start_loras {
                driver.load_lora(name, adapter)?;
                eprintln!("LoRA adapter `{name}` loaded (rank {})", adapter.rank);
            }
            if prepare == PrepareArg::Start {
                driver.warm_all();
            }
            let p = driver.preparation();
            eprintln!(
                "prepared {} step variants (tracing {:.2} s, planning, compiling and recording {:.2} s); {} more are prepared while idle or when first needed",
                p.entries,
                p.trace_seconds,
                p.compile_seconds,
                driver.pending_entries()
            );
            Ok(driver)
        },
        args.max_queue as usize,
        prepare == PrepareArg::Idle,
        Arc::clone(&metrics),
    )?;
    eprintln!(
        "engine ready: {model_id}, {rows} rows of {context} positions, prefill chunk {prefill_chunk}, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let embedder = match &args.embedding_model {
        Some(name) => {
            let started = Instant::now();
            let encoder = checkpoint::locate("--embedding-model", name, "main")?;
            let id = args
                .embedding_model_name
                .clone()
                .unwrap_or_else(|| encoder.default_id.clone());
            let options = load_options(encoder.verify(args.embedding_verify.as_deref()))?;
            let e = Embedder::start(
                &encoder.path,
                id,
                move || open(backend),
                args.embedding_batch as usize,
                args.embedding_max_tokens.map(|t| t as usize),
                options,
            )?;
            eprintln!(
                "embedding model ready: {} (inputs up to {} tokens) in {:.1} s",
                e.model_id(),
                e.max_tokens(),
                started.elapsed().as_secs_f64()
            );
            Some(e)
        }
        None => None,
    };
    let reranker = match &args.rerank_model {
        Some(name) => {
            let started = Instant::now();
            let model = checkpoint::locate("--rerank-model", name, "main")?;
            let id = args
                .rerank_model_name
                .clone()
                .unwrap_or_else(|| model.default_id.clone());
            let options = load_options(model.verify(args.rerank_verify.as_deref()))?;
            let r = Reranker::start(
                &model.path,
                id,
                move || open(backend),
                args.rerank_batch as usize,
                options,
            )?;
            eprintln!(
                "rerank model ready: {} (pairs up to {} tokens) in {:.1} s",
                r.model_id(),
                r.max_tokens(),
                started.elapsed().as_secs_f64()
            );
            Some(r)
        }
        None => None,
    };
    // A template that shows no call syntax gets the generic one (described in the prompt).
    let tool_syntax = handle.text().ok().map(|t| {
        ToolSyntax::detect(t.chat_templates().iter().map(|c| c.source()), t.tokenizer())
            .unwrap_or_else(ToolSyntax::generic)
    });
    if let Some(s) = &tool_syntax {
        eprintln!("tool calls are read in the {:?} syntax", s.format);
    }
    // Guided decoding's token trie (one pass over the vocabulary), built off the request path
    // so the first guided request does not wait on it; a failure shows on that request.
    if handle.text().is_ok() {
        let warm = Arc::clone(&handle);
        std::thread::spawn(move || {
            let _ = warm.guides();
        });
    }
    let app = Arc::new(App {
        model_id,
        handle,
        engine,
        context,
        default_max_tokens: args.default_max_tokens.max(1) as usize,
        api_key: args
            .api_key
            .clone()
            .or_else(|| std::env::var("POOT_API_KEY").ok())
            .filter(|k| !k.is_empty()),
        metrics,
        embedder,
        reranker,
        tool_syntax,
        created: http::unix_now(),
        loras: std::sync::RwLock::new(lora_names),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io {
            what: "starting the async runtime".to_owned(),
            source,
        })?;
    runtime.block_on(listen(app, &args.host, args.port))
}

async fn listen(app: Arc<App>, host: &str, port: u16) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|source| ServeError::Io {
            what: format!("binding {host}:{port}"),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Io {
        what: "reading the bound address".to_owned(),
        source,
    })?;
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    axum::serve(listener, http::router(app))
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|source| ServeError::Io {
            what: "serving".to_owned(),
            source,
        })
}

/// Bytes of keys and values one position of one sequence takes (every layer).
fn kv_bytes_per_position(handle: &ModelHandle, kv_type: KvType) -> u64 {
    handle
        .model()
        .schema()
        .program(Program::Step)
        .map_or(0, |p| {
            p.states
                .iter()
                .map(|s| (s.heads * s.head_dim * kv_type.bytes()) as u64)
                .sum()
        })
}

/// KV blocks of `per_block` bytes that fit the device beside the weights: 90% of its memory,
/// less the weights and 1 GiB for the steps' scratch.
fn blocks_that_fit(memory_bytes: u64, weight_bytes: u64, per_block: u64) -> usize {
    let budget = (memory_bytes / 10 * 9)
        .saturating_sub(weight_bytes)
        .saturating_sub(1 << 30);
    usize::try_from(budget / per_block.max(1)).unwrap_or(usize::MAX)
}

/// KV blocks of `block_tokens` positions that fit on every device of `placement` (each like
/// `target`) beside its weights: alone, the whole store's `weight_bytes` and every layer's
/// cache; in a group, each device's weights and share of a block as the capacity planner fits
/// them. `None` when the device reports no memory size (not capped).
fn blocks_on_every_device(
    handle: &ModelHandle,
    target: &poot_graph_plan::Target,
    placement: Placement,
    block_tokens: usize,
    weight_bytes: u64,
    kv_type: KvType,
) -> Result<Option<usize>, ServeError> {
    let Some(memory) = target.limits.memory_bytes else {
        return Ok(None);
    };
    if placement == Placement::Single {
        let per_block = kv_bytes_per_position(handle, kv_type).saturating_mul(block_tokens as u64);
        return Ok(Some(blocks_that_fit(memory, weight_bytes, per_block)));
    }
    let targets = vec![target.clone(); placement.devices()];
    let planner = Planner::new(handle, &targets, placement, kv_type)?;
    Ok(planner
        .devices()
        .iter()
        .map(|d| {
            let per_block = d.kv_bytes_per_position.saturating_mul(block_tokens as u64);
            blocks_that_fit(memory, d.weight_bytes, per_block)
        })
        .min())
}

/// One row needs no block tables; several share a paged pool, by default with enough blocks
/// for every row at full context, or as many as `fit` the device when that is fewer (plus the
/// pool's scratch block); a request then waits for blocks.
fn layout(
    rows: usize,
    context: usize,
    block_tokens: usize,
    kv_blocks: Option<u32>,
    fit: Option<usize>,
) -> Result<Layout, ServeError> {
    if rows == 1 && kv_blocks.is_none() {
        return Ok(Layout::Contiguous);
    }
    if !context.is_multiple_of(block_tokens) {
        return Err(ServeError::Options(format!(
            "the context ({context}) must be a multiple of --block-size ({block_tokens})"
        )));
    }
    let per_row = context / block_tokens;
    let blocks = match kv_blocks {
        Some(b) => b as usize,
        None => (rows * per_row).min(fit.unwrap_or(usize::MAX).saturating_sub(1)),
    };
    if blocks < per_row {
        let why = match kv_blocks {
            Some(_) => format!("--kv-blocks {blocks}"),
            None => format!("the device's memory ({blocks} blocks after the weights)"),
        };
        return Err(ServeError::Options(format!(
            "{why} cannot hold one sequence of {context} positions ({per_row} blocks of {block_tokens})"
        )));
    }
    Ok(Layout::Paged {
        block_tokens,
        blocks: blocks + 1,
    })
}

/// Resolves on SIGINT or SIGTERM: the server stops accepting and lets open requests finish.
async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    eprintln!("shutting down");
}

/// Load options checking the checkpoint against `verify`'s manifest, when given.
fn load_options(verify: Option<&Path>) -> Result<LoadOptions, ServeError> {
    match verify {
        None => Ok(LoadOptions::default()),
        Some(manifest) => {
            poot_llm::handle::verifying(manifest).map_err(|source| ServeError::Load {
                path: manifest.to_path_buf(),
                source: Box::new(source),
            })
        }
    }
}

/// Loads the generation model at `path`, checked against `verify`'s manifest when given.
fn load(path: &Path, verify: Option<&Path>) -> Result<ModelHandle, ServeError> {
    let started = Instant::now();
    let registry = Registry::builtin().map_err(|e| ServeError::Load {
        path: path.to_path_buf(),
        source: Box::new(poot_llm::HandleError::Model(e)),
    })?;
    let options = load_options(verify)?;
    let handle =
        ModelHandle::load(path, &registry, &options).map_err(|source| ServeError::Load {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
    if handle.config().kind == ModelKind::Encoder {
        return Err(ServeError::Model {
            path: path.to_path_buf(),
            why: "an encoder cannot generate; pass it as --embedding-model".to_owned(),
        });
    }
    if let Err(e) = handle.text() {
        return Err(ServeError::Model {
            path: path.to_path_buf(),
            why: e.to_string(),
        });
    }
    eprintln!(
        "loaded {} ({}, {} layers) in {:.1} s",
        path.display(),
        handle.config().family,
        handle.config().n_layers,
        started.elapsed().as_secs_f64()
    );
    Ok(handle)
}

fn choice(backend: BackendArg) -> BackendChoice {
    match backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Wgpu => BackendChoice::Wgpu,
        BackendArg::Ptx => BackendChoice::Ptx,
        BackendArg::Cpu => BackendChoice::Cpu,
        BackendArg::Rocm => BackendChoice::Rocm,
        BackendArg::Vulkan => BackendChoice::Vulkan,
    }
}

fn open(backend: BackendArg) -> Result<OpenedExecutor, ServeError> {
    Ok(open_executor(choice(backend))?)
}

/// The devices `placement` spans: one, or a group.
fn open_placed(backend: BackendArg, placement: Placement) -> Result<OpenedExecutor, ServeError> {
    Ok(open_placed_executor(choice(backend), placement)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_holds_every_row_unless_the_device_memory_caps_it() {
        let paged = |blocks| Layout::Paged {
            block_tokens: 16,
            blocks,
        };
        // 4 rows of 256 positions: 64 blocks and the scratch block.
        assert_eq!(layout(4, 256, 16, None, None).unwrap(), paged(65));
        assert_eq!(layout(4, 256, 16, None, Some(1000)).unwrap(), paged(65));
        // Room for 41 blocks: 40 and the scratch block; requests wait for blocks.
        assert_eq!(layout(4, 256, 16, None, Some(41)).unwrap(), paged(41));
        // Not even one sequence fits: refused, naming the memory.
        let e = layout(4, 256, 16, None, Some(10)).unwrap_err();
        assert!(e.to_string().contains("memory"), "{e}");
        // An explicit --kv-blocks wins over the estimate.
        assert_eq!(layout(4, 256, 16, Some(20), Some(5)).unwrap(), paged(21));
        assert_eq!(
            layout(1, 256, 16, None, Some(5)).unwrap(),
            Layout::Contiguous
        );
    }

    #[test]
    fn a_pipeline_fits_each_stages_share_of_a_block_beside_its_weights() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat");
        let handle = load(&dir, None).unwrap();
        let gib = 1u64 << 30;
        let mut target = poot_graph_plan::Target::ptx_preset();
        target.limits.memory_bytes = Some(2 * gib);
        let weights = handle.store().total_bytes();
        // tiny-chat: 2 layers of 2 key/value heads of 16, f32 keys and values: 512 B per
        // position, 8 KiB per block of 16; 0.8 GiB usable of 2 GiB less 1 GiB of scratch.
        let usable = 2 * gib / 10 * 9 - gib;
        let f32_kv = KvType::F32;
        let one = blocks_on_every_device(&handle, &target, Placement::Single, 16, weights, f32_kv)
            .unwrap()
            .unwrap();
        assert_eq!(one as u64, (usable - weights) / 8192);
        // f16 keys and values: twice the blocks.
        let half = blocks_on_every_device(
            &handle,
            &target,
            Placement::Single,
            16,
            weights,
            KvType::F16,
        )
        .unwrap()
        .unwrap();
        assert_eq!(half as u64, (usable - weights) / 4096);
        // Each of two stages holds one layer's half of every block, beside its weights.
        let pp = Placement::Pipeline { stages: 2 };
        let planner = Planner::new(&handle, &[target.clone(), target.clone()], pp, f32_kv).unwrap();
        let heaviest = planner
            .devices()
            .iter()
            .map(|d| d.weight_bytes)
            .max()
            .unwrap();
        let two = blocks_on_every_device(&handle, &target, pp, 16, weights, f32_kv)
            .unwrap()
            .unwrap();
        assert_eq!(two as u64, (usable - heaviest) / 4096);
        assert!(two > one);
        // No memory size: not capped.
        target.limits.memory_bytes = None;
        assert_eq!(
            blocks_on_every_device(&handle, &target, pp, 16, weights, f32_kv).unwrap(),
            None
        );
    }

    #[test]
    fn blocks_fit_in_ninety_percent_of_memory_beside_the_weights_and_scratch() {
        let gib = 1u64 << 30;
        // 10 GiB: 9 GiB usable, less 2 GiB of weights and 1 GiB of scratch = 6 GiB.
        assert_eq!(blocks_that_fit(10 * gib, 2 * gib, gib / 4), 24);
        assert_eq!(blocks_that_fit(gib, 2 * gib, 1024), 0);
        // A zero block size counts as one byte; 9 GiB usable less 1 GiB of scratch.
        assert_eq!(
            blocks_that_fit(10 * gib, 0, 0) as u64,
            10 * gib / 10 * 9 - gib
        );
    }
}
