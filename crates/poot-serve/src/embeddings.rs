//! POST /v1/embeddings over an encoder model (`--embedding-model`): its own thread owns a
//! `SentenceEncoder` on its own executor, so embedding never waits for a generation step.
//! Vectors are mean-pooled and L2-normalized (sentence-transformers' recipe).

use std::path::Path;
use std::sync::{Arc, mpsc};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{LoadOptions, ModelHandle, OpenedExecutor, SentenceEncoder};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::{ApiError, ServeError};
use crate::http::{App, parse};
use crate::openai::{
    Embedding, EmbeddingInput, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage,
};

/// Most inputs one request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, ApiError>>,
}

/// The handlers' side of the embedding thread.
pub struct Embedder {
    model_id: String,
    handle: Arc<ModelHandle>,
    max_tokens: usize,
    jobs: mpsc::Sender<Job>,
}

impl Embedder {
    /// Loads the encoder on its thread, prepared for `rows` texts per step and inputs of up to
    /// `max_tokens` tokens.
    pub fn start(
        path: &Path,
        model_id: String,
        open: impl FnOnce() -> Result<OpenedExecutor, ServeError> + Send + 'static,
        rows: usize,
        max_tokens: Option<usize>,
        options: LoadOptions,
    ) -> Result<Embedder, ServeError> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Arc<ModelHandle>, ServeError>>();
        let owned = path.to_path_buf();
        std::thread::Builder::new()
            .name("poot-embed".to_owned())
            .spawn(move || {
                let loaded = open().and_then(|opened| {
                    SentenceEncoder::load_with(
                        &owned,
                        opened.executor,
                        rows,
                        max_tokens.unwrap_or(usize::MAX),
                        &options,
                    )
                    .map_err(|source| ServeError::Encoder {
                        path: owned.clone(),
                        source: Box::new(source),
                    })
                });
                let mut encoder = match loaded {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(Arc::clone(encoder.handle())));
                while let Ok(job) = rx.recv() {
                    let result = embed(&mut encoder, &job.texts, rows);
                    let _ = job.reply.send(result);
                }
            })
            .map_err(|source| ServeError::Io {
                what: "starting the embedding thread".to_owned(),
                source,
            })?;
        let handle = ready_rx.recv().map_err(|_| ServeError::EngineGone)??;
        // The encoder prepares lengths up to the model's positions, its largest bucket (512),
        // and `max_tokens`.
        let max_tokens = handle
            .config()
            .max_positions
            .min(512)
            .min(max_tokens.unwrap_or(usize::MAX));
        Ok(Embedder {
            model_id,
            handle,
            max_tokens,
            jobs,
        })
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The longest input in tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }
}

/// Embeds `texts` in steps of `rows`.
fn embed(
    encoder: &mut SentenceEncoder,
    texts: &[String],
    rows: usize,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(rows.max(1)) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let vectors =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| encoder.embed(&refs)))
                .map_err(|_| ApiError::engine("the encoder panicked"))?
                .map_err(|e| ApiError::engine(format!("the encoder failed: {e}")))?;
        if vectors.len() != chunk.len() {
            return Err(ApiError::engine(format!(
                "the encoder returned {} vectors for {} texts",
                vectors.len(),
                chunk.len()
            )));
        }
        out.extend(vectors);
    }
    Ok(out)
}

pub async fn embeddings(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse(body)?;
    let Some(embedder) = app.embedder.as_ref().filter(|e| e.model_id == req.model) else {
        return Err(if req.model == app.model_id {
            ApiError::invalid(
                format!(
                    "`{}` is a generation model; start the server with --embedding-model to serve embeddings",
                    req.model
                ),
                Some("model"),
            )
        } else {
            ApiError::unknown_model(&req.model, &app.served())
        });
    };
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_value(
                "encoding_format",
                format!("encoding_format `{other}` (expected float or base64)"),
            ));
        }
    };
    let hidden = embedder.handle.config().hidden_size;
    if let Some(d) = req.dimensions
        && d != hidden as i64
    {
        return Err(ApiError::invalid_value(
            "dimensions",
            format!("this model's embeddings have {hidden} dimensions, not {d}"),
        ));
    }
    let texts = match req.input {
        EmbeddingInput::Text(s) => vec![s],
        EmbeddingInput::Texts(v) => v,
        EmbeddingInput::Other(v) => {
            let kind = if v.is_array() {
                "token ids"
            } else {
                "neither text nor texts"
            };
            return Err(ApiError::invalid(
                format!("input is {kind}: embeddings take a string or an array of strings"),
                Some("input"),
            ));
        }
    };
    if texts.is_empty() || texts.len() > MAX_INPUTS {
        return Err(ApiError::invalid_value(
            "input",
            format!("input must hold 1 to {MAX_INPUTS} texts"),
        ));
    }
    let tokenizer = embedder
        .handle
        .text()
        .map_err(|e| ApiError::engine(format!("the embedding model has no tokenizer: {e}")))?;
    let mut tokens = 0;
    for (i, t) in texts.iter().enumerate() {
        if t.is_empty() {
            return Err(ApiError::invalid_value(
                "input",
                format!("input[{i}] is empty"),
            ));
        }
        let n = tokenizer
            .encode(t)
            .map_err(|e| {
                ApiError::invalid(format!("could not tokenize input[{i}]: {e}"), Some("input"))
            })?
            .len();
        if n > embedder.max_tokens {
            return Err(ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::invalid(
                    format!(
                        "input[{i}] is {n} tokens; this embedding model takes at most {}",
                        embedder.max_tokens
                    ),
                    Some("input"),
                )
            });
        }
        tokens += n;
    }
    let (reply, answer) = oneshot::channel();
    embedder
        .jobs
        .send(Job { texts, reply })
        .map_err(|_| ApiError::engine("the embedding thread has stopped"))?;
    let vectors = answer
        .await
        .map_err(|_| ApiError::engine("the embedding thread has stopped"))??;
    app.metrics.embedding_tokens.inc_by(tokens as u64);
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            object: "embedding",
            index,
            embedding: embedding_value(&v, base64),
        })
        .collect();
    Ok(axum::Json(EmbeddingResponse {
        object: "list",
        data,
        model: embedder.model_id.clone(),
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response())
}

/// A vector as the response carries it: a list of floats, or base64 of its little-endian bytes.
fn embedding_value(v: &[f32], base64: bool) -> Value {
    if base64 {
        Value::String(base64_f32(v))
    } else {
        Value::from(v.to_vec())
    }
}

/// Standard base64 (with padding) of the vector as little-endian f32, as OpenAI sends it.
fn base64_f32(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{base64_f32, embedding_value};

    #[test]
    fn base64_matches_the_standard_alphabet() {
        // 1.0f32 = 00 00 80 3f; 2.0 = 00 00 00 40 (Python: base64.b64encode(struct.pack("<2f", 1, 2))).
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(base64_f32(&[]), "");
    }

    #[test]
    fn floats_go_out_as_a_json_list() {
        let v = embedding_value(&[0.5, -0.25], false);
        assert_eq!(v, serde_json::json!([0.5, -0.25]));
        assert_eq!(embedding_value(&[1.0], true), serde_json::json!("AACAPw=="));
    }
}
