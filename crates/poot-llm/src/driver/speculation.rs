//! Speculative decoding: a decoding row gets up to `k` drafted tokens, and one step of the
//! target over `k + 1` positions (the last accepted token and the drafts) checks them all at
//! once with the verification head ([`crate::sampling::verify`]), so a step can keep several
//! tokens for one pass over the weights.
//!
//! Drafts come from prompt lookup (the tokens that followed the latest earlier occurrence of
//! the context's last n-gram, as vLLM's `ngram` method and llama.cpp's lookup decoding), from a
//! draft model (a second, smaller [`Driver`] whose tokenizer is the target's, decoding greedily
//! on its own paged cache), or from both: lookup first, the draft model where lookup finds
//! nothing.
//!
//! Rejected drafts cost nothing to undo. A verification step writes keys and values at all
//! `k + 1` positions; the sequence then counts as written only up to its last kept token, and
//! the next step writes over the rest before anything reads it (the mask hides positions past
//! each query's own). The draft model's sequence is resynchronized the same way: it keeps the
//! positions its cache holds that agree with the target's tokens and recomputes the rest.
//!
//! A row speculates when the driver has a draft source, its request allows it, its head is
//! greedy or plain sampling (penalties, bias and log-probabilities would need the history
//! updated position by position; such rows decode one token a step), and at least `k` tokens
//! are left to generate (so the `k + 1` positions stay inside the request's reservation).
//! Checkpoint heads (multi-token prediction layers, EAGLE heads) would be one more source of
//! drafts feeding the same verification step; see docs/speculative-decoding.md.

use std::collections::HashMap;

use poot_executor::StepOutputs;

use super::serving::{Pick, RowFeed, StepPicks};
use super::{Driver, DriverError, EntryKey, GenerateRequest, Serving};
use crate::sampling::verify::{VerifyRow, bind_slots, read_verdicts};
use crate::sampling::{Head, Sampler};

/// How a driver speculates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Speculation {
    /// Drafted tokens one verification step checks (`k`); 0 turns speculation off.
    pub tokens: usize,
    /// Draft by prompt lookup, when set.
    pub lookup: Option<PromptLookup>,
}

impl Speculation {
    /// No speculation.
    pub const OFF: Speculation = Speculation {
        tokens: 0,
        lookup: None,
    };

    /// Prompt lookup of `tokens` drafts with the default n-gram sizes.
    pub fn prompt_lookup(tokens: usize) -> Speculation {
        Speculation {
            tokens,
            lookup: Some(PromptLookup::default()),
        }
    }

    pub fn is_on(&self) -> bool {
        self.tokens > 0
    }
}

/// Prompt lookup: match the context's last n tokens, n from `max_ngram` down to `min_ngram`,
/// against earlier context, and draft the tokens that followed the latest match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLookup {
    pub min_ngram: usize,
    pub max_ngram: usize,
}

impl Default for PromptLookup {
    /// llama.cpp's lookup decoding sizes: 1 to 4.
    fn default() -> PromptLookup {
        PromptLookup {
            min_ngram: 1,
            max_ngram: 4,
        }
    }
}

impl PromptLookup {
    /// Up to `max_tokens` drafts for what follows `context`: the tokens after the latest
    /// earlier occurrence of its longest matching suffix n-gram. Empty when nothing matches.
    pub fn draft(&self, context: &[u32], max_tokens: usize) -> Vec<u32> {
        let len = context.len();
        if max_tokens == 0 {
            return Vec::new();
        }
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if n >= len {
                continue;
            }
            let pattern = &context[len - n..];
            // Latest first; the suffix itself (start = len - n) is not an earlier occurrence.
            if let Some(start) = (0..len - n).rev().find(|&s| &context[s..s + n] == pattern) {
                let from = start + n;
                let take = max_tokens.min(len - from);
                return context[from..from + take].to_vec();
            }
        }
        Vec::new()
    }
}

/// What speculation has done so far, for `poot run --verbose` and the server's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Verification steps run.
    pub verify_steps: u64,
    /// Rows those steps verified (a sequence's turn in one step).
    pub verified_rows: u64,
    /// Tokens drafted (by prompt lookup and the draft model).
    pub drafted_tokens: u64,
    /// Of those, tokens the target accepted.
    pub accepted_tokens: u64,
    /// Drafted by the draft model.
    pub model_drafted_tokens: u64,
    /// Device steps the draft model ran.
    pub draft_model_steps: u64,
}

