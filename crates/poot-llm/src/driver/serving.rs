//! The serving surface: `open` admits a request into a row, `step` runs one device step over
//! every open sequence (a prefill chunk for one sequence, and one token for each of the others
//! in a batched decode step), `commit` applies the picks (end-of-generation, stop strings,
//! `max_new`) and `release` frees the row and its KV blocks. `generate` drives it for one row.

use std::collections::BTreeMap;
use std::time::Instant;

use poot_executor::{KernelTime, StepInputs, StepOutputs};
use poot_graph_ir::Slot;
use poot_models::lora::LORA_INDEX_SLOT;
use poot_text::{DecoderState, StreamDecoder};

use super::kv::KvPool;
use poot_executor::EntryId;

use super::{
    Driver, DriverError, EntryKey, FinishReason, GenerateRequest, GeneratedToken, Generation,
    GuideStats, Serving, TokenLogprob, check_request,
};
use crate::guide::{Guide, GuideError};
use crate::sampling::{
    Head, MASK_SLOT, MASKED_LOGIT, RowSampling, Sampler, bind_slots, mask_slot_bytes, read_picks,
};

/// An open sequence, from `open` until `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

/// One token a sequence produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqToken {
    pub id: u32,
    /// Text that can be shown now: held back while it could still become a stop string, so the
    /// concatenation of every token's text and the final `tail` is the answer.
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// What one sequence produced in a step.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqEvent {
    pub id: SeqId,
    pub tokens: Vec<SeqToken>,
    /// Set when the sequence finished; it stays open until released.
    pub finish: Option<FinishReason>,
    pub prompt_tokens: usize,
    /// Leading prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    /// Text released when the sequence finished that no token carries.
    pub tail: String,
    /// Why guided decoding finished the sequence, with [`FinishReason::Guide`].
    pub guide_error: Option<GuideError>,
}

/// The picks of one step, to hand to [`Driver::commit`].
#[derive(Debug, Default)]
#[must_use = "a step's picks are lost unless committed"]
pub struct StepPicks {
    picks: Vec<Pick>,
}

impl StepPicks {
    /// Sequences that got a new token.
    pub fn len(&self) -> usize {
        self.picks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.picks.is_empty()
    }

    pub(super) fn push(&mut self, pick: Pick) {
        self.picks.push(pick);
    }
}

#[derive(Debug)]
pub(super) struct Pick {
    pub seq: SeqId,
    pub token: i32,
    pub non_finite: bool,
    /// The chosen token's log-probability and the alternatives', when the head wrote them.
    pub logprobs: Option<(f32, Vec<(i32, f32)>)>,
}

/// An open sequence's state.
#[derive(Debug)]
pub(super) struct Sequence {
    pub(super) row: usize,
    pub(super) req: GenerateRequest,
    /// The request's adapter index (0 for the base model).
    pub(super) lora: i32,
    /// The known tokens to feed before decoding: the prompt, or after a preemption the prompt
    /// and every token generated so far (recomputed, the last one picking the next token).
    pub(super) tokens: Vec<u32>,
    /// Preempted: its blocks were returned to the pool, and it waits for room to recompute.
    pub(super) parked: bool,
    /// Positions whose keys and values are written.
    pub(super) fed: usize,
    /// The last committed token, to feed next.
    pub(super) pending: Option<u32>,
    pub(super) generated: Vec<u32>,
    pub(super) logprobs: Vec<TokenLogprob>,
    /// A step's pick for this sequence is not committed yet.
    pub(super) awaiting: bool,
    /// A step has run for the sequence (its first one clears its history row).
    pub(super) stepped: bool,
    pub(super) decoder: Option<DecoderState>,
    pub(super) text: String,
    pub(super) released: usize,
    pub(super) finish: Option<FinishReason>,
    pub(super) blocks: Vec<u32>,
    pub(super) cached_tokens: usize,
    /// `fed` when the prefix cache last saw the sequence's blocks.
    pub(super) published_until: usize,
    pub(super) opened: Instant,
    pub(super) first_pick: Option<Instant>,
    /// The draft model's sequence drafting for this one, once opened.
    pub(super) draft: Option<SeqId>,
    /// The request's grammar state, when it is guided.
    pub(super) guide: Option<Guide>,
    /// Why guided decoding stopped the sequence ([`FinishReason::Guide`]).
    pub(super) guide_error: Option<GuideError>,
}

impl Sequence {
    /// The next token to feed, if the sequence can run a step now.
    fn next_token(&self) -> Option<u32> {
        if self.finish.is_some() || self.awaiting || self.parked {
            return None;
        }
        match self.tokens.get(self.fed) {
            Some(&t) => Some(t),
            None => self.pending,
        }
    }

    /// Known tokens left to feed, up to the prompt's end first: a chunk never mixes prompt and
    /// recomputed output tokens, since the penalties' history counts them apart.
    fn prompt_left(&self) -> usize {
        let end = if self.fed < self.req.prompt.len() {
            self.req.prompt.len()
        } else {
            self.tokens.len()
        };
        end.saturating_sub(self.fed)
    }

    /// Positions before `fed` a prompt's last chunk may run again: back to the start of the
    /// region it feeds (the prompt, or the recomputed output after a preemption), since a chunk
    /// never mixes the two.
    fn rewindable(&self) -> usize {
        let region = if self.fed < self.req.prompt.len() {
            0
        } else {
            self.req.prompt.len()
        };
        self.fed.saturating_sub(region)
    }

