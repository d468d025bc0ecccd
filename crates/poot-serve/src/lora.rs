//! LoRA administration, as vLLM names it: `POST /v1/load_lora_adapter` `{"lora_name",
//! "lora_path"}` reads a PEFT adapter directory and loads it on the engine thread (in place,
//! between steps), `POST /v1/unload_lora_adapter` `{"lora_name"}` unloads it. A loaded
//! adapter is listed in `/v1/models` and selected by naming it as a request's `model`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use poot_llm::DriverError;
use poot_models::LoraAdapter;
use serde::Deserialize;

use crate::engine::LoraChange;
use crate::error::ApiError;
use crate::http::{App, parse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    lora_name: String,
    lora_path: PathBuf,
    /// vLLM's field for a base model name; only this server's model is accepted.
    #[serde(default)]
    base_model_name: Option<String>,
    /// vLLM's field to replace a loaded adapter of the same name.
    #[serde(default)]
    load_inplace: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnloadRequest {
    lora_name: String,
    #[serde(default)]
    lora_int_id: Option<u64>,
}

pub async fn load(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match run_load(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

pub async fn unload(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match run_unload(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run_load(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: LoadRequest = parse(body)?;
    let name = req.lora_name.trim();
    if name.is_empty() {
        return Err(ApiError::invalid_value("lora_name", "lora_name is empty"));
    }
    if app.served().contains(&name) {
        return Err(ApiError::invalid_value(
            "lora_name",
            format!("`{name}` is the name of a served model"),
        ));
    }
    if let Some(base) = &req.base_model_name
        && base != &app.model_id
    {
        return Err(ApiError::unknown_model(base, &app.served()));
    }
    let path = req.lora_path.clone();
    let adapter = tokio::task::spawn_blocking(move || LoraAdapter::read(&path))
        .await
        .map_err(|e| ApiError::engine(format!("reading the adapter: {e}")))?
        .map_err(|e| {
            ApiError::invalid(
                format!("LoRA adapter {}: {e}", req.lora_path.display()),
                Some("lora_path"),
            )
        })?;
    if req.load_inplace && app.lora_for(name).is_some() {
        unload_on_engine(app, name).await?;
    }
    app.engine
        .change_lora(LoraChange::Load {
            name: name.to_owned(),
            adapter: Box::new(adapter),
        })
        .await?
        .map_err(|e| driver_error(&e))?;
    app.add_lora(name);
    Ok((
        StatusCode::OK,
        format!("Success: LoRA adapter '{name}' added successfully."),
    )
        .into_response())
}

async fn run_unload(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: UnloadRequest = parse(body)?;
    let _ = req.lora_int_id;
    unload_on_engine(app, &req.lora_name).await?;
    Ok((
        StatusCode::OK,
        format!(
            "Success: LoRA adapter '{}' removed successfully.",
            req.lora_name
        ),
    )
        .into_response())
}

async fn unload_on_engine(app: &App, name: &str) -> Result<(), ApiError> {
    app.engine
        .change_lora(LoraChange::Unload {
            name: name.to_owned(),
        })
        .await?
        .map_err(|e| driver_error(&e))?;
    app.remove_lora(name);
    Ok(())
}

/// A driver refusal of a LoRA change or of a request naming an adapter.
pub fn driver_error(e: &DriverError) -> ApiError {
    match e {
        DriverError::UnknownLora { name } => ApiError {
            status: StatusCode::NOT_FOUND,
            code: Some("model_not_found"),
            ..ApiError::invalid(
                format!("no LoRA adapter named `{name}` is loaded"),
                Some("lora_name"),
            )
        },
        DriverError::LoraOff => ApiError::invalid(
            "this server was started without LoRA tables: start it with --max-loras (or --lora)",
            None,
        ),
        DriverError::LoraInUse { .. } => ApiError {
            status: StatusCode::CONFLICT,
            ..ApiError::invalid(e.to_string(), Some("lora_name"))
        },
        DriverError::Lora(_) => ApiError::invalid(e.to_string(), Some("lora_path")),
        DriverError::LoraExists { .. } | DriverError::LoraFull { .. } => {
            ApiError::invalid(e.to_string(), Some("lora_name"))
        }
        _ => ApiError::engine(e.to_string()),
    }
}