impl SpecStats {
    /// Accepted over drafted tokens (0 before any draft).
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted_tokens == 0 {
            0.0
        } else {
            self.accepted_tokens as f64 / self.drafted_tokens as f64
        }
    }

    /// Tokens each verified row kept on average: accepted drafts plus the target's own token.
    pub fn tokens_per_verified_row(&self) -> f64 {
        if self.verified_rows == 0 {
            0.0
        } else {
            (self.accepted_tokens + self.verified_rows) as f64 / self.verified_rows as f64
        }
    }
}

/// A row about to be verified: its feed (the last accepted token, the drafts, padding to the
/// step's positions) and how many of its tokens are drafts.
pub(super) struct VerifyFeed {
    pub feed: RowFeed,
    pub drafts: usize,
}

impl Driver<Serving> {
    /// Attaches `draft` as the draft model: a served driver of another checkpoint with the
    /// target's vocabulary (every token id spelled the same), at least as many rows and the
    /// same capacity. Refused while either driver has open sequences.
    pub fn attach_draft(&mut self, draft: Driver<Serving>) -> Result<(), DriverError> {
        let busy = self.open_count().max(draft.open_count());
        if busy > 0 {
            return Err(DriverError::Busy { open: busy });
        }
        let (target, other) = (self.handle.text()?, draft.handle.text()?);
        let (target_vocab, draft_vocab) = (
            self.handle.config().vocab_size,
            draft.handle.config().vocab_size,
        );
        let (tt, dt) = (target.tokenizer(), other.tokenizer());
        let first_difference = (0..tt.vocab_size().max(dt.vocab_size()) as u32)
            .find(|&id| tt.token_text(id) != dt.token_text(id));
        if target_vocab != draft_vocab
            || tt.vocab_size() != dt.vocab_size()
            || first_difference.is_some()
        {
            return Err(DriverError::DraftVocabulary {
                target_vocab,
                draft_vocab,
                first_difference,
            });
        }
        if draft.rows() < self.rows() || draft.options.capacity != self.options.capacity {
            return Err(DriverError::DraftShape {
                target_rows: self.rows(),
                draft_rows: draft.rows(),
                target_capacity: self.options.capacity,
                draft_capacity: draft.options.capacity,
            });
        }
        self.draft = Some(Box::new(draft));
        Ok(())
    }

    /// The draft model's driver, when one is attached.
    pub fn draft_model(&self) -> Option<&Driver<Serving>> {
        self.draft.as_deref()
    }

    /// What speculation has done so far.
    pub fn spec_stats(&self) -> SpecStats {
        self.spec_stats
    }

    /// Whether `feed`, a decoding row's single-token feed, may speculate this step, and how many
    /// drafts it may take.
    pub(super) fn draft_budget(&self, feed: &RowFeed) -> Option<usize> {
        let k = self.options.speculation.tokens;
        if k == 0 || (self.options.speculation.lookup.is_none() && self.draft.is_none()) {
            return None;
        }
        let seq = self.seqs.open.get(&feed.seq)?;
        let head = seq.req.head();
        let left = seq.req.max_new.saturating_sub(seq.generated.len());
        let decoding = seq.fed >= seq.tokens.len() && seq.pending.is_some();
        (seq.req.speculate
            && decoding
            && matches!(head, Head::Greedy | Head::Sample)
            && left >= k
            && left >= 2)
            .then(|| k.min(left - 1))
    }

