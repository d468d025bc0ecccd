//! POST /v1/rerank (also /rerank and /v2/rerank) and POST /v1/score (also /score) over a
//! cross-encoder (`--rerank-model`), in the shapes vLLM and llama.cpp's server answer. Its own
//! thread owns a `CrossEncoder` on its own executor, so scoring never waits for a generation
//! step. Pairs are tokenized here (a query too long for the model is a 400 before any work is
//! queued) and scored there.

use std::path::Path;
use std::sync::{Arc, mpsc};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{CrossEncoder, LoadOptions, ModelHandle, OpenedExecutor};
use poot_text::{PairEncoding, TokenizerError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::error::{ApiError, ServeError};
use crate::http::{App, parse};

/// Most documents (or pairs) one request may carry.
const MAX_PAIRS: usize = 1024;

struct Job {
    pairs: Vec<PairEncoding>,
    reply: oneshot::Sender<Result<Vec<f32>, ApiError>>,
}

/// The handlers' side of the reranking thread.
pub struct Reranker {
    model_id: String,
    handle: Arc<ModelHandle>,
    max_tokens: usize,
    jobs: mpsc::Sender<Job>,
}

impl Reranker {
    /// Loads the cross-encoder on its thread, prepared for `rows` pairs per step. A checkpoint
    /// that is not a one-label cross-encoder stops the server here.
    pub fn start(
        path: &Path,
        model_id: String,
        open: impl FnOnce() -> Result<OpenedExecutor, ServeError> + Send + 'static,
        rows: usize,
        options: LoadOptions,
    ) -> Result<Reranker, ServeError> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(Arc<ModelHandle>, usize), ServeError>>();
        let owned = path.to_path_buf();
        std::thread::Builder::new()
            .name("poot-rerank".to_owned())
            .spawn(move || {
                let loaded = open().and_then(|opened| {
                    CrossEncoder::load_with(&owned, opened.executor, rows, usize::MAX, &options)
                        .map_err(|source| ServeError::Reranker {
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
                let _ = ready_tx.send(Ok((Arc::clone(encoder.handle()), encoder.max_tokens())));
                while let Ok(job) = rx.recv() {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        encoder.score_encoded(&job.pairs)
                    }))
                    .map_err(|_| ApiError::engine("the cross-encoder panicked"))
                    .and_then(|r| {
                        r.map_err(|e| ApiError::engine(format!("the cross-encoder failed: {e}")))
                    });
                    let _ = job.reply.send(result);
                }
            })
            .map_err(|source| ServeError::Io {
                what: "starting the reranking thread".to_owned(),
                source,
            })?;
        let (handle, max_tokens) = ready_rx.recv().map_err(|_| ServeError::EngineGone)??;
        Ok(Reranker {
            model_id,
            handle,
            max_tokens,
            jobs,
        })
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The most tokens one (query, document) pair may have.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Tokenizes `pairs` (`param` names the request field of the first texts, `query` or
    /// `text_1`) and scores them on the reranking thread; returns the scores and the tokens.
    async fn score(
        &self,
        pairs: &[(&str, &str)],
        param: &str,
    ) -> Result<(Vec<f32>, usize), ApiError> {
        let text = self
            .handle
            .text()
            .map_err(|e| ApiError::engine(format!("the rerank model has no tokenizer: {e}")))?;
        let mut encoded = Vec::with_capacity(pairs.len());
        for (first, second) in pairs {
            let e = text
                .tokenizer()
                .encode_pair(first, second, self.max_tokens)
                .map_err(|e| match e {
                    TokenizerError::PairFirstTooLong { tokens, max_tokens } => ApiError {
                        code: Some("context_length_exceeded"),
                        ..ApiError::invalid(
                            format!(
                                "{param} is {tokens} tokens with the pair's special tokens; this rerank model takes at most {max_tokens} to leave room for a document"
                            ),
                            Some(param),
                        )
                    },
                    other => ApiError::invalid(format!("could not tokenize a pair: {other}"), Some(param)),
                })?;
            encoded.push(e);
        }
        let tokens = encoded.iter().map(|e| e.ids.len()).sum();
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                pairs: encoded,
                reply,
            })
            .map_err(|_| ApiError::engine("the reranking thread has stopped"))?;
        let scores = answer
            .await
            .map_err(|_| ApiError::engine("the reranking thread has stopped"))??;
        Ok((scores, tokens))
    }
}

/// A document: a string, or an object with its `text` (Cohere's and Jina's shape).
#[derive(Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

impl Document {
    fn text(&self) -> &str {
        match self {
            Document::Text(t) | Document::Object { text: t } => t,
        }
    }
}

#[derive(Deserialize)]
struct RerankRequest {
    model: Option<String>,
    query: String,
    documents: Vec<Document>,
    /// Results to return, best first; 0 or absent: all.
    top_n: Option<usize>,
    /// Whether each result carries its document's text (default true, as vLLM answers).
    return_documents: Option<bool>,
}

#[derive(Serialize)]
struct RerankDocument {
    text: String,
}

#[derive(Serialize)]
struct RerankResult {
    index: usize,
    relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<RerankDocument>,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Serialize)]
