//! `poot-serve`: loads a model, starts the engine thread that owns its driver (and, with
//! `--embedding-model`, an encoder thread), then serves the OpenAI-compatible routes until
//! interrupted. Prints `listening on http://ADDR` on stdout once it accepts connections.

mod chat;
mod cli;
mod completions;
mod embeddings;
mod engine;
mod error;
mod http;
mod metrics;
mod openai;
mod params;
mod reply;
mod rows;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use poot_llm::{
    BackendChoice, Driver, DriverOptions, Layout, LoadOptions, ModelHandle, OpenedExecutor,
    open_executor,
};
use poot_models::{ModelKind, Registry};

use crate::cli::{BackendArg, ServeArgs};
use crate::embeddings::Embedder;
use crate::engine::Engine;
use crate::error::ServeError;
use crate::http::App;
use crate::metrics::Metrics;

/// The context when `--ctx-size` is not given (capped by the model's positions).
const DEFAULT_CONTEXT: usize = 2048;
/// The largest default prefill chunk.
const DEFAULT_PREFILL_CHUNK: usize = 64;

fn main() {
    let args = ServeArgs::parse();
    if let Err(e) = serve(args) {
        eprintln!("poot-serve: {e}");
        std::process::exit(1);
    }
}

fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let metrics =
        Arc::new(Metrics::new().map_err(|e| ServeError::Options(format!("metrics: {e}")))?);
    let handle = load(&args.model)?;
    let model_id = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| model_name(&args.model));
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
    let prefill_chunk = match args.prefill_chunk {
        Some(c) if c as usize > context => {
            return Err(ServeError::Options(format!(
                "--prefill-chunk {c} exceeds the context of {context}"
            )));
        }
        Some(c) => c as usize,
        None => DEFAULT_PREFILL_CHUNK.min(context),
    };
    let rows = args.parallel as usize;
    let layout = layout(rows, context, args.block_size as usize, args.kv_blocks)?;
    let options = DriverOptions::new(context, prefill_chunk)
        .with_rows(rows)
        .with_chain(args.decode_chain as usize);
    let backend = args.backend;
    let engine_handle = Arc::clone(&handle);
    let started = Instant::now();
    let engine = Engine::spawn(
        move || {
            let opened = open(backend)?;
            eprintln!("backend {} on {}", opened.backend, opened.device_name);
            Driver::new(engine_handle, opened.executor, options)?
                .serve(layout)
                .map_err(|refused| ServeError::Driver(refused.1))
        },
        args.max_queue as usize,
        Arc::clone(&metrics),
    )?;
    eprintln!(
        "engine ready: {model_id}, {rows} rows of {context} positions, KV {layout:?}, prefill chunk {prefill_chunk}, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let embedder = match &args.embedding_model {
        Some(path) => {
            let started = Instant::now();
            let id = args
                .embedding_model_name
                .clone()
                .unwrap_or_else(|| model_name(path));
            let e = Embedder::start(
                path,
                id,
                move || open(backend),
                args.embedding_batch as usize,
                args.embedding_max_tokens.map(|t| t as usize),
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
        created: http::unix_now(),
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

/// One row needs no block tables; several share a paged pool, by default with enough blocks
/// for every row at full context (plus the pool's scratch block).
fn layout(
    rows: usize,
    context: usize,
    block_tokens: usize,
    kv_blocks: Option<u32>,
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
    let blocks = kv_blocks.map_or(rows * per_row, |b| b as usize);
    if blocks < per_row {
        return Err(ServeError::Options(format!(
            "--kv-blocks {blocks} cannot hold one sequence of {context} positions ({per_row} blocks of {block_tokens})"
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

fn load(path: &Path) -> Result<Arc<ModelHandle>, ServeError> {
    let started = Instant::now();
    let registry = Registry::builtin().map_err(|e| ServeError::Load {
        path: path.to_path_buf(),
        source: Box::new(poot_llm::HandleError::Model(e)),
    })?;
    let handle = ModelHandle::load(path, &registry, &LoadOptions::default()).map_err(|source| {
        ServeError::Load {
            path: path.to_path_buf(),
            source: Box::new(source),
        }
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
    Ok(Arc::new(handle))
}

fn open(backend: BackendArg) -> Result<OpenedExecutor, ServeError> {
    let choice = match backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Wgpu => BackendChoice::Wgpu,
        BackendArg::Ptx => BackendChoice::Ptx,
    };
    Ok(open_executor(choice)?)
}

/// A checkpoint's default model id: its file or directory name without the extension.
fn model_name(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(|| "model".to_owned(), |n| n.to_string_lossy().into_owned())
}
