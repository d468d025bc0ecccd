//! What one generation writes to stdout: the text as it streams (flushed per token), or one JSON
//! object per token and a summary object.
//!
//! Text that could be the start of a stop string is held back until the next token shows it is
//! not one, so a stop string spread over several tokens is never printed. The chat template's
//! stop tokens (`stop_ids`) end the generation from the token sink; they are reported as a stop.

use std::io::{self, Write};
use std::ops::ControlFlow;

use poot_llm::{FinishReason, GeneratedToken, Generation, GenerationControl};
use serde_json::json;

/// Text or JSON lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Where the run happens, for the summary.
#[derive(Clone, Debug)]
pub struct Placement {
    pub backend: String,
    pub device: String,
}

/// The per-token sink of one generation.
pub struct TokenSink<'a> {
    format: Format,
    stops: &'a [String],
    stop_ids: &'a [u32],
    /// Every accepted piece, joined.
    streamed: String,
    /// How much of `streamed` is on stdout (text format).
    printed: usize,
    /// A stop id ended the generation (its token is not part of the answer).
    stopped_by_id: bool,
    /// stdout is gone (a closed pipe): stop generating, and the caller stops too.
    closed: bool,
}

/// The outcome the caller reports and keeps (the assistant's turn in a chat).
pub struct Answer {
    /// stdout is gone (a closed pipe): the caller stops quietly.
    pub closed: bool,
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish: &'static str,
    /// Decode steps run: the first token comes with the prefill.
    pub decode_steps: usize,
}

impl<'a> TokenSink<'a> {
    pub fn new(format: Format, stops: &'a [String], stop_ids: &'a [u32]) -> TokenSink<'a> {
        TokenSink {
            format,
            stops,
            stop_ids,
            streamed: String::new(),
            printed: 0,
            stopped_by_id: false,
            closed: false,
        }
    }

    /// Called by the driver with each token; `text_of` spells a log-probability alternative.
    pub fn token(
        &mut self,
        token: &GeneratedToken<'_>,
        text_of: &dyn Fn(u32) -> String,
    ) -> GenerationControl {
        let (id, piece) = (token.id, token.text);
        if self.stop_ids.contains(&id) {
            self.stopped_by_id = true;
            return ControlFlow::Break(());
        }
        self.streamed.push_str(piece);
        let written = match self.format {
            Format::Json => {
                let mut object = json!({ "id": id, "text": piece });
                if let Some(lp) = token.logprob {
                    object["logprob"] = json!(lp.logprob);
                    object["top_logprobs"] = lp
                        .top
                        .iter()
                        .map(|&(id, logprob)| json!({ "id": id, "text": text_of(id), "logprob": logprob }))
                        .collect();
                }
                write_line(&object)
            }
            Format::Text => {
                let safe = self.streamed.len() - held_back(&self.streamed, self.stops);
                let result = self
                    .streamed
                    .get(self.printed..safe)
                    .map_or(Ok(()), write_text);
                self.printed = safe.max(self.printed);
                result
            }
        };
        if written.is_err() {
            self.closed = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Writes what is left once the generation ended and returns the answer.
    pub fn finish(mut self, generation: &Generation) -> Answer {
        let (text, tokens, finish) = if self.stopped_by_id {
            let mut tokens = generation.tokens.clone();
            tokens.pop();
            (std::mem::take(&mut self.streamed), tokens, "stop")
        } else {
            let finish = match generation.finish {
                FinishReason::Eos => "eos",
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
                FinishReason::Cancelled => "cancelled",
                FinishReason::NonFinite => "non-finite",
                FinishReason::Guide => "guide-failed",
            };
            (generation.text.clone(), generation.tokens.clone(), finish)
        };
        if self.format == Format::Text && !self.closed {
            let rest = text.get(self.printed..).unwrap_or_default();
            if write_text(rest).is_err() {
                self.closed = true;
            }
        }
        let decode_steps = match generation.finish {
            FinishReason::Eos => generation.tokens.len(),
            _ => generation.tokens.len().saturating_sub(1),
        };
        Answer {
            closed: self.closed,
            text,
            tokens,
            finish,
            decode_steps,
        }
    }
}

/// The JSON summary line that follows the token lines.
pub fn write_summary(
    prompt: &[u32],
    answer: &Answer,
    generation: &Generation,
    placement: &Placement,
) -> io::Result<()> {
    write_line(&json!({
        "prompt_ids": prompt,
        "tokens": answer.tokens,
        "text": answer.text,
        "finish": answer.finish,
        "prefill_ms": generation.prefill_seconds * 1e3,
        "decode_ms": generation.decode_seconds * 1e3,
        "decode_tok_s": per_second(answer.decode_steps, generation.decode_seconds),
        "backend": placement.backend,
        "device": placement.device,
    }))
}

/// The timings line for stderr.
pub fn timings(prompt_tokens: usize, answer: &Answer, generation: &Generation) -> String {
    format!(
        "{prompt_tokens} prompt tokens in {:.0} ms ({:.1} tok/s); {} new tokens, decode {:.1} tok/s; finish: {}",
        generation.prefill_seconds * 1e3,
        per_second(prompt_tokens, generation.prefill_seconds),
        answer.tokens.len(),
        per_second(answer.decode_steps, generation.decode_seconds),
        answer.finish,
    )
}

pub fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The length of the longest end of `text` that begins some stop string (and so must wait).
fn held_back(text: &str, stops: &[String]) -> usize {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|stop| {
            (text.len().saturating_sub(stop.len())..text.len())
                .filter(|&at| text.is_char_boundary(at))
                .find(|&at| text.get(at..).is_some_and(|end| stop.starts_with(end)))
                .map(|at| text.len() - at)
        })
        .max()
        .unwrap_or(0)
}

fn write_text(text: &str) -> io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// `text` and a newline on stdout.
pub fn write_text_line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

pub fn write_line(value: &serde_json::Value) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{value}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_possible_stop_prefix_is_held_back() {
        let stops = vec!["</s>".to_owned(), "\n\n".to_owned()];
        assert_eq!(held_back("Paris.", &stops), 0);
        assert_eq!(held_back("Paris.<", &stops), 1);
        assert_eq!(held_back("Paris.</", &stops), 2);
        assert_eq!(held_back("Paris.\n", &stops), 1);
        assert_eq!(held_back("a<b", &stops), 0);
        assert_eq!(held_back("é<", &[]), 0);
        assert_eq!(held_back("é", &["éa".to_owned()]), "é".len());
    }
}