struct RerankResponse {
    id: String,
    object: &'static str,
    model: String,
    usage: Usage,
    results: Vec<RerankResult>,
}

/// `text_1` / `text_2`: one text or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Many(Vec<String>),
}

impl Texts {
    fn as_vec(&self) -> Vec<&str> {
        match self {
            Texts::One(t) => vec![t.as_str()],
            Texts::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Deserialize)]
struct ScoreRequest {
    model: Option<String>,
    text_1: Texts,
    text_2: Texts,
}

#[derive(Serialize)]
struct ScoreData {
    index: usize,
    object: &'static str,
    score: f32,
}

#[derive(Serialize)]
struct ScoreResponse {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    data: Vec<ScoreData>,
    usage: Usage,
}

/// The reranker `model` (when the request names one) asks for.
fn reranker<'a>(app: &'a App, model: Option<&str>) -> Result<&'a Reranker, ApiError> {
    if let Some(r) = &app.reranker
        && model.is_none_or(|m| m == r.model_id)
    {
        return Ok(r);
    }
    match model {
        Some(m) if !app.served().contains(&m) => Err(ApiError::unknown_model(m, &app.served())),
        Some(m) => Err(ApiError::invalid(
            format!(
                "`{m}` is not a cross-encoder; start the server with --rerank-model to serve reranking and scores"
            ),
            Some("model"),
        )),
        None => Err(ApiError::invalid(
            "this server has no rerank model; start it with --rerank-model",
            Some("model"),
        )),
    }
}

pub async fn rerank(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match run_rerank(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run_rerank(
    app: &Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: RerankRequest = parse(body)?;
    let r = reranker(app, req.model.as_deref())?;
    if req.documents.is_empty() || req.documents.len() > MAX_PAIRS {
        return Err(ApiError::invalid_value(
            "documents",
            format!("documents must hold 1 to {MAX_PAIRS} texts"),
        ));
    }
    if req.query.is_empty() {
        return Err(ApiError::invalid_value("query", "query is empty"));
    }
    let pairs: Vec<(&str, &str)> = req
        .documents
        .iter()
        .map(|d| (req.query.as_str(), d.text()))
        .collect();
    let (scores, tokens) = r.score(&pairs, "query").await?;
    app.metrics.embedding_tokens.inc_by(tokens as u64);
    let ranked = poot_llm::encoders::rank(&scores);
    let top_n = req.top_n.filter(|&n| n > 0).unwrap_or(ranked.len());
    let with_text = req.return_documents.unwrap_or(true);
    let results = ranked
        .into_iter()
        .take(top_n)
        .map(|ranked| RerankResult {
            index: ranked.index,
            relevance_score: ranked.score,
            document: with_text.then(|| RerankDocument {
                text: req
                    .documents
                    .get(ranked.index)
                    .map(|d| d.text().to_owned())
                    .unwrap_or_default(),
            }),
        })
        .collect();
    Ok(axum::Json(RerankResponse {
        id: format!("rerank-{:016x}", crate::params::fresh_seed()),
        object: "list",
        model: r.model_id.clone(),
        usage: Usage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
        results,
    })
    .into_response())
}

pub async fn score(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match run_score(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// vLLM's pairing: one `text_1` against every `text_2`, or lists of one length paired in order.
async fn run_score(
    app: &Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ScoreRequest = parse(body)?;
    let r = reranker(app, req.model.as_deref())?;
    let (firsts, seconds) = (req.text_1.as_vec(), req.text_2.as_vec());
    if firsts.is_empty() || seconds.is_empty() {
        let param = if firsts.is_empty() {
            "text_1"
        } else {
            "text_2"
        };
        return Err(ApiError::invalid_value(param, format!("{param} is empty")));
    }
    let pairs: Vec<(&str, &str)> = match firsts.as_slice() {
        [one] => seconds.iter().map(|s| (*one, *s)).collect(),
        many if many.len() == seconds.len() => {
            many.iter().copied().zip(seconds.iter().copied()).collect()
        }
        many => {
            return Err(ApiError::invalid_value(
                "text_2",
                format!(
                    "text_1 has {} texts and text_2 {}: give one text_1, or lists of the same length",
                    many.len(),
                    seconds.len()
                ),
            ));
        }
    };
    if pairs.len() > MAX_PAIRS {
        return Err(ApiError::invalid_value(
            "text_2",
            format!("at most {MAX_PAIRS} pairs in one request"),
        ));
    }
    let (scores, tokens) = r.score(&pairs, "text_1").await?;
    app.metrics.embedding_tokens.inc_by(tokens as u64);
    let data = scores
        .into_iter()
        .enumerate()
        .map(|(index, score)| ScoreData {
            index,
            object: "score",
            score,
        })
        .collect();
    Ok(axum::Json(ScoreResponse {
        id: format!("score-{:016x}", crate::params::fresh_seed()),
        object: "list",
        created: crate::http::unix_now(),
        model: r.model_id.clone(),
        data,
        usage: Usage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response())
}
