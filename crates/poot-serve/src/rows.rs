//! The driver's serving surface as the engine loop drives it: open a sequence into a free row,
//! advance every open sequence by one step, release a row. A trait so the loop's scheduling
//! (queueing, disconnects, failures) is tested without a device.
//!
//! INTERIM: until `Driver<Serving>` has open/step/commit/release, `OneRow` runs each sequence
//! whole through `Driver::generate` in one advance; `SeqId`, `SeqToken` and `SeqEvent` mirror
//! the driver's coming types.

use poot_llm::{Driver, DriverError, FinishReason, GenerateRequest, Serving, TokenLogprob};

/// An open sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub u64);

/// One token a sequence produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqToken {
    pub id: u32,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// What one sequence produced in one step.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqEvent {
    pub id: SeqId,
    pub tokens: Vec<SeqToken>,
    pub finish: Option<FinishReason>,
    pub prompt_tokens: usize,
}

/// Why a sequence was not opened.
#[derive(Debug)]
pub enum Admission {
    /// Every row is taken: keep the request queued and retry after a release.
    NoRoom,
    /// The request's own fault (or the engine's, for errors that are not the request's).
    Refused(DriverError),
}

/// Sequences over rows.
pub trait Rows {
    fn open(&mut self, request: GenerateRequest) -> Result<SeqId, Admission>;
    /// One step over every open sequence. An error is the engine's: every open sequence fails.
    fn advance(&mut self) -> Result<Vec<SeqEvent>, DriverError>;
    /// Frees the sequence's row now; unknown ids are ignored.
    fn release(&mut self, id: SeqId);
    fn rows(&self) -> usize;
}

/// INTERIM: one sequence at a time through `Driver::generate`.
pub struct OneRow {
    driver: Driver<Serving>,
    open: Option<(SeqId, Option<GenerateRequest>)>,
    next: u64,
}

impl OneRow {
    pub fn new(driver: Driver<Serving>) -> OneRow {
        OneRow {
            driver,
            open: None,
            next: 0,
        }
    }
}

impl Rows for OneRow {
    fn open(&mut self, request: GenerateRequest) -> Result<SeqId, Admission> {
        if self.open.is_some() {
            return Err(Admission::NoRoom);
        }
        let capacity = self.driver.options().capacity;
        if request.prompt.is_empty() {
            return Err(Admission::Refused(DriverError::EmptyPrompt));
        }
        if request.prompt.len() + request.max_new > capacity {
            return Err(Admission::Refused(DriverError::Capacity {
                prompt: request.prompt.len(),
                max_new: request.max_new,
                capacity,
            }));
        }
        self.next += 1;
        let id = SeqId(self.next);
        self.open = Some((id, Some(request)));
        Ok(id)
    }

    fn advance(&mut self) -> Result<Vec<SeqEvent>, DriverError> {
        let Some((id, request)) = &mut self.open else {
            return Ok(Vec::new());
        };
        let id = *id;
        let Some(request) = request.take() else {
            return Ok(Vec::new());
        };
        let mut tokens = Vec::new();
        let generation = self.driver.generate(request, &mut |t| {
            tokens.push(SeqToken {
                id: t.id,
                text: t.text.to_owned(),
                logprob: t.logprob.cloned(),
            });
            std::ops::ControlFlow::Continue(())
        })?;
        // The text the pieces missed: the decoder's flush at the end.
        let streamed: String = tokens.iter().map(|t| t.text.as_str()).collect();
        if let (Some(rest), Some(last)) = (
            generation.text.strip_prefix(streamed.as_str()),
            tokens.last_mut(),
        ) {
            last.text.push_str(rest);
        }
        Ok(vec![SeqEvent {
            id,
            tokens,
            finish: Some(generation.finish),
            prompt_tokens: generation.prompt_tokens,
        }])
    }

    fn release(&mut self, id: SeqId) {
        if self.open.as_ref().is_some_and(|(open, _)| *open == id) {
            self.open = None;
        }
    }

    fn rows(&self) -> usize {
        1
    }
}