    /// Drafts for each row in `rows` (a feed and its draft budget): prompt lookup first, then
    /// the draft model for the rows lookup found nothing for. Rows without drafts are returned
    /// as they came, to decode one token.
    pub(super) fn make_drafts(
        &mut self,
        rows: Vec<(RowFeed, usize)>,
    ) -> Result<(Vec<VerifyFeed>, Vec<RowFeed>), DriverError> {
        let positions = self.options.speculation.tokens + 1;
        let mut found: Vec<(RowFeed, Vec<u32>)> = Vec::new();
        let mut for_model: Vec<(RowFeed, usize)> = Vec::new();
        for (feed, budget) in rows {
            let drafts = match (
                self.options.speculation.lookup,
                self.seqs.open.get(&feed.seq),
            ) {
                (Some(lookup), Some(seq)) => {
                    let mut context = seq.req.prompt.clone();
                    context.extend(&seq.generated);
                    lookup.draft(&context, budget)
                }
                _ => Vec::new(),
            };
            if drafts.is_empty() {
                for_model.push((feed, budget));
            } else {
                found.push((feed, drafts));
            }
        }
        let mut singles = Vec::new();
        if self.draft.is_some() && !for_model.is_empty() {
            let drafted = self.draft_with_model(&for_model)?;
            for (feed, _) in for_model {
                match drafted.get(&feed.seq) {
                    Some(d) if !d.is_empty() => {
                        self.spec_stats.model_drafted_tokens += d.len() as u64;
                        let d = d.clone();
                        found.push((feed, d));
                    }
                    _ => singles.push(feed),
                }
            }
        } else {
            singles.extend(for_model.into_iter().map(|(f, _)| f));
        }
        let verifies = found
            .into_iter()
            .map(|(mut feed, drafts)| {
                feed.tokens.extend(&drafts);
                feed.tokens.resize(positions, 0);
                VerifyFeed {
                    feed,
                    drafts: drafts.len(),
                }
            })
            .collect();
        Ok((verifies, singles))
    }