    /// Positions the sequence's next step can write: its next chunk (or token), and the
    /// chained decode steps after it; never past what the request can reach.
    fn positions_ahead(&self, chunk: usize, chain: usize) -> usize {
        let ahead = self.prompt_left().min(chunk).max(1) + chain;
        (self.fed + ahead).min(self.req.prompt.len() + self.req.max_new)
    }
}

/// The open sequences and the rows and blocks they hold.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    rows: Vec<Option<SeqId>>,
    pub(super) open: BTreeMap<SeqId, Sequence>,
    next: u64,
    pool: KvPool,
    preemptions: u64,
}

impl Sequences {
    pub fn new(rows: usize, pool: KvPool) -> Sequences {
        Sequences {
            rows: vec![None; rows],
            pool,
            ..Sequences::default()
        }
    }

    /// Returns `id`'s blocks to the pool and parks it to recompute everything it has seen:
    /// its prompt and its output so far (whose last token then picks the next one).
    fn preempt(&mut self, id: SeqId) {
        let Some(seq) = self.open.get_mut(&id) else {
            return;
        };
        self.pool
            .release(&seq.blocks, &seq.req.prompt, seq.fed, seq.lora == 0);
        seq.blocks.clear();
        let mut tokens = seq.req.prompt.clone();
        tokens.extend(&seq.generated);
        seq.tokens = tokens;
        seq.fed = 0;
        seq.pending = None;
        seq.stepped = false;
        seq.published_until = 0;
        seq.parked = true;
        self.preemptions += 1;
    }

    /// Makes draft sequence `id` continue from `context` (its prompt, then the target's output
    /// so far) and draft `budget` tokens: it keeps the positions its cache holds that agree with
    /// `context`, recomputes the rest (the last known token picking its first draft), and
    /// finishes after `budget` new tokens. Its blocks and prefix-cache entries stay as they are.
    pub(super) fn resync(&mut self, id: SeqId, context: &[u32], budget: usize) {
        let Some(seq) = self.open.get_mut(&id) else {
            return;
        };
        let prompt = seq.req.prompt.len();
        // Positions 0..fed hold the keys and values of the prompt and then its own output.
        let written = seq.req.prompt.iter().chain(&seq.generated).take(seq.fed);
        let valid = written.zip(context).take_while(|(a, b)| a == b).count();
        seq.generated = context.get(prompt..).unwrap_or_default().to_vec();
        seq.tokens = context.to_vec();
        if !seq.parked {
            seq.fed = valid.min(context.len().saturating_sub(1));
        }
        seq.pending = None;
        seq.awaiting = false;
        seq.finish = None;
        seq.req.max_new = seq.generated.len() + budget;
        seq.logprobs.clear();
        seq.text.clear();
        seq.released = 0;
        seq.decoder = None;
    }
}

/// One row of a step about to run.
pub(super) struct RowFeed {
    pub seq: SeqId,
    pub row: usize,
    pub tokens: Vec<u32>,
    pub start: usize,
    /// The step's pick is this sequence's next token (its prompt is then fully fed).
    pub picks: bool,
}

impl RowFeed {
    /// Whether the row feeds a generated token (its prompt is done).
    fn decoding(&self, open: &BTreeMap<SeqId, Sequence>) -> bool {
        open.get(&self.seq).is_some_and(|s| s.fed >= s.tokens.len())
    }
}

impl Driver<Serving> {
    /// Sequences open now (finished ones count until released).
    pub fn open_count(&self) -> usize {
        self.seqs.open.len()
    }

    /// KV blocks free or evictable now (0 for the contiguous layout).
    pub fn free_blocks(&self) -> usize {
        self.seqs.pool.available()
    }

    /// Admits `req` into a free row, reserving the KV blocks its prompt and first tokens need
    /// (more are taken step by step; when the pool runs out a younger sequence is preempted).
    /// `NoRoom` when the rows or blocks are taken: retry after a release. Other errors are the
    /// request's.
    pub fn open(&mut self, req: GenerateRequest) -> Result<SeqId, DriverError> {
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
        check_request(&req, self.handle.config().vocab_size)?;
        let lora = self.lora_index(req.lora.as_deref())?;
        let guide = match &req.guide {
            Some(c) => Some(self.handle.guides()?.compile(c)?),
            None => None,
        };
        let text = self.handle.text()?;
        let seqs = &mut self.seqs;
        let no_room = |seqs: &Sequences| DriverError::NoRoom {
            open: seqs.open.len(),
            rows: seqs.rows.len(),
            blocks_needed: seqs.pool.blocks_for(n + req.max_new),
            blocks_free: seqs.pool.available(),
        };
        let Some(row) = seqs.rows.iter().position(Option::is_none) else {
            return Err(no_room(seqs));
        };
        // The repetition penalty counts every prompt token, so its sequences compute them all.
        // An adapter changes the keys and values: its prompts neither share nor publish blocks.
        let share = req.sampler.penalties.repetition == 1.0 && lora == 0;
        // The whole request must fit the pool alone (else it could never finish), and its
        // prompt plus a block of output must fit now.
        if seqs.pool.blocks_for(n + req.max_new) > seqs.pool.usable() && seqs.pool.paged() {
            return Err(no_room(seqs));
        }
        let first = (n + req.max_new.min(seqs.pool.block_tokens())).min(n + req.max_new);
        let Some(reservation) = seqs.pool.reserve(&req.prompt, first, share) else {
            return Err(no_room(seqs));
        };
        if !seqs.pool.paged() {
            // A contiguous row is reused in place: clear its carried state.
            if let Some(&entry) = self.entries.values().next() {
                self.exec.reset_state(entry)?;
            }
        }
        let id = SeqId(seqs.next);
        seqs.next += 1;
        seqs.rows[row] = Some(id);
        let decoder = text.tokenizer().stream_decoder(true).detach();
        seqs.open.insert(
            id,
            Sequence {
                row,
                tokens: req.prompt.clone(),
                parked: false,
                req,
                lora,
                fed: reservation.reused_tokens,
                pending: None,
                generated: Vec::new(),
                logprobs: Vec::new(),
                awaiting: false,
                stepped: false,
                decoder: Some(decoder),
                text: String::new(),
                released: 0,
                finish: None,
                cached_tokens: reservation.reused_tokens,
                published_until: reservation.reused_tokens,
                blocks: reservation.blocks,
                opened: Instant::now(),
                first_pick: None,
                draft: None,
                guide,
                guide_error: None,
            },
        );
        Ok(id)
    }

