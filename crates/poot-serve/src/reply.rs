//! Turning a job's events into an answer: collected into one body, or streamed as server-sent
//! events (OpenAI's `data: {chunk}` lines ending in `data: [DONE]`, or named events as
//! Anthropic's and the Responses API's streams send them). A route supplies how its events look
//! ([`Chunks`]); the rest is shared.
//!
//! A streamed reply waits for its first event before answering, so a request the engine refuses
//! at admission still gets its 4xx status (in the route's error shape). An error after that ends
//! the stream with an error event: OpenAI's routes send `{"error": ...}` then `[DONE]`, as vLLM
//! does; Anthropic's an `error` event; the Responses API's an `error` event with its sequence
//! number.

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
    /// The text the token released (the driver holds text back while it could become a stop).
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// One choice, collected.
#[derive(Clone, Debug, Default)]
pub struct ChoiceOut {
    /// Every token's text and the tail.
    pub text: String,
    pub tokens: Vec<TokenOut>,
    /// Text released at the end that no token carries.
    pub tail: String,
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
                    c.tokens.push(TokenOut { id, text, logprob });
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
                    c.tail = text;
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

/// One server-sent event.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `data: {json}` (OpenAI's chat and completion chunks).
    Data(Value),
    /// `event: {name}` then `data: {json}` (Anthropic's and the Responses API's events).
    Named(&'static str, Value),
    /// `data: [DONE]`, the end of an OpenAI stream.
    Done,
}

impl Frame {
    fn into_sse(self) -> SseEvent {
        match self {
            Frame::Data(v) => SseEvent::default().data(v.to_string()),
            Frame::Named(name, v) => SseEvent::default().event(name).data(v.to_string()),
            Frame::Done => SseEvent::default().data("[DONE]"),
        }
    }
}

/// A named event whose data opens with `"type": name`, as Anthropic's and the Responses API's
/// events do.
pub fn typed_event(name: &'static str, data: Value) -> Frame {
    let mut fields = serde_json::Map::new();
    fields.insert("type".to_owned(), Value::String(name.to_owned()));
    if let Value::Object(rest) = data {
        fields.extend(rest);
    }
    Frame::Named(name, Value::Object(fields))
}

/// How a route's stream looks.
pub trait Chunks: Send + 'static {
    /// Events before any token (the chat role, an echoed prompt, a message's start).
    fn opening(&mut self) -> Vec<Frame>;
    /// A token's events; none when it adds nothing a client sees.
    fn token(
        &mut self,
        choice: usize,
        id: u32,
        text: &str,
        logprob: Option<&TokenLogprob>,
    ) -> Vec<Frame>;
    /// The events that end a choice; `text` is what no token released.
    fn done(&mut self, choice: usize, text: &str, finish: Finish) -> Vec<Frame>;
    /// The events after every choice ended; `usage` counts the prompt and every choice.
    fn closing(&mut self, usage: Usage) -> Vec<Frame>;
    /// The events that end a stream the engine failed after it began.
    fn failed(&mut self, e: &ApiError) -> Vec<Frame> {
        vec![Frame::Data(e.body()), Frame::Done]
    }
    /// The answer to a request refused before its stream began.
    fn refused(&self, e: ApiError) -> Response {
        e.into_response()
    }
}

/// An OpenAI stream's closing: the usage chunk when asked for, then `[DONE]`.
pub fn openai_closing(heading: &Heading, object: &'static str, usage: Usage) -> Vec<Frame> {
    let mut frames = Vec::new();
    if heading.include_usage {
        frames.push(Frame::Data(heading.chunk::<Value>(
            object,
            Vec::new(),
            Some(usage),
        )));
    }
    frames.push(Frame::Done);
    frames
}

struct Streaming<C> {
    rx: UnboundedReceiver<Event>,
    chunks: C,
    first: Option<Event>,
    out: VecDeque<SseEvent>,
    open: usize,
    usage: Usage,
    ended: bool,
}

impl<C: Chunks> Streaming<C> {
    fn push(&mut self, frames: Vec<Frame>) {
        self.out.extend(frames.into_iter().map(Frame::into_sse));
    }

    fn on(&mut self, event: Event) {
        match event {
            Event::Token {
                choice,
                id,
                text,
                logprob,
            } => {
                let frames = self.chunks.token(choice, id, &text, logprob.as_ref());
                self.push(frames);
            }
            Event::Done {
                choice,
                text,
                finish,
                completion_tokens,
                ..
            } => {
                let frames = self.chunks.done(choice, &text, finish);
                self.push(frames);
                self.usage.add(0, completion_tokens);
                self.open = self.open.saturating_sub(1);
                if self.open == 0 {
                    let frames = self.chunks.closing(self.usage);
                    self.push(frames);
                    self.ended = true;
                }
            }
            Event::Failed(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: ApiError) {
        let frames = self.chunks.failed(&e);
        self.push(frames);
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
) -> Response {
    let first = match rx.recv().await {
        Some(Event::Failed(e)) => return chunks.refused(e),
        Some(event) => event,
        None => return chunks.refused(ApiError::engine("the engine stopped")),
    };
    let opening = chunks.opening();
    let mut state = Streaming {
        rx,
        chunks,
        first: Some(first),
        out: VecDeque::new(),
        open: choices,
        usage: Usage::default(),
        ended: false,
    };
    state.usage.add(prompt_tokens, 0);
    state.push(opening);
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
