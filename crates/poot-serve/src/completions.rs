//! POST /v1/completions: plain continuation of one or more prompts (texts or token ids).
//! Prompt text is tokenized with the model's control tokens recognized, as vLLM and
//! llama-server do for this raw route: the client writes the whole prompt.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use poot_llm::{GenerateRequest, ModelHandle, TokenLogprob};
use poot_text::EncodeOptions;
use serde_json::Value;

use crate::engine::{Finish, SeqSpec};
use crate::error::ApiError;
use crate::http::{App, parse, unix_now};
use crate::openai::{CompletionChoice, CompletionLogprobs, CompletionRequest, Prompt, Usage};
use crate::params::{self, choice_sampler};
use crate::reply::{self, ChoiceOut, Chunks, Frame, Heading, token_text};

/// Most sequences one request may open (prompts times `n`).
const MAX_SEQUENCES: usize = 256;

pub async fn completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body)?;
    app.check_generation_model(&req.model)?;
    let vocab = app.handle.config().vocab_size;
    let mut g = params::generation(&req.sampling, vocab)?;
    g.lora = app.lora_for(&req.model);
    let found = crate::guided::from_extensions(&req.sampling)?;
    g.guide = crate::guided::resolve(app, found.into_iter().collect())?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid("suffix is not supported", Some("suffix")));
    }
    if let Some(best_of) = req.best_of
        && best_of != g.n as i64
    {
        return Err(ApiError::invalid(
            "best_of other than n is not supported",
            Some("best_of"),
        ));
    }
    let top_logprobs = req
        .logprobs
        .map(|v| params::top_logprobs(v, "logprobs"))
        .transpose()?;
    if req.echo && top_logprobs.is_some() {
        return Err(ApiError::invalid(
            "echo with logprobs (prompt log-probabilities) is not supported",
            Some("echo"),
        ));
    }
    let prompts = prompts(&app.handle, req.prompt)?;
    if prompts.len() * g.n > MAX_SEQUENCES {
        return Err(ApiError::invalid_value(
            "n",
            format!(
                "{} prompts times n = {} asks for more than {MAX_SEQUENCES} sequences",
                prompts.len(),
                g.n
            ),
        ));
    }
    let max_new =
        params::max_tokens(req.max_tokens, "max_tokens")?.unwrap_or(app.default_max_tokens);
    let mut seqs = Vec::with_capacity(prompts.len() * g.n);
    let mut echo = Vec::new();
    let mut prompt_tokens = 0;
    for (ids, text) in prompts {
        if ids.len() + max_new > app.context {
            return Err(ApiError {
                param: Some("prompt".to_owned()),
                ..ApiError::context(ids.len(), max_new, app.context)
            });
        }
        prompt_tokens += ids.len();
        for i in 0..g.n {
            echo.push(if req.echo {
                text.clone()
            } else {
                String::new()
            });
            seqs.push(SeqSpec {
                request: GenerateRequest {
                    ignore_eos: g.ignore_eos,
                    speculate: g.speculate,
                    top_logprobs,
                    stops: g.stops.clone(),
                    lora: g.lora.clone(),
                    guide: g.guide.clone(),
                    ..GenerateRequest::new(ids.clone(), max_new, choice_sampler(&g.sampler, i))
                },
                stop_ids: Vec::new(),
            });
        }
    }
    let choices = seqs.len();
    let rx = app.engine.submit(seqs)?;
    let heading = Heading {
        id: format!("cmpl-{:016x}", params::fresh_seed()),
        created: unix_now(),
        model: app.model_id.clone(),
        include_usage: g.include_usage,
    };
    if g.stream {
        let chunks = CompletionChunks {
            handle: Arc::clone(&app.handle),
            heading,
            echo,
            logprobs: top_logprobs.is_some(),
            offsets: vec![0; choices],
        };
        return Ok(reply::stream(rx, chunks, choices, prompt_tokens).await);
    }
    let (outs, completion_tokens) = reply::collect(rx, choices).await?;
    let mut usage = Usage::default();
    usage.add(prompt_tokens, completion_tokens);
    let choices = outs
        .into_iter()
        .zip(echo)
        .enumerate()
        .map(|(index, (out, echoed))| choice(&app.handle, index, out, echoed, top_logprobs))
        .collect();
    Ok(heading.whole("text_completion", choices, usage))
}