    /// Frees `id`'s row and blocks now. Unknown ids are ignored.
    pub fn release(&mut self, id: SeqId) {
        let seqs = &mut self.seqs;
        let Some(seq) = seqs.open.remove(&id) else {
            return;
        };
        if let Some(r) = seqs.rows.get_mut(seq.row) {
            *r = None;
        }
        seqs.pool
            .release(&seq.blocks, &seq.req.prompt, seq.fed, seq.lora == 0);
        if let (Some(draft), Some(id)) = (self.draft.as_deref_mut(), seq.draft) {
            draft.release(id);
        }
    }

    /// Sequences preempted so far (their KV blocks returned, recomputed later).
    pub fn preemptions(&self) -> u64 {
        self.seqs.preemptions
    }

    /// Before a step: parked sequences take their blocks back when the pool has room (oldest
    /// first), then every runnable sequence's blocks grow to cover what the step can write.
    /// When the pool runs out, the youngest running sequence is preempted: its blocks go back
    /// (its prompt blocks stay in the prefix cache) and it will recompute its prompt and output.
    fn make_room(&mut self) {
        let chunk = self.options.prefill_chunk;
        // A verification step writes the speculated positions past the next token too.
        let chain = self.options.chain.max(self.options.speculation.tokens);
        let seqs = &mut self.seqs;
        if !seqs.pool.paged() {
            return;
        }
        let ids: Vec<SeqId> = seqs.open.keys().copied().collect();
        for &id in &ids {
            let Some(seq) = seqs.open.get_mut(&id) else {
                continue;
            };
            if !seq.parked {
                continue;
            }
            // A resumed sequence takes everything it can still need, so it never grows again
            // and cannot push the sequence that preempted it out in turn.
            // Reused blocks are not fed again, so they must hold nothing a penalty counts: the
            // repetition penalty counts every token, presence and frequency the output.
            let p = seq.req.sampler.penalties;
            let share =
                p.repetition == 1.0 && p.presence == 0.0 && p.frequency == 0.0 && seq.lora == 0;
            let total = seq.req.prompt.len() + seq.req.max_new;
            let Some(r) = seqs.pool.reserve(&seq.tokens, total, share) else {
                // Older parked sequences resume first.
                break;
            };
            seq.blocks = r.blocks;
            seq.fed = r.reused_tokens;
            seq.published_until = r.reused_tokens;
            seq.parked = false;
        }
        for &id in &ids {
            while let Some(seq) = seqs.open.get_mut(&id) {
                if seq.parked || seq.finish.is_some() {
                    break;
                }
                let positions = seq.positions_ahead(chunk, chain);
                if seqs.pool.grow(&mut seq.blocks, positions) {
                    break;
                }
                // The youngest other sequence holding blocks makes room; with none, this one
                // waits (parked) for the others to finish.
                let victim = ids
                    .iter()
                    .rev()
                    .copied()
                    .find(|v| {
                        *v != id
                            && seqs
                                .open
                                .get(v)
                                .is_some_and(|s| !s.parked && !s.blocks.is_empty())
                    })
                    .unwrap_or(id);
                seqs.preempt(victim);
                if victim == id {
                    break;
                }
            }
        }
    }

