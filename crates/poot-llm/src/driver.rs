//! The driver: one model on one executor. It loads the weights once as one executable, prepares
//! a finite set of entries (step shape x head) up front, and generates with prefill in chunks and
//! decode replayed per token. Every step ends in the sampling suffix, so the host reads back a
//! token id and a non-finite flag (and the log-probability record when asked), never the
//! logits.
//!
//! This first driver serves one sequence at a time over a contiguous cache; the serving surface
//! (open, step, commit, release over many sequences) joins with the server.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use poot_executor::{EntryId, ExecError, ExecutableId, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Slot, TraceLimits};
use poot_models::{StepShape, StepSpec, TraceError};

use crate::handle::{HandleError, ModelHandle};
use crate::sampling::{
    Head, MAX_LOGIT_BIAS, MAX_TOP_LOGPROBS, Pick, RowSampling, Sampler, ShortReadback, append_head,
    bind_slots, read_picks,
};
use crate::weights::HandleWeights;

/// Fixed for the driver's life.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriverOptions {
    /// KV positions: prompt plus new tokens.
    pub capacity: usize,
    /// New tokens per prefill step.
    pub prefill_chunk: usize,
    /// The limits every traced step runs under.
    pub trace: TraceLimits,
}

impl DriverOptions {
    pub fn new(capacity: usize, prefill_chunk: usize) -> DriverOptions {
        DriverOptions {
            capacity,
            prefill_chunk,
            trace: TraceLimits::standard(prefill_chunk.max(1) as u64),
        }
    }
}

/// How the KV cache is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Contiguous,
}

/// A driver whose entries are not prepared: it cannot generate yet.
pub struct Unprepared;
/// A prepared driver.
pub struct Serving;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_new: usize,
    pub sampler: Sampler,
    /// Strings that end generation when the output contains them (not included).
    pub stops: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many most likely alternatives (at most
    /// [`MAX_TOP_LOGPROBS`]); `None` reports none.
    pub top_logprobs: Option<usize>,
}

impl GenerateRequest {
    /// A request for `max_new` tokens after `prompt` with `sampler` and nothing else.
    pub fn new(prompt: Vec<u32>, max_new: usize, sampler: Sampler) -> GenerateRequest {
        GenerateRequest {
            prompt,
            max_new,
            sampler,
            stops: Vec::new(),
            ignore_eos: false,
            top_logprobs: None,
        }
    }
}

/// A generated token's log-probability under the adjusted distribution (after penalties, bias
/// and temperature), with the most likely alternatives, most likely first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One generated token as the sink sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeneratedToken<'a> {
    pub id: u32,
    /// The text this token completes (may be empty while a character is split across tokens).
    pub text: &'a str,
    /// When the request asked for log-probabilities.
    pub logprob: Option<&'a TokenLogprob>,
}

/// Returned by the token sink: go on, or stop after this token.
pub type GenerationControl = ControlFlow<()>;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    Eos,
    /// A stop string.
    Stop,
    /// `max_new` tokens.
    Length,
    /// The sink asked to stop.
    Cancelled,
}