/// The prompts as token ids, each with its text (for `echo`).
fn prompts(handle: &ModelHandle, prompt: Prompt) -> Result<Vec<(Vec<u32>, String)>, ApiError> {
    let text = handle
        .text()
        .map_err(|e| ApiError::engine(format!("the model has no tokenizer: {e}")))?;
    let raw = EncodeOptions {
        add_special: true,
        parse_special: true,
    };
    let encode = |s: String| -> Result<(Vec<u32>, String), ApiError> {
        let ids = text.tokenizer().encode(&s, raw).map_err(|e| {
            ApiError::invalid(
                format!("could not tokenize the prompt: {e}"),
                Some("prompt"),
            )
        })?;
        Ok((ids, s))
    };
    let vocab = handle.config().vocab_size;
    let ids = |v: Vec<i64>| -> Result<(Vec<u32>, String), ApiError> {
        let ids = v
            .iter()
            .map(|&t| u32::try_from(t).ok().filter(|&t| (t as usize) < vocab))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                ApiError::invalid_value(
                    "prompt",
                    format!("a prompt token is not an id below {vocab}"),
                )
            })?;
        let s = text.tokenizer().decode(&ids, false).unwrap_or_default();
        Ok((ids, s))
    };
    let all = match prompt {
        Prompt::Text(s) => vec![encode(s)?],
        Prompt::Texts(v) => v.into_iter().map(encode).collect::<Result<_, _>>()?,
        Prompt::Tokens(v) => vec![ids(v)?],
        Prompt::TokenLists(v) => v.into_iter().map(ids).collect::<Result<_, _>>()?,
    };
    if all.is_empty() || all.iter().any(|(ids, _)| ids.is_empty()) {
        return Err(ApiError::invalid_value("prompt", "the prompt is empty"));
    }
    Ok(all)
}

/// The legacy completions log-probability record of one choice's tokens.
fn logprobs(
    handle: &ModelHandle,
    tokens: &[(u32, &TokenLogprob)],
    start: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut offset = start;
    for &(id, lp) in tokens {
        let (token, _) = token_text(handle, id);
        out.text_offset.push(offset);
        offset += token.len();
        out.tokens.push(token);
        out.token_logprobs.push(lp.logprob);
        out.top_logprobs.push(
            lp.top
                .iter()
                .map(|&(alt, p)| (token_text(handle, alt).0, p))
                .collect::<BTreeMap<_, _>>(),
        );
    }
    out
}

fn choice(
    handle: &ModelHandle,
    index: usize,
    out: ChoiceOut,
    echoed: String,
    top_logprobs: Option<usize>,
) -> CompletionChoice {
    let lps = top_logprobs.map(|_| {
        let tokens: Vec<(u32, &TokenLogprob)> = out
            .tokens
            .iter()
            .filter_map(|t| t.logprob.as_ref().map(|lp| (t.id, lp)))
            .collect();
        logprobs(handle, &tokens, echoed.len())
    });
    CompletionChoice {
        index,
        text: echoed + &out.text,
        logprobs: lps,
        finish_reason: out.finish.map(Finish::as_str),
    }
}

struct CompletionChunks {
    handle: Arc<ModelHandle>,
    heading: Heading,
    /// Per choice: the prompt text to echo first (empty without `echo`).
    echo: Vec<String>,
    logprobs: bool,
    /// Per choice: text offset of the next token.
    offsets: Vec<usize>,
}

impl CompletionChunks {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> Value {
        self.heading.chunk("text_completion", choices, usage)
    }
}

impl Chunks for CompletionChunks {
    fn opening(&mut self) -> Vec<Frame> {
        let echoed: Vec<(usize, String)> = self
            .echo
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty())
            .map(|(i, e)| (i, e.clone()))
            .collect();
        echoed
            .into_iter()
            .map(|(index, text)| {
                if let Some(o) = self.offsets.get_mut(index) {
                    *o = text.len();
                }
                Frame::Data(self.chunk(
                    vec![CompletionChoice {
                        index,
                        text,
                        logprobs: None,
                        finish_reason: None,
                    }],
                    None,
                ))
            })
            .collect()
    }

    fn token(
        &mut self,
        choice: usize,
        id: u32,
        text: &str,
        logprob: Option<&TokenLogprob>,
    ) -> Vec<Frame> {
        let lps = match (self.logprobs, logprob) {
            (true, Some(lp)) => {
                let start = self.offsets.get(choice).copied().unwrap_or(0);
                let record = logprobs(&self.handle, &[(id, lp)], start);
                if let (Some(o), Some(t)) = (self.offsets.get_mut(choice), record.tokens.first()) {
                    *o += t.len();
                }
                Some(record)
            }
            _ => None,
        };
        if text.is_empty() && lps.is_none() {
            return Vec::new();
        }
        vec![Frame::Data(self.chunk(
            vec![CompletionChoice {
                index: choice,
                text: text.to_owned(),
                logprobs: lps,
                finish_reason: None,
            }],
            None,
        ))]
    }

    fn done(&mut self, choice: usize, text: &str, finish: Finish) -> Vec<Frame> {
        vec![Frame::Data(self.chunk(
            vec![CompletionChoice {
                index: choice,
                text: text.to_owned(),
                logprobs: None,
                finish_reason: Some(finish.as_str()),
            }],
            None,
        ))]
    }

    fn closing(&mut self, usage: Usage) -> Vec<Frame> {
        reply::openai_closing(&self.heading, "text_completion", usage)
    }
}