    /// Runs one device step over the open sequences, sized to the work. Every sequence with a
    /// token to decode (or only its prompt's last token left) gets one row of a batched
    /// single-token step, run with the smallest prepared row bucket that holds them. Prompts
    /// then advance under the token budget (`max_batched_tokens` less the decoding rows), oldest
    /// first, each by the largest prepared chunk that fits what is left of it and of the budget;
    /// a prompt no chunk fits joins the batched step with one token. Sequences whose pick awaits
    /// a commit sit it out.
    pub fn step(&mut self) -> Result<StepPicks, DriverError> {
        self.make_room();
        let mut singles = Vec::new();
        // Sequences with at least two prompt tokens left: (id, tokens left, head).
        let mut prompts = Vec::new();
        for (&id, seq) in &self.seqs.open {
            let Some(first) = seq.next_token() else {
                continue;
            };
            let left = seq.prompt_left();
            if left <= 1 {
                singles.push(RowFeed {
                    seq: id,
                    row: 0,
                    tokens: vec![first],
                    start: seq.fed,
                    picks: seq.fed + 1 >= seq.tokens.len(),
                });
            } else {
                prompts.push((id, left, seq.req.head()));
            }
        }
        let mut budget = self
            .options
            .max_batched_tokens
            .saturating_sub(singles.len())
            .max(1);
        let mut prefills = Vec::new();
        let buckets = self.options.chunk_buckets();
        let paged = self.seqs.pool.paged();
        for (id, left, head) in prompts {
            if budget == 0 || singles.len() >= self.options.rows {
                break;
            }
            let fits = left.min(budget);
            // A prompt that would get less than a whole chunk waits for the next step rather
            // than splitting into small launches, unless nothing else prefills this step.
            if !prefills.is_empty() && fits < left.min(self.options.prefill_chunk) {
                break;
            }
            let Some(rewindable) = self.seqs.open.get(&id).map(Sequence::rewindable) else {
                continue;
            };
            let mut prepared = |t: usize| {
                self.ensure(EntryKey {
                    rows: 1,
                    tokens: t,
                    head,
                })
                .is_some()
            };
            // A prompt's last piece runs as one chunk of the smallest size that holds it,
            // reaching back over positions already written, rather than as a launch for each
            // power of two in it (every launch reads all the weights). The positions run again
            // keep their keys and values: a paged step writes them to the scratch block.
            let last = (paged && fits == left)
                .then(|| {
                    buckets
                        .iter()
                        .copied()
                        .filter(|&t| t >= left && t <= left + rewindable)
                        .find(|&t| prepared(t))
                })
                .flatten();
            let chunk = last.or_else(|| {
                buckets
                    .iter()
                    .rev()
                    .copied()
                    .filter(|&t| t <= fits)
                    .find(|&t| prepared(t))
            });
            let Some(seq) = self.seqs.open.get(&id) else {
                continue;
            };
            // Positions the feed runs, and those it adds (fewer where it reaches back).
            let run = chunk.unwrap_or(1);
            let take = run.min(left);
            let start = seq.fed + take - run;
            let feed = RowFeed {
                seq: id,
                row: 0,
                tokens: seq.tokens[start..seq.fed + take].to_vec(),
                start,
                picks: seq.fed + take >= seq.tokens.len(),
            };
            budget = budget.saturating_sub(run);
            if chunk.is_some() {
                prefills.push(feed);
            } else {
                singles.push(feed);
            }
        }
        let mut picks = StepPicks::default();
        // Decoding rows that may speculate get drafts and one verification step.
        let (speculating, mut singles): (Vec<_>, Vec<_>) = singles
            .into_iter()
            .map(|f| {
                let budget = self.draft_budget(&f);
                (f, budget)
            })
            .partition(|(_, budget)| budget.is_some());
        // A row that may speculate but got no drafts decodes one token and looks again at the
        // next step, rather than chaining past tokens its drafts could have covered.
        let speculative = !speculating.is_empty();
        if speculative {
            let rows = speculating
                .into_iter()
                .map(|(f, b)| (f, b.unwrap_or(0)))
                .collect();
            let (verifies, undrafted) = self.make_drafts(rows)?;
            singles.extend(undrafted.into_iter().map(|f| (f, None)));
            if !verifies.is_empty() {
                let back = self.verify(verifies, &mut picks)?;
                singles.extend(back.into_iter().map(|f| (f, None)));
            }
        }
        let singles: Vec<RowFeed> = singles.into_iter().map(|(f, _)| f).collect();
        let prefilled = !prefills.is_empty();
        for feed in prefills {
            self.run(1, vec![Some(feed)], &mut picks)?;
        }
        if !singles.is_empty() {
            // Chain when nothing needs the host between tokens: no prefill, every row decoding,
            // no row guided (its next mask follows each token).
            let open = &self.seqs.open;
            let guided = singles
                .iter()
                .any(|f| open.get(&f.seq).is_some_and(|s| s.guide.is_some()));
            let steps = if !prefilled
                && !speculative
                && !guided
                && singles.iter().all(|f| f.decoding(open))
            {
                singles
                    .iter()
                    .filter_map(|f| open.get(&f.seq))
                    .map(|s| s.req.max_new.saturating_sub(s.generated.len()))
                    .min()
                    .unwrap_or(1)
                    .clamp(1, self.options.chain)
            } else {
                1
            };
            let mut feeds: Vec<Option<RowFeed>> = singles.into_iter().map(Some).collect();
            for (r, feed) in feeds.iter_mut().flatten().enumerate() {
                feed.row = r;
            }
            self.run(steps, feeds, &mut picks)?;
        }
        self.publish_prompt_blocks();
        Ok(picks)
    }

    /// Publishes the prompt blocks running sequences have filled, for the prefix cache.
    fn publish_prompt_blocks(&mut self) {
        let seqs = &mut self.seqs;
        for seq in seqs.open.values() {
            // Only while the prompt is being written, and only for sequences whose blocks hold
            // nothing but the prompt's own keys and values up to `fed`.
            if seq.lora == 0 && seq.fed <= seq.req.prompt.len() + 1 && seq.fed > seq.published_until
            {
                seqs.pool.publish(&seq.blocks, &seq.req.prompt, seq.fed);
            }
        }
        for seq in seqs.open.values_mut() {
            seq.published_until = seq.fed;
        }
    }