/// The result of one generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// One per token when the request asked for log-probabilities, else empty.
    pub logprobs: Vec<TokenLogprob>,
    pub text: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Why the driver refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The executor failed (see its error for whether it can go on).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The family could not trace a step shape.
    #[error(transparent)]
    Trace(Box<TraceError>),
    /// Appending the sampling suffix failed.
    #[error("sampling suffix: {0}")]
    Suffix(#[from] poot_graph_ir::BuilderError),
    /// The prompt plus the new tokens do not fit the cache.
    #[error(
        "the prompt ({prompt} tokens) plus {max_new} new tokens exceed the capacity of {capacity}"
    )]
    Capacity {
        prompt: usize,
        max_new: usize,
        capacity: usize,
    },
    /// An empty prompt.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The capacity exceeds what the model was built for, or the chunk exceeds the capacity.
    #[error(
        "capacity {capacity} with chunks of {chunk} is not valid for a model of {max_positions} positions"
    )]
    Options {
        capacity: usize,
        chunk: usize,
        max_positions: usize,
    },
    /// A step shape no prepared entry serves.
    #[error("no prepared entry for {tokens} tokens with head {head:?}")]
    Unprepared { tokens: usize, head: Head },
    /// The device produced a non-finite logit: the step's token is not trustworthy.
    #[error("non-finite logits at generated token {step}")]
    NonFinite { step: usize },
    /// The request's sampling parameters are invalid for this model.
    #[error("invalid sampling parameters: {0}")]
    Sampling(String),
    /// A feature the request asks for that this driver does not run yet.
    #[error("{0} is not supported by this driver yet")]
    Unsupported(&'static str),
    /// The step's outputs were shorter than the sampling suffix writes.
    #[error(transparent)]
    Readback(#[from] ShortReadback),
    /// A token id outside the vocabulary came back from the device.
    #[error("the device returned token {token}, outside the vocabulary of {vocab}")]
    BadToken { token: i32, vocab: usize },
    /// Tokenizer or handle failure while streaming text.
    #[error(transparent)]
    Handle(Box<HandleError>),
    #[error(transparent)]
    Tokenizer(#[from] poot_text::TokenizerError),
}

impl From<HandleError> for DriverError {
    fn from(e: HandleError) -> DriverError {
        DriverError::Handle(Box::new(e))
    }
}

impl From<TraceError> for DriverError {
    fn from(e: TraceError) -> DriverError {
        DriverError::Trace(Box::new(e))
    }
}

/// A refused `serve`: the unprepared driver, handed back, and why.
pub type Refused = Box<(Driver<Unprepared>, DriverError)>;

/// One model on one executor.
pub struct Driver<S = Serving> {
    handle: Arc<ModelHandle>,
    exec: Box<dyn Executor>,
    exe: ExecutableId,
    options: DriverOptions,
    entries: HashMap<(usize, Head), EntryId>,
    _state: PhantomData<S>,
}

impl<S> Driver<S> {
    pub fn handle(&self) -> &Arc<ModelHandle> {
        &self.handle
    }

    pub fn executor(&self) -> &dyn Executor {
        self.exec.as_ref()
    }

    pub fn options(&self) -> DriverOptions {
        self.options
    }
}

impl Driver<Unprepared> {
    /// Binds `handle` to `exec`, loading its weights once.
    pub fn new(
        handle: Arc<ModelHandle>,
        mut exec: Box<dyn Executor>,
        options: DriverOptions,
    ) -> Result<Driver<Unprepared>, DriverError> {
        let max_positions = handle.config().max_positions;
        if options.capacity == 0
            || options.capacity > max_positions
            || options.prefill_chunk == 0
            || options.prefill_chunk > options.capacity
        {
            return Err(DriverError::Options {
                capacity: options.capacity,
                chunk: options.prefill_chunk,
                max_positions,
            });
        }
        let exe = exec.load_weights(Box::new(HandleWeights::new(Arc::clone(&handle))))?;
        Ok(Driver {
            handle,
            exec,
            exe,
            options,
            entries: HashMap::new(),
            _state: PhantomData,
        })
    }

    /// Prepares every entry generation needs (prefill chunks and single-token steps, with the
    /// greedy, sampling, adjusted and log-probability heads), so generating compiles nothing. A
    /// refusal hands the unprepared driver back.
    pub fn serve(mut self, layout: Layout) -> Result<Driver<Serving>, Refused> {
        let Layout::Contiguous = layout;
        let chunks = if self.options.prefill_chunk > 1 {
            vec![self.options.prefill_chunk, 1]
        } else {
            vec![1]
        };
        for tokens in chunks {
            for head in [Head::Greedy, Head::Sample, Head::Adjusted, Head::Logprobs] {
                if let Err(e) = self.prepare(tokens, head) {
                    return Err(Box::new((self, e)));
                }
            }
        }
        let Driver {
            handle,
            exec,
            exe,
            options,
            entries,
            ..
        } = self;
        Ok(Driver {
            handle,
            exec,
            exe,
            options,
            entries,
            _state: PhantomData,
        })
    }

    fn prepare(&mut self, tokens: usize, head: Head) -> Result<(), DriverError> {
        let shape = StepShape::new(1, tokens, self.options.capacity);
        let graph = self
            .handle
            .model()
            .trace(&StepSpec::step(shape), self.options.trace)?;
        let graph = append_head(graph, head, self.options.trace)?;
        let entry = self.exec.add_entry(self.exe, &graph)?;
        self.entries.insert((tokens, head), entry);
        Ok(())
    }
}

impl Driver<Serving> {
    /// Runs one step of `tokens` at positions `start..` (the sequence's own draws when
    /// `generated`, else prompt), returning the pick.
    fn step(
        &mut self,
        tokens: &[u32],
        start: usize,
        head: Head,
        sampler: &Sampler,
        draw: u32,
        generated: bool,
    ) -> Result<Pick, DriverError> {
        let entry = *self
            .entries
            .get(&(tokens.len(), head))
            .ok_or(DriverError::Unprepared {
                tokens: tokens.len(),
                head,
            })?;
        let mut inputs = StepInputs::new();
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        inputs.set_i32(Slot::Token, &ids);
        let pos: Vec<i32> = (start..start + tokens.len()).map(|p| p as i32).collect();
        inputs.set_i32(Slot::Pos, &pos);
        let row = RowSampling {
            sampler,
            draw,
            fed: tokens,
            generated,
        };
        bind_slots(&mut inputs, head, &[row], tokens.len());
        let mut out = StepOutputs::default();
        self.exec.step(entry, &inputs, &mut out)?;
        let vocab = self.handle.config().vocab_size;
        let pick = read_picks(&out, head, 1, vocab)?.into_iter().next();
        Ok(pick.unwrap_or(Pick {
            token: -1,
            non_finite: true,
            logprobs: None,
        }))
    }

    /// Generates for one prompt, calling `sink` with each token and its text as it comes.
    pub fn generate(
        &mut self,
        req: GenerateRequest,
        sink: &mut dyn FnMut(&GeneratedToken<'_>) -> GenerationControl,
    ) -> Result<Generation, DriverError> {
        let (n, cap) = (req.prompt.len(), self.options.capacity);
        if n == 0 {
            return Err(DriverError::EmptyPrompt);
        }
        if n + req.max_new > cap {
            return Err(DriverError::Capacity {
                prompt: n,
                max_new: req.max_new,
                capacity: cap,
            });
        }
        let vocab = self.handle.config().vocab_size;
        check_request(&req, vocab)?;
        let head = req.sampler.head(req.top_logprobs.is_some());
        let handle = Arc::clone(&self.handle);
        let text_services = handle.text()?;
        let eog: Vec<u32> = {
            let sp = text_services.tokenizer().special_tokens();
            let mut v = sp.eog.clone();
            v.extend(sp.eos);
            v.extend(self.handle.config().eos_ids.iter().copied());
            v
        };
        if let Some(&first) = self.entries.get(&(1, head)) {
            self.exec.reset_state(first)?;
        }
        let t0 = Instant::now();
        let chunk = self.options.prefill_chunk;
        let mut pos = 0;
        let mut last = None;
        let mut draw = 0u32;
        while pos < n {
            let take = if n - pos >= chunk { chunk } else { 1 };
            let fed = &req.prompt[pos..pos + take];
            last = Some(self.step(fed, pos, head, &req.sampler, draw, false)?);
            pos += take;
        }
        let prefill_seconds = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut decoder = text_services.tokenizer().stream_decoder(true);
        let mut tokens = Vec::new();
        let mut logprobs = Vec::new();
        let mut text = String::new();
        let mut finish = FinishReason::Length;
        while let Some(pick) = last.take()
            && tokens.len() < req.max_new
        {
            if pick.non_finite {
                return Err(DriverError::NonFinite { step: tokens.len() });
            }
            let id = checked_token(pick.token, vocab)?;
            let logprob = match (pick.logprobs, req.top_logprobs) {
                (Some((logprob, top)), Some(n)) => Some(TokenLogprob {
                    logprob,
                    top: top
                        .into_iter()
                        .take(n)
                        .map(|(t, lp)| Ok((checked_token(t, vocab)?, lp)))
                        .collect::<Result<_, DriverError>>()?,
                }),
                _ => None,
            };
            if !req.ignore_eos && eog.contains(&id) {
                finish = FinishReason::Eos;
                break;
            }
            tokens.push(id);
            let reported = logprob.is_some();
            logprobs.extend(logprob);
            let piece = decoder.push(id)?;
            text.push_str(&piece);
            if let Some(at) = req.stops.iter().filter_map(|s| text.find(s.as_str())).min() {
                text.truncate(at);
                finish = FinishReason::Stop;
                break;
            }
            let token = GeneratedToken {
                id,
                text: &piece,
                logprob: if reported { logprobs.last() } else { None },
            };
            if sink(&token).is_break() {
                finish = FinishReason::Cancelled;
                break;
            }
            if tokens.len() == req.max_new {
                break;
            }
            draw += 1;
            last = Some(self.step(&[id], pos, head, &req.sampler, draw, true)?);
            pos += 1;
        }
        if finish != FinishReason::Stop {
            text.push_str(&decoder.finish()?);
        }
        Ok(Generation {
            tokens,
            logprobs,
            text,
            finish,
            prompt_tokens: n,
            prefill_seconds,
            decode_seconds: t1.elapsed().as_secs_f64(),
        })
    }
}

/// Refuses a request whose sampling parameters are out of range for a vocabulary of `vocab`.
fn check_request(req: &GenerateRequest, vocab: usize) -> Result<(), DriverError> {
    let s = &req.sampler;
    let bad = |why: String| Err(DriverError::Sampling(why));
    if !(s.temperature.is_finite() && s.temperature >= 0.0) {
        return bad(format!(
            "temperature {} must be finite and >= 0",
            s.temperature
        ));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return bad(format!("top_p {} must be in (0, 1]", s.top_p));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return bad(format!("min_p {} must be in [0, 1]", s.min_p));
    }
    let p = s.penalties;
    if !(p.repetition.is_finite() && p.repetition > 0.0) {
        return bad(format!(
            "repetition penalty {} must be finite and > 0",
            p.repetition
        ));
    }
    if !(p.presence.is_finite() && p.frequency.is_finite()) {
        return bad("presence and frequency penalties must be finite".to_string());
    }
    if s.logit_bias.len() > MAX_LOGIT_BIAS {
        return bad(format!(
            "{} logit-bias entries (at most {MAX_LOGIT_BIAS})",
            s.logit_bias.len()
        ));
    }
    if let Some(&(id, b)) = s
        .logit_bias
        .iter()
        .find(|(id, b)| *id as usize >= vocab || !b.is_finite())
    {
        return bad(format!(
            "logit bias {b} for token {id} (tokens are below {vocab}, biases finite)"
        ));
    }
    if let Some(n) = req.top_logprobs
        && n > MAX_TOP_LOGPROBS
    {
        return bad(format!("top_logprobs {n} (at most {MAX_TOP_LOGPROBS})"));
    }
    Ok(())
}

/// A token id the device returned, checked against the vocabulary.
fn checked_token(token: i32, vocab: usize) -> Result<u32, DriverError> {
    u32::try_from(token)
        .ok()
        .filter(|&t| (t as usize) < vocab)
        .ok_or(DriverError::BadToken { token, vocab })
}