    /// Runs the draft model for `rows` (each a target row and its draft budget): each row's
    /// draft sequence is opened on first use, resynchronized with the target's tokens, and
    /// decoded greedily until it has drafted its budget. Returns the drafts by target sequence.
    fn draft_with_model(
        &mut self,
        rows: &[(RowFeed, usize)],
    ) -> Result<HashMap<super::SeqId, Vec<u32>>, DriverError> {
        let mut synced = Vec::new();
        let Some(draft) = self.draft.as_deref_mut() else {
            return Ok(HashMap::new());
        };
        for (feed, budget) in rows {
            let Some(seq) = self.seqs.open.get_mut(&feed.seq) else {
                continue;
            };
            let mut context = seq.req.prompt.clone();
            context.extend(&seq.generated);
            let id = match seq.draft {
                Some(id) => id,
                None => {
                    let req = GenerateRequest {
                        ignore_eos: true,
                        speculate: false,
                        ..GenerateRequest::new(
                            seq.req.prompt.clone(),
                            seq.req.max_new,
                            Sampler::greedy(),
                        )
                    };
                    match draft.open(req) {
                        Ok(id) => id,
                        // No room in the draft model: this row decodes one token at a time.
                        Err(DriverError::NoRoom { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            seq.draft = Some(id);
            draft.seqs.resync(id, &context, *budget);
            synced.push((feed.seq, id, context.len()));
        }
        // Each round of steps advances every synced sequence by at least one position unless
        // the draft pool preempted it; stop when none advances.
        loop {
            let progress = |d: &Driver<Serving>| -> (usize, usize) {
                synced
                    .iter()
                    .filter_map(|(_, id, _)| d.seqs.open.get(id))
                    .fold((0, 0), |(n, done), s| {
                        (
                            n + s.fed + s.generated.len(),
                            done + usize::from(s.finish.is_some()),
                        )
                    })
            };
            let (before, done) = progress(draft);
            if done == synced.len() {
                break;
            }
            let picks = draft.step()?;
            self.spec_stats.draft_model_steps += 1;
            draft.commit(picks)?;
            if progress(draft).0 == before {
                break;
            }
        }
        Ok(synced
            .into_iter()
            .filter_map(|(target, id, known)| {
                let seq = draft.seqs.open.get(&id)?;
                let prompt = seq.req.prompt.len();
                let drafted = seq.generated.get(known.saturating_sub(prompt)..)?;
                Some((target, drafted.to_vec()))
            })
            .collect())
    }

    /// Runs one verification step over `rows` (at most the driver's rows), in the smallest
    /// prepared row bucket that holds them, and adds each row's kept tokens to `picks`. Rows no
    /// prepared verification entry can serve come back, to decode one token.
    pub(super) fn verify(
        &mut self,
        rows: Vec<VerifyFeed>,
        picks: &mut StepPicks,
    ) -> Result<Vec<RowFeed>, DriverError> {
        let positions = self.options.speculation.tokens + 1;
        let sampled = rows.iter().any(|r| {
            self.seqs
                .open
                .get(&r.feed.seq)
                .is_some_and(|s| s.req.sampler.head(false) == Head::Sample)
        });
        let head = if sampled {
            Head::VerifySample
        } else {
            Head::Verify
        };
        let needed = rows.len();
        let chosen = self
            .options
            .row_buckets()
            .into_iter()
            .filter(|&r| r >= needed)
            .find_map(|r| {
                self.ensure(EntryKey {
                    rows: r,
                    tokens: positions,
                    head,
                })
                .map(|e| (r, e))
            });
        let Some((bucket, entry)) = chosen else {
            return Ok(rows
                .into_iter()
                .map(|mut r| {
                    r.feed.tokens.truncate(1);
                    r.feed
                })
                .collect());
        };
        *self.runs.entry((bucket, positions)).or_default() += 1;
        let mut feeds: Vec<Option<RowFeed>> = Vec::with_capacity(bucket);
        let mut drafts: Vec<usize> = Vec::with_capacity(bucket);
        for (r, mut row) in rows.into_iter().enumerate() {
            row.feed.row = r;
            drafts.push(row.drafts);
            feeds.push(Some(row.feed));
        }
        feeds.resize_with(bucket, || None);
        let mut inputs = self.inputs(positions, head, &feeds);
        let idle = Sampler::greedy();
        let bound: Vec<VerifyRow<'_>> = feeds
            .iter()
            .enumerate()
            .map(|(r, f)| {
                match f
                    .as_ref()
                    .and_then(|f| self.seqs.open.get(&f.seq).map(|s| (f, s)))
                {
                    Some((f, s)) => VerifyRow {
                        sampler: &s.req.sampler,
                        draw: s.generated.len() as u32,
                        drafts: f.tokens.get(1..1 + drafts[r]).unwrap_or_default(),
                    },
                    None => VerifyRow {
                        sampler: &idle,
                        draw: 0,
                        drafts: &[],
                    },
                }
            })
            .collect();
        bind_slots(&mut inputs, sampled, &bound, positions);
        let mut out = StepOutputs::default();
        self.exec.step(entry, &inputs, &mut out)?;
        let verdicts = read_verdicts(&out, bucket, positions)?;
        self.spec_stats.verify_steps += 1;
        let now = std::time::Instant::now();
        for (r, feed) in feeds.into_iter().enumerate() {
            let Some(feed) = feed else { continue };
            let (Some(seq), Some(verdict)) = (self.seqs.open.get_mut(&feed.seq), verdicts.get(r))
            else {
                continue;
            };
            // A faulty count past the row's drafts is clamped to them.
            let accepted = verdict.accepted.min(drafts[r]);
            self.spec_stats.verified_rows += 1;
            self.spec_stats.drafted_tokens += drafts[r] as u64;
            self.spec_stats.accepted_tokens += accepted as u64;
            // Written and kept: the fed token and the accepted drafts.
            seq.fed = feed.start + accepted + 1;
            seq.pending = None;
            seq.stepped = true;
            seq.awaiting = true;
            seq.first_pick.get_or_insert(now);
            for &token in &verdict.tokens[..=accepted] {
                picks.push(Pick {
                    seq: feed.seq,
                    token,
                    non_finite: verdict.non_finite,
                    logprobs: None,
                });
            }
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::PromptLookup;

    #[test]
    fn prompt_lookup_drafts_what_followed_the_latest_longest_match() {
        let lookup = PromptLookup::default();
        // "3 4" occurs twice before the end; the latest occurrence is followed by 9 9.
        let context = [1, 2, 3, 4, 5, 6, 7, 3, 4, 9, 9, 8, 3, 4];
        assert_eq!(lookup.draft(&context, 2), vec![9, 9]);
        assert_eq!(lookup.draft(&context, 5), vec![9, 9, 8, 3, 4]);
        // A longer n-gram wins over a later short match: "2 3 4" only at the start.
        let context = [2, 3, 4, 7, 7, 3, 4, 1, 2, 3, 4];
        assert_eq!(lookup.draft(&context, 3), vec![7, 7, 3]);
        // The draft stops at the end of the context.
        assert_eq!(lookup.draft(&[5, 6, 5], 4), vec![6, 5]);
        // Nothing to match, or no room asked for.
        assert!(lookup.draft(&[1, 2, 3], 4).is_empty());
        assert!(lookup.draft(&context, 0).is_empty());
        let short = PromptLookup {
            min_ngram: 3,
            max_ngram: 3,
        };
        assert!(short.draft(&[1, 2, 9, 1, 2], 2).is_empty());
    }
}