    /// The entry for `key`, preparing it now if it is pending. `None` when it cannot be
    /// prepared (the failure is remembered, and steps use a larger prepared entry instead).
    pub(super) fn ensure(&mut self, key: EntryKey) -> Option<EntryId> {
        if let Some(&entry) = self.entries.get(&key) {
            return Some(entry);
        }
        if self.failed.contains(&key) || !self.pending.contains(&key) {
            return None;
        }
        self.pending.retain(|k| *k != key);
        let fits =
            self.entries.len() < self.options.prepared.max_entries && self.check_retained().is_ok();
        if !fits || self.prepare(self.layout, key).is_err() {
            self.failed.insert(key);
            return None;
        }
        self.entries.get(&key).copied()
    }

    /// Prepares the next pending entry (a server calls this when idle). Returns whether more
    /// are pending.
    pub fn warm_one(&mut self) -> bool {
        if let Some(&key) = self.pending.first() {
            self.ensure(key);
        }
        !self.pending.is_empty()
    }

    /// Prepares every pending entry now (a benchmark does this before timing).
    pub fn warm_all(&mut self) {
        while self.warm_one() {}
    }

    /// What the prefix cache has done so far.
    pub fn prefix_cache_stats(&self) -> super::PrefixCacheStats {
        self.seqs.pool.stats()
    }

    /// Runs the feeds (all of one token count) in the smallest prepared entry of that token
    /// count with enough rows (the extra rows are padding), `steps` times chained on the device
    /// when `steps` is above 1.
    fn run(
        &mut self,
        steps: usize,
        mut feeds: Vec<Option<RowFeed>>,
        picks: &mut StepPicks,
    ) -> Result<(), DriverError> {
        let tokens = feeds
            .iter()
            .flatten()
            .map(|f| f.tokens.len())
            .max()
            .unwrap_or(1);
        let open = &self.seqs.open;
        // The narrowest head serving every row: each head does what the ones before it do.
        let rank = |h: Head| {
            [Head::Greedy, Head::Sample, Head::Adjusted, Head::Logprobs]
                .iter()
                .position(|&x| x == h)
                .unwrap_or(0)
        };
        let head = feeds
            .iter()
            .flatten()
            .filter_map(|f| open.get(&f.seq))
            .map(|s| s.req.head())
            .max_by_key(|&h| rank(h))
            .unwrap_or(Head::Greedy);
        let needed = feeds.len();
        let buckets = if tokens == 1 {
            self.options.row_buckets()
        } else {
            vec![1]
        };
        let chosen = buckets
            .into_iter()
            .filter(|&rows| rows >= needed)
            .find_map(|rows| {
                self.ensure(EntryKey { rows, tokens, head })
                    .map(|e| (rows, e))
            });
        let Some((rows, entry)) = chosen else {
            return Err(DriverError::Unprepared {
                rows: needed,
                tokens,
                head,
            });
        };
        feeds.resize_with(rows, || None);
        *self.runs.entry((rows, tokens)).or_default() += 1;
        let key = EntryKey { rows, tokens, head };
        let mut inputs = self.inputs(tokens, head, &feeds);
        // Guided rows' masks are computed while the device runs the forward pass: the mask
        // slot is left out and filled once the kernels before the sampling suffix are queued.
        let guided = head.adjusts() && guided_picks(&self.seqs.open, &feeds) > 0;
        if guided {
            inputs.remove(&Slot::Named(MASK_SLOT.to_string()));
        }
        // Each step's picks, row by row.
        let chained = match self.chains.get(&key) {
            Some(&chain) if steps > 1 => Some(self.exec.step_chain(chain, &inputs, steps)?),
            _ => None,
        };
        let per_step: Vec<Vec<crate::sampling::Pick>> = match chained {
            Some(words) => words
                .chunks_exact(2 * rows)
                .map(|step| {
                    step.chunks_exact(2)
                        .map(|w| crate::sampling::Pick {
                            token: w[0],
                            non_finite: w[1] != 0,
                            logprobs: None,
                        })
                        .collect()
                })
                .collect(),
            None => {
                let mut out = StepOutputs::default();
                let vocab = self.handle.config().vocab_size;
                if guided {
                    let (open, stats) = (&mut self.seqs.open, &mut self.guide_stats);
                    let mut late = || {
                        let masks = guide_masks(open, stats, &feeds);
                        let mut slot = StepInputs::new();
                        let bytes = mask_slot_bytes(masks.iter().map(Option::as_deref), vocab);
                        slot.set(Slot::Named(MASK_SLOT.to_string()), bytes);
                        slot
                    };
                    self.exec
                        .step_overlapped(entry, &inputs, &mut late, &mut out)?;
                } else {
                    self.exec.step(entry, &inputs, &mut out)?;
                }
                vec![read_picks(&out, head, rows, vocab)?]
            }
        };
        let steps = per_step.len();
        let now = Instant::now();
        for (r, feed) in feeds.into_iter().enumerate() {
            let Some(feed) = feed else { continue };
            let Some(seq) = self.seqs.open.get_mut(&feed.seq) else {
                continue;
            };
            seq.fed = feed.start + tokens + steps - 1;
            seq.stepped = true;
            if seq.fed > seq.tokens.len() {
                seq.pending = None;
            }
            if feed.picks {
                seq.awaiting = true;
                seq.first_pick.get_or_insert(now);
                for step in &per_step {
                    let p = step.get(r);
                    picks.picks.push(Pick {
                        seq: feed.seq,
                        token: p.map_or(-1, |p| p.token),
                        non_finite: p.is_none_or(|p| p.non_finite),
                        logprobs: p.and_then(|p| p.logprobs.clone()),
                    });
                }
            }
        }
        Ok(())
    }

