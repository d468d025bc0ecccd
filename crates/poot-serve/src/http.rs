//! The HTTP front: routes, the API key check on /v1 routes, request counting, and the small
//! routes (models, health, metrics). Generation routes are in `completions`, `chat`,
//! `messages` (Anthropic's API) and `responses`, embeddings in `embeddings`, reranking and
//! scores in `rerank`, the tokenizer routes in `tokenize`.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use poot_llm::ModelHandle;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::embeddings::Embedder;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::openai::{ModelCard, ModelList};
use crate::rerank::Reranker;
use crate::tool_calls::ToolSyntax;

/// What every handler shares.
pub struct App {
    /// The id clients name the generation model by.
    pub model_id: String,
    pub handle: Arc<ModelHandle>,
    pub engine: Engine,
    /// KV positions per sequence.
    pub context: usize,
    /// `max_tokens` of a completion request that names none.
    pub default_max_tokens: usize,
    pub api_key: Option<String>,
    pub metrics: Arc<Metrics>,
    pub embedder: Option<Embedder>,
    pub reranker: Option<Reranker>,
    /// The generation model's tool-call syntax, when its chat templates show one.
    pub tool_syntax: Option<ToolSyntax>,
    /// Unix time the server started (the models' `created`).
    pub created: u64,
    /// The LoRA adapters loaded now, by name.
    pub loras: std::sync::RwLock<Vec<String>>,
}

impl App {
    /// Every model id this server answers to.
    pub fn served(&self) -> Vec<&str> {
        let mut ids = vec![self.model_id.as_str()];
        if let Some(e) = &self.embedder {
            ids.push(e.model_id());
        }
        if let Some(r) = &self.reranker {
            ids.push(r.model_id());
        }
        ids
    }

    /// Refuses a request for a model other than the generation model or one of its loaded
    /// LoRA adapters.
    pub fn check_generation_model(&self, model: &str) -> Result<(), ApiError> {
        if model == self.model_id || self.lora_for(model).is_some() {
            Ok(())
        } else {
            let mut served: Vec<String> = self.served().iter().map(|s| s.to_string()).collect();
            served.extend(self.lora_names());
            let served: Vec<&str> = served.iter().map(String::as_str).collect();
            Err(ApiError::unknown_model(model, &served))
        }
    }

    /// The loaded adapter a request's `model` names, if it names one.
    pub fn lora_for(&self, model: &str) -> Option<String> {
        self.lora_names().into_iter().find(|n| n == model)
    }

    pub fn lora_names(&self) -> Vec<String> {
        self.loras.read().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn add_lora(&self, name: &str) {
        if let Ok(mut l) = self.loras.write()
            && !l.iter().any(|n| n == name)
        {
            l.push(name.to_owned());
        }
    }

    pub fn remove_lora(&self, name: &str) {
        if let Ok(mut l) = self.loras.write() {
            l.retain(|n| n != name);
        }
    }
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/completions", post(crate::completions::completions))
        .route("/v1/chat/completions", post(crate::chat::chat))
        .route("/v1/messages", post(crate::messages::messages))
        .route(
            "/v1/messages/count_tokens",
            post(crate::messages::count_tokens),
        )
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/embeddings", post(crate::embeddings::embeddings))
        .route("/v1/rerank", post(crate::rerank::rerank))
        .route("/v2/rerank", post(crate::rerank::rerank))
        .route("/rerank", post(crate::rerank::rerank))
        .route("/v1/score", post(crate::rerank::score))
        .route("/score", post(crate::rerank::score))
        .route("/v1/load_lora_adapter", post(crate::lora::load))
        .route("/v1/unload_lora_adapter", post(crate::lora::unload))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .route("/metrics/prometheus", get(metrics))
        .route("/metrics", get(metrics))
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&app), front))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(app)
}

