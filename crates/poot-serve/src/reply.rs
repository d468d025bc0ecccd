//! Turning a job's events into an answer: collected into one body, or streamed as server-sent
//! events (`data: {chunk}` lines, then `data: [DONE]`). A route supplies how its chunks look
//! ([`Chunks`]); the rest is shared.
//!
//! A streamed reply waits for its first event before answering, so a request the engine refuses
//! at admission still gets its 4xx status. An error after that ends the stream with an
//! `{"error": ...}` event, as vLLM does.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use poot_llm::{ModelHandle, TokenLogprob};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Event, Finish};
use crate::error::ApiError;
use crate::openai::{Envelope, TopLogprob, Usage};

/// What every body of one reply repeats: its id, creation time and model, and whether its
/// stream chunks carry a usage field.
pub struct Heading {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
}

impl Heading {
    /// One stream chunk of `object` with `choices` (`usage` only on the closing chunk).
    pub fn chunk<C: Serialize>(
        &self,
        object: &'static str,
        choices: Vec<C>,
        usage: Option<Usage>,
    ) -> Value {
        let body = Envelope {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        };
        serde_json::to_value(body).unwrap_or(Value::Null)
    }

    /// The whole, non-streamed reply.
    pub fn whole<C: Serialize>(
        self,
        object: &'static str,
        choices: Vec<C>,
        usage: Usage,
    ) -> Response {
        axum::Json(Envelope {
            id: self.id,
            object,
            created: self.created,
            model: self.model,
            choices,
            usage: Some(Some(usage)),
        })
        .into_response()
    }
}

/// One generated token as a choice keeps it.
#[derive(Clone, Debug)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: Option<TokenLogprob>,
}

/// One choice, collected.
#[derive(Clone, Debug, Default)]
pub struct ChoiceOut {
    pub text: String,
    pub tokens: Vec<TokenOut>,
    pub finish: Option<Finish>,
}

/// Waits for every choice to end. `None` from the channel means the engine is gone.
pub async fn collect(
    mut rx: UnboundedReceiver<Event>,
    choices: usize,
) -> Result<(Vec<ChoiceOut>, usize), ApiError> {
    let mut out = vec![ChoiceOut::default(); choices];
    let mut completion_tokens = 0;
    let mut open = choices;
    while open > 0 {
        let event = rx
            .recv()
            .await
            .ok_or_else(|| ApiError::engine("the engine stopped"))?;
        match event {
            Event::Token {
                choice,
                id,
                text,
                logprob,
            } => {
                if let Some(c) = out.get_mut(choice) {
                    c.text.push_str(&text);
                    c.tokens.push(TokenOut { id, logprob });
                }
            }
            Event::Done {
                choice,
                text,
                finish,
                completion_tokens: n,
                ..
            } => {
                if let Some(c) = out.get_mut(choice)
                    && c.finish.is_none()
                {
                    c.text.push_str(&text);
                    c.finish = Some(finish);
                    completion_tokens += n;
                    open -= 1;
                }
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Ok((out, completion_tokens))
}

/// How a route's stream chunks look.
pub trait Chunks: Send + 'static {
    /// Chunks before any token (the chat role, an echoed prompt).
    fn opening(&mut self) -> Vec<Value>;
    /// A token's chunk, or none when it adds nothing a client sees.
    fn token(
        &mut self,
        choice: usize,
        id: u32,
        text: &str,
        logprob: Option<&TokenLogprob>,
    ) -> Option<Value>;
    /// The chunk that ends a choice.
    fn done(&mut self, choice: usize, text: &str, finish: Finish) -> Value;
    /// The closing usage chunk (`stream_options.include_usage`).
    fn usage(&self, usage: Usage) -> Value;
}

struct Streaming<C> {
    rx: UnboundedReceiver<Event>,
    chunks: C,
    first: Option<Event>,
    out: VecDeque<SseEvent>,
    open: usize,
    usage: Usage,
    include_usage: bool,
    ended: bool,
}

impl<C: Chunks> Streaming<C> {
    fn push(&mut self, v: Value) {
        self.out.push_back(SseEvent::default().data(v.to_string()));
    }

    fn on(&mut self, event: Event) {
        match event {
            Event::Token {
                choice,
                id,
                text,
                logprob,
            } => {
                if let Some(v) = self.chunks.token(choice, id, &text, logprob.as_ref()) {
                    self.push(v);
                }
            }
            Event::Done {
                choice,
                text,
                finish,
                completion_tokens,
                ..
            } => {
                let v = self.chunks.done(choice, &text, finish);
                self.push(v);
                self.usage.add(0, completion_tokens);
                self.open = self.open.saturating_sub(1);
                if self.open == 0 {
                    if self.include_usage {
                        let v = self.chunks.usage(self.usage);
                        self.push(v);
                    }
                    self.out.push_back(SseEvent::default().data("[DONE]"));
                    self.ended = true;
                }
            }
            Event::Failed(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: ApiError) {
        self.push(e.body());
        self.out.push_back(SseEvent::default().data("[DONE]"));
        self.ended = true;
    }
}

/// Streams a job's events. Waits for the first event, so an admission refusal is answered
/// with its status instead of a stream.
pub async fn stream<C: Chunks>(
    mut rx: UnboundedReceiver<Event>,
    mut chunks: C,
    choices: usize,
    prompt_tokens: usize,
    include_usage: bool,
) -> Response {
    let first = match rx.recv().await {
        Some(Event::Failed(e)) => return e.into_response(),
        Some(event) => event,
        None => return ApiError::engine("the engine stopped").into_response(),
    };
    let opening = chunks.opening();
    let mut state = Streaming {
        rx,
        chunks,
        first: Some(first),
        out: VecDeque::new(),
        open: choices,
        usage: Usage::default(),
        include_usage,
        ended: false,
    };
    state.usage.add(prompt_tokens, 0);
    for v in opening {
        state.push(v);
    }
    let events = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.out.pop_front() {
                return Some((Ok::<_, Infallible>(e), st));
            }
            if st.ended {
                return None;
            }
            let next = match st.first.take() {
                Some(e) => Some(e),
                None => st.rx.recv().await,
            };
            match next {
                Some(event) => st.on(event),
                None => st.fail(ApiError::engine("the engine stopped")),
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A token's text as OpenAI's log-probability records spell it, and its bytes.
pub fn token_text(handle: &ModelHandle, id: u32) -> (String, Vec<u8>) {
    let bytes = handle
        .text()
        .ok()
        .and_then(|t| t.tokenizer().token_to_piece(id, false).ok())
        .unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// The alternatives of a token's record, most likely first.
pub fn alternatives(handle: &ModelHandle, lp: &TokenLogprob) -> Vec<TopLogprob> {
    lp.top
        .iter()
        .map(|&(id, logprob)| {
            let (token, bytes) = token_text(handle, id);
            TopLogprob {
                token,
                logprob,
                bytes,
            }
        })
        .collect()
}