    /// The slot values of one step: tokens, positions, the paged maps and the samplers (a
    /// verification head's are bound by the caller). An adjusting head's mask slot allows every
    /// token: guided rows' masks replace it while the step runs.
    pub(super) fn inputs(
        &self,
        tokens: usize,
        head: Head,
        feeds: &[Option<RowFeed>],
    ) -> StepInputs {
        let (open, pool) = (&self.seqs.open, &self.seqs.pool);
        let rows = feeds.len();
        let mut ids = Vec::with_capacity(rows * tokens);
        let mut pos = Vec::with_capacity(rows * tokens);
        let mut table = Vec::new();
        let mut writes = Vec::new();
        let idle = Sampler::greedy();
        let mut sampling = Vec::with_capacity(rows);
        let mut lora = Vec::with_capacity(rows);
        for (r, feed) in feeds.iter().enumerate() {
            let seq = feed.as_ref().and_then(|f| open.get(&f.seq).map(|s| (f, s)));
            lora.push(seq.map_or(0, |(_, s)| s.lora));
            match seq {
                Some((f, s)) => {
                    ids.extend(f.tokens.iter().map(|&t| t as i32));
                    pos.extend((f.start..f.start + tokens).map(|p| p as i32));
                    table.extend(pool.table(&s.blocks));
                    // Positions already written (a last chunk reaching back) keep their keys
                    // and values, which other sequences may share: the rerun writes to scratch.
                    writes.extend((f.start..f.start + tokens).map(|p| {
                        if p < s.fed {
                            pool.scratch_slot()
                        } else {
                            pool.slot(&s.blocks, p)
                        }
                    }));
                    let rerun = s.fed.saturating_sub(f.start).min(f.tokens.len());
                    sampling.push(RowSampling {
                        sampler: &s.req.sampler,
                        draw: s.generated.len() as u32,
                        // The history counts each position once.
                        fed: &f.tokens[rerun..],
                        generated: f.start >= s.req.prompt.len(),
                        history_row: s.row,
                        fresh: !s.stepped,
                        mask: None,
                    });
                }
                None => {
                    ids.extend(std::iter::repeat_n(0, tokens));
                    pos.extend(std::iter::repeat_n(0, tokens));
                    table.extend(pool.scratch_table());
                    writes.extend(std::iter::repeat_n(pool.scratch_slot(), tokens));
                    // A padding row is a free row: its history row is its own and stays clear.
                    sampling.push(RowSampling {
                        sampler: &idle,
                        draw: 0,
                        fed: &[],
                        generated: false,
                        history_row: r,
                        fresh: true,
                        mask: None,
                    });
                }
            }
        }
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, &ids);
        inputs.set_i32(Slot::Pos, &pos);
        if pool.paged() {
            inputs.set_i32(Slot::SlotMap, &table);
            inputs.set_i32(Slot::WriteMap, &writes);
        }
        if !head.verifies() {
            let vocab = self.handle.config().vocab_size;
            bind_slots(&mut inputs, head, &sampling, tokens, vocab);
        }
        if self.options.lora.is_some() {
            inputs.set_i32(Slot::Named(LORA_INDEX_SLOT.to_string()), &lora);
        }
        inputs
    }

    /// Times every kernel of the step of `tokens` new positions per row (1: a decode step; a
    /// prefill chunk's length: a prompt chunk) with `head` over all rows, each row's positions
    /// starting at `position` (`reps` runs per kernel), then clears the carried state. Library
    /// contractions are not timed (the whole step's time less the kernels' is theirs). `None`
    /// when the backend cannot time kernels. Refused while sequences are open.
    pub fn profile_step(
        &mut self,
        position: usize,
        tokens: usize,
        reps: u32,
        head: Head,
    ) -> Result<Option<Vec<KernelTime>>, DriverError> {
        if !self.seqs.open.is_empty() {
            return Err(DriverError::Busy {
                open: self.seqs.open.len(),
            });
        }
        let rows = self.options.rows;
        let key = EntryKey { rows, tokens, head };
        let entry = self
            .ensure(key)
            .ok_or(DriverError::Unprepared { rows, tokens, head })?;
        let feeds: Vec<Option<RowFeed>> = (0..rows).map(|_| None).collect();
        let mut inputs = self.inputs(tokens, head, &feeds);
        let last = self.options.capacity.saturating_sub(tokens);
        let at = position.min(last);
        let positions: Vec<i32> = (0..rows)
            .flat_map(|_| (at..at + tokens).map(|p| p as i32))
            .collect();
        inputs.set_i32(Slot::Pos, &positions);
        let times = self.exec.profile(entry, &inputs, reps)?;
        self.exec.reset_state(entry)?;
        Ok(times)
    }

    /// Applies a step's picks and reports what each sequence produced.
    pub fn commit(&mut self, picks: StepPicks) -> Result<Vec<SeqEvent>, DriverError> {
        let vocab = self.handle.config().vocab_size;
        let handle = std::sync::Arc::clone(&self.handle);
        let text = handle.text()?;
        let tokenizer = text.tokenizer();
        let eog: Vec<u32> = {
            let sp = tokenizer.special_tokens();
            let mut v = sp.eog.clone();
            v.extend(sp.eos);
            v.extend(handle.config().eos_ids.iter().copied());
            v
        };
        let mut events: Vec<SeqEvent> = Vec::with_capacity(picks.picks.len());
        let mut bad = None;
        for pick in picks.picks {
            let Some(seq) = self.seqs.open.get_mut(&pick.seq) else {
                continue;
            };
            seq.awaiting = false;
            if seq.finish.is_some() {
                // A chained step past the sequence's end.
                continue;
            }
            let at = match events.iter().position(|e| e.id == pick.seq) {
                Some(at) => at,
                None => {
                    events.push(SeqEvent {
                        id: pick.seq,
                        tokens: Vec::new(),
                        finish: None,
                        prompt_tokens: seq.req.prompt.len(),
                        cached_tokens: seq.cached_tokens,
                        tail: String::new(),
                        guide_error: None,
                    });
                    events.len() - 1
                }
            };
            let event = &mut events[at];
            let mut decoder = StreamDecoder::resume(
                tokenizer,
                seq.decoder
                    .take()
                    .unwrap_or_else(|| tokenizer.stream_decoder(true).detach()),
            );
            let id = u32::try_from(pick.token)
                .ok()
                .filter(|&t| (t as usize) < vocab);
            if pick.non_finite {
                seq.finish = Some(FinishReason::NonFinite);
            } else if seq.guide_error.is_some() {
                seq.finish = Some(FinishReason::Guide);
            } else if seq.generated.len() >= seq.req.max_new {
                seq.finish = Some(FinishReason::Length);
            } else if let Some(id) = id {
                // A guided row's mask allowed this token: the guide follows it (an end token
                // only where the grammar accepts).
                let complete = match seq.guide.as_mut().map(|g| (g.advance(id), g)) {
                    Some((Ok(()), g)) => g.is_finished(),
                    Some((Err(e), _)) => {
                        seq.guide_error = Some(e);
                        false
                    }
                    None => false,
                };
                if seq.guide_error.is_some() {
                    seq.finish = Some(FinishReason::Guide);
                } else if (!seq.req.ignore_eos || seq.guide.is_some()) && eog.contains(&id) {
                    seq.finish = Some(FinishReason::Eos);
                } else {
                    let logprob = match (pick.logprobs, seq.req.top_logprobs) {
                        (Some((logprob, top)), Some(n)) => Some(TokenLogprob {
                            logprob,
                            top: top
                                .into_iter()
                                .take(n)
                                // A token the mask disallowed is no alternative.
                                .filter(|&(_, lp)| lp > MASKED_LOGIT / 2.0)
                                .filter_map(|(t, lp)| {
                                    u32::try_from(t)
                                        .ok()
                                        .filter(|&t| (t as usize) < vocab)
                                        .map(|t| (t, lp))
                                })
                                .collect(),
                        }),
                        _ => None,
                    };
                    seq.logprobs.extend(logprob.clone());
                    seq.generated.push(id);
                    seq.text.push_str(&decoder.push(id)?);
                    if let Some(at) = seq
                        .req
                        .stops
                        .iter()
                        .filter_map(|s| seq.text.find(s.as_str()))
                        .min()
                    {
                        seq.text.truncate(at);
                        seq.finish = Some(FinishReason::Stop);
                    } else if complete {
                        seq.finish = Some(FinishReason::Stop);
                    } else if seq.generated.len() == seq.req.max_new {
                        seq.finish = Some(FinishReason::Length);
                    } else {
                        seq.pending = Some(id);
                    }
                    let shown = if seq.finish.is_some() {
                        seq.text.len()
                    } else {
                        seq.text.len() - held_back(&seq.text, &seq.req.stops)
                    };
                    let piece = seq.text.get(seq.released..shown).unwrap_or_default();
                    event.tokens.push(SeqToken {
                        id,
                        text: piece.to_string(),
                        logprob,
                    });
                    seq.released = shown.max(seq.released);
                }
            } else {
                seq.finish = Some(FinishReason::Cancelled);
                bad = Some(DriverError::BadToken {
                    token: pick.token,
                    vocab,
                });
            }
            if seq.finish.is_some() {
                if seq.finish != Some(FinishReason::Stop) {
                    seq.text.push_str(&decoder.finish()?);
                }
                event.tail = seq.text.get(seq.released..).unwrap_or_default().to_string();
                seq.released = seq.text.len();
                event.finish = seq.finish;
                event.guide_error = seq.guide_error.clone();
            }
            seq.decoder = Some(decoder.detach());
        }
        match bad {
            Some(e) => Err(e),
            None => Ok(events),
        }
    }

    /// Generates for one prompt, calling `sink` with each token and its text as it comes. The
    /// text a sink sees is held back while it could still become a stop string.
    pub fn generate(
        &mut self,
        req: GenerateRequest,
        sink: &mut dyn FnMut(&GeneratedToken<'_>) -> super::GenerationControl,
    ) -> Result<Generation, DriverError> {
        let id = self.open(req)?;
        let result = self.drive(id, sink);
        self.release(id);
        result
    }

    fn drive(
        &mut self,
        id: SeqId,
        sink: &mut dyn FnMut(&GeneratedToken<'_>) -> super::GenerationControl,
    ) -> Result<Generation, DriverError> {
        let mut cancelled = false;
        loop {
            // A mid-prompt chunk picks nothing; the loop ends when the sequence finishes.
            let picks = self.step()?;
            for event in self.commit(picks)? {
                if event.id != id {
                    continue;
                }
                for t in &event.tokens {
                    let token = GeneratedToken {
                        id: t.id,
                        text: &t.text,
                        logprob: t.logprob.as_ref(),
                    };
                    if sink(&token).is_break() {
                        cancelled = true;
                        break;
                    }
                }
            }
            let Some(seq) = self.seqs.open.get(&id) else {
                return Err(DriverError::UnknownSequence(id));
            };
            if cancelled || seq.finish.is_some() {
                let finish = if cancelled {
                    FinishReason::Cancelled
                } else {
                    seq.finish.unwrap_or(FinishReason::Length)
                };
                if finish == FinishReason::NonFinite {
                    return Err(DriverError::NonFinite {
                        step: seq.generated.len(),
                    });
                }
                if let Some(e) = &seq.guide_error {
                    return Err(DriverError::Guide(e.clone()));
                }
                let first = seq.first_pick.unwrap_or(seq.opened);
                return Ok(Generation {
                    tokens: seq.generated.clone(),
                    logprobs: seq.logprobs.clone(),
                    text: seq.text.clone(),
                    finish,
                    prompt_tokens: seq.req.prompt.len(),
                    prefill_seconds: (first - seq.opened).as_secs_f64(),
                    decode_seconds: first.elapsed().as_secs_f64(),
                });
            }
        }
    }
}

/// Bytes at the end of `text` that could begin one of `stops`: not shown until the next token
/// settles them.
fn held_back(text: &str, stops: &[String]) -> usize {
    stops
        .iter()
        .map(|stop| {
            (1..stop.len().min(text.len() + 1))
                .rev()
                .find(|&k| {
                    text.is_char_boundary(text.len() - k)
                        && stop.is_char_boundary(k)
                        && text.ends_with(&stop[..k])
                })
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// How many of the feeds pick a guided sequence's next token.
fn guided_picks(open: &BTreeMap<SeqId, Sequence>, feeds: &[Option<RowFeed>]) -> usize {
    feeds
        .iter()
        .flatten()
        .filter(|f| f.picks && open.get(&f.seq).is_some_and(|s| s.guide.is_some()))
        .count()
}

/// The allowed-token mask of each feed that picks a guided sequence's next token, computed
/// for the rows in parallel. A guide that fails runs its row unconstrained this once: the
/// commit discards the pick and finishes the sequence ([`FinishReason::Guide`]).
fn guide_masks(
    open: &mut BTreeMap<SeqId, Sequence>,
    stats: &mut GuideStats,
    feeds: &[Option<RowFeed>],
) -> Vec<Option<Vec<u32>>> {
    use rayon::prelude::*;
    let picking: Vec<SeqId> = feeds
        .iter()
        .flatten()
        .filter(|f| f.picks)
        .map(|f| f.seq)
        .collect();
    let mut work: Vec<(SeqId, &mut Sequence)> = open
        .iter_mut()
        .filter(|(id, s)| {
            s.guide.is_some()
                && s.finish.is_none()
                && s.guide_error.is_none()
                && picking.contains(id)
        })
        .map(|(&id, s)| (id, s))
        .collect();
    if work.is_empty() {
        return vec![None; feeds.len()];
    }
    let started = Instant::now();
    let one = |(id, seq): &mut (SeqId, &mut Sequence)| {
        let at = Instant::now();
        let mask = seq.guide.as_mut().map(Guide::mask);
        let mask = match mask {
            Some(Ok(m)) => Some(m),
            // The commit finishes the sequence and drops this step's pick.
            Some(Err(e)) => {
                seq.guide_error = Some(e);
                None
            }
            None => None,
        };
        (*id, mask, at.elapsed().as_secs_f64())
    };
    // One row computes here: handing it to the pool costs more than some masks.
    let timed: Vec<(SeqId, Option<Vec<u32>>, f64)> = if work.len() > 1 {
        work.par_iter_mut().map(one).collect()
    } else {
        work.iter_mut().map(one).collect()
    };
    stats.wait_seconds += started.elapsed().as_secs_f64();
    stats.masks += timed.len() as u64;
    stats.mask_seconds += timed.iter().map(|t| t.2).sum::<f64>();
    feeds
        .iter()
        .map(|f| {
            let f = f.as_ref().filter(|f| f.picks)?;
            timed
                .iter()
                .find(|t| t.0 == f.seq)
                .and_then(|t| t.1.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn text_that_could_start_a_stop_string_is_held_back() {
        let stops = vec!["\nUser:".to_string(), "END".to_string()];
        assert_eq!(held_back("hello\nUs", &stops), 3);
        assert_eq!(held_back("hello E", &stops), 1);
        assert_eq!(held_back("hello", &stops), 0);
        assert_eq!(held_back("", &stops), 0);
        assert_eq!(held_back("é", &["éa".to_string()]), 2);
    }
}