/// Every routed request: the API key on /v1 routes, then counting and timing by route (a
/// stream is timed to its first byte).
async fn front(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let started = Instant::now();
    let path = request.uri().path();
    let response = if needs_key(path) && !authorized(app.api_key.as_deref(), request.headers()) {
        if path.starts_with("/v1/messages") {
            ApiError::unauthorized().into_anthropic_response()
        } else {
            ApiError::unauthorized().into_response()
        }
    } else {
        next.run(request).await
    };
    let status = response.status().as_u16().to_string();
    app.metrics
        .requests
        .with_label_values(&[route.as_str(), status.as_str()])
        .inc();
    app.metrics
        .http_seconds
        .with_label_values(&[route.as_str()])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Routes behind the API key: /v1 and /v2, the tokenizer routes and the unversioned rerank and
/// score aliases (health and metrics are open).
fn needs_key(path: &str) -> bool {
    path.starts_with("/v1/")
        || path.starts_with("/v2/")
        || matches!(path, "/tokenize" | "/detokenize" | "/rerank" | "/score")
}

/// Whether the request carries the key: `Authorization: Bearer <key>` (OpenAI's clients) or
/// `x-api-key: <key>` (Anthropic's).
fn authorized(key: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(key) = key else {
        return true;
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    // Compared in time independent of where the first difference is.
    sent.is_some_and(|s| {
        s.len() == key.len()
            && s.bytes()
                .zip(key.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// Parses a JSON body, turning every failure into a 400 with OpenAI's error body.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError {
        status: e.status(),
        ..ApiError::invalid(format!("could not read the request body: {e}"), None)
    })?;
    serde_json::from_slice(&body).map_err(|e| {
        if e.is_data() {
            ApiError::invalid(format!("invalid request: {e}"), None)
        } else {
            ApiError::malformed(format!("the request body is not valid JSON: {e}"))
        }
    })
}

fn card(app: &App, id: &str) -> Option<ModelCard> {
    if app.lora_for(id).is_some() {
        return Some(ModelCard {
            id: id.to_owned(),
            object: "model",
            created: app.created,
            owned_by: "poot",
            max_model_len: Some(app.context),
            parent: Some(app.model_id.clone()),
        });
    }
    let context = if id == app.model_id {
        Some(app.context)
    } else {
        app.embedder
            .as_ref()
            .filter(|e| e.model_id() == id)
            .map(Embedder::max_tokens)
            .or_else(|| {
                app.reranker
                    .as_ref()
                    .filter(|r| r.model_id() == id)
                    .map(Reranker::max_tokens)
            })
    }?;
    Some(ModelCard {
        id: id.to_owned(),
        object: "model",
        created: app.created,
        owned_by: "poot",
        max_model_len: Some(context),
        parent: None,
    })
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let mut ids: Vec<String> = app.served().iter().map(|s| s.to_string()).collect();
    ids.extend(app.lora_names());
    let data = ids.iter().filter_map(|id| card(&app, id)).collect();
    axum::Json(ModelList {
        object: "list",
        data,
    })
    .into_response()
}

async fn model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match card(&app, &id) {
        Some(c) => axum::Json(c).into_response(),
        None => ApiError::unknown_model(&id, &app.served()).into_response(),
    }
}

async fn health(State(app): State<Arc<App>>) -> Response {
    if app.engine.healthy() {
        (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "error", "message": "the engine failed a step"})),
        )
            .into_response()
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

async fn no_route(request: Request) -> Response {
    ApiError::no_route(request.method().as_str(), request.uri().path()).into_response()
}

async fn wrong_method(request: Request) -> Response {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        ..ApiError::invalid(
            format!(
                "{} is not allowed on {}",
                request.method(),
                request.uri().path()
            ),
            None,
        )
    }
    .into_response()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_keys_must_match_exactly() {
        let mut h = HeaderMap::new();
        assert!(authorized(None, &h));
        assert!(!authorized(Some("k1"), &h));
        h.insert(header::AUTHORIZATION, "Bearer k1".parse().expect("ascii"));
        assert!(authorized(Some("k1"), &h));
        assert!(!authorized(Some("k2"), &h));
        assert!(!authorized(Some("k12"), &h));
        h.insert(header::AUTHORIZATION, "Basic k1".parse().expect("ascii"));
        assert!(!authorized(Some("k1"), &h));
        // Anthropic's header.
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().expect("ascii"));
        assert!(authorized(Some("k1"), &h));
        assert!(!authorized(Some("k2"), &h));
        assert!(needs_key("/v1/messages") && needs_key("/tokenize") && !needs_key("/health"));
    }
}
