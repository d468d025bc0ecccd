//! Errors: what a request gets back (an OpenAI-style error body with a 4xx or 5xx status), and
//! why the server could not start.

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use poot_llm::DriverError;
use serde_json::json;

/// A request's failure, as OpenAI reports one: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// `invalid_request_error`, `authentication_error`, `server_error`, ...
    pub kind: &'static str,
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A request the server will not run as sent (400).
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// A request field out of its range (400, code `invalid_value`).
    pub fn invalid_value(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("invalid_value"),
            ..ApiError::invalid(message, Some(param))
        }
    }

    /// A body that is not the JSON the route takes (400).
    pub fn malformed(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("invalid_json"),
            ..ApiError::invalid(message, None)
        }
    }

    /// The prompt and the tokens asked for do not fit a sequence's context (400).
    pub fn context(prompt: usize, max_new: usize, context: usize) -> ApiError {
        let message = if prompt >= context {
            format!(
                "This model's maximum context length is {context} tokens. However, your prompt is \
                 {prompt} tokens; please reduce the length of the prompt or messages."
            )
        } else {
            format!(
                "This model's maximum context length is {context} tokens. However, you requested \
                 {} tokens ({prompt} in the prompt, {max_new} in the completion). Please reduce \
                 the length of the prompt or max_tokens.",
                prompt + max_new
            )
        };
        ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(message, Some("messages"))
        }
    }

    /// A model id the server does not serve (404).
    pub fn unknown_model(model: &str, served: &[&str]) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: format!(
                "The model `{model}` does not exist; this server serves: {}",
                served.join(", ")
            ),
            param: Some("model".to_owned()),
            code: Some("model_not_found"),
        }
    }

    /// A missing or wrong API key (401).
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "invalid_request_error",
            message: "Incorrect or missing API key: send `Authorization: Bearer <key>`".to_owned(),
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// A route this server does not have (404).
    pub fn no_route(method: &str, path: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: format!("no route {method} {path}"),
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// The queue is full (503): retry later.
    pub fn overloaded(waiting: usize) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            message: format!("the server is busy: {waiting} requests are waiting; retry later"),
            param: None,
            code: Some("overloaded"),
        }
    }

    /// The engine failed while running the request (500).
    pub fn engine(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A driver refusal at admission: the request's fault (400) unless the engine failed.
    pub fn from_admission(e: &DriverError) -> ApiError {
        match e {
            DriverError::Capacity {
                prompt,
                max_new,
                capacity,
            } => ApiError::context(*prompt, *max_new, *capacity),
            DriverError::EmptyPrompt => ApiError::invalid_value("prompt", "the prompt is empty"),
            DriverError::Sampling(why) => ApiError::invalid(format!("{e}"), sampling_param(why)),
            DriverError::UnknownLora { .. } => crate::lora::driver_error(e),
            DriverError::Guide(poot_llm::GuideError::Invalid { .. }) => {
                ApiError::invalid(e.to_string(), None)
            }
            _ => ApiError::engine(format!("the engine refused the request: {e}")),
        }
    }

    /// The error as Anthropic's API words it: `{"type": "error", "error": {"type", "message"}}`,
    /// the type named for the status.
    pub fn anthropic_body(&self) -> serde_json::Value {
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.message}})
    }

    /// The response for a route that speaks Anthropic's API.
    pub fn into_anthropic_response(self) -> Response {
        (self.status, axum::Json(self.anthropic_body())).into_response()
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// The request field a driver sampling message names (the messages start with the field).
fn sampling_param(why: &str) -> Option<&'static str> {
    [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("min_p", "min_p"),
        ("repetition", "repetition_penalty"),
        ("presence", "presence_penalty"),
        ("logit", "logit_bias"),
        ("top_logprobs", "top_logprobs"),
    ]
    .into_iter()
    .find(|(prefix, _)| why.starts_with(prefix))
    .map(|(_, param)| param)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A `--lora` adapter could not be read.
    #[error("LoRA adapter {path}: {source}")]
    Lora {
        path: PathBuf,
        source: poot_models::LoraError,
    },
    /// The generation model could not be loaded.
    #[error("loading {path}: {source}")]
    Load {
        path: PathBuf,
        source: Box<poot_llm::HandleError>,
    },
    /// The model has no tokenizer or is not a generator.
    #[error("{path}: {why}")]
    Model { path: PathBuf, why: String },
    /// No backend could be opened.
    #[error(transparent)]
    Backend(#[from] poot_llm::BackendError),
    /// The driver refused the options or failed to prepare its entries.
    #[error("preparing the driver: {0}")]
    Driver(#[from] DriverError),
    /// The model does not fit the devices of its placement.
    #[error("placing the model: {0}")]
    Capacity(#[from] poot_llm::capacity::CapacityError),
    /// The embedding model could not be loaded.
    #[error("loading the embedding model {path}: {source}")]
    Encoder {
        path: PathBuf,
        source: Box<poot_llm::EncoderError>,
    },
    /// The rerank model could not be loaded, or is not a one-label cross-encoder.
    #[error("loading the rerank model {path}: {source}")]
    Reranker {
        path: PathBuf,
        source: Box<poot_llm::EncoderError>,
    },
    /// A Hub repository named by a model flag could not be fetched.
    #[error("{flag} {model}: {source}")]
    Hub {
        flag: &'static str,
        model: String,
        source: Box<poot_hub::HubError>,
    },
    /// The flags do not fit the model.
    #[error("{0}")]
    Options(String),
    /// The engine thread ended before it was ready.
    #[error("the engine thread stopped while starting")]
    EngineGone,
    /// The address could not be bound or the server failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}
