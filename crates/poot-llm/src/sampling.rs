//! The sampling suffix: the equations appended to a step's graph so the device picks each row's
//! next token and the host reads back a token id and a non-finite flag (plus the log-probability
//! record when asked), never the logits.
//!
//! Sampler parameters are slot values and the token history is device state, so one entry serves
//! every request. Rules, per row, in order:
//! 1. logit bias: each listed token's bias is added to its logit (an id listed twice gets the
//!    sum);
//! 2. repetition penalty (llama.cpp, vLLM), over every token the sequence holds, prompt and
//!    output: a positive logit is divided by it, a negative one multiplied;
//! 3. presence and frequency penalties (OpenAI), over output tokens only:
//!    `logit - count * frequency - (count > 0) * presence`;
//! 4. temperature 0: the arg-max of the adjusted logits (ties to the lower id);
//! 5. otherwise `adjusted / temperature` sampled by the Gumbel-max trick, with uniform draws from
//!    a counter-based hash of (seed, step, index), so a seed reproduces a run exactly;
//! 6. with top-k, top-p or min-p, the draw is among the `CANDIDATES` most likely tokens: ranks
//!    past top-k, tokens after the cumulative probability (of the full distribution) reaches
//!    top-p, and tokens below min-p times the most likely one's probability are excluded. A
//!    top-k above `CANDIDATES` acts as `CANDIDATES`, and a nucleus wider than the candidates is
//!    cut there.
//!
//! The adjusting heads also read an allowed-token bit mask per row ([`MASK_SLOT`], guided
//! decoding): a token whose bit is clear gets the logit [`MASKED_LOGIT`] after the bias and
//! penalties (so no bias or penalty can bring it back) and before temperature and the draw, so
//! the arg-max, both Gumbel draws and the log-probabilities see only allowed tokens. The
//! non-finite flag reads the logits before the mask, so a masked-off NaN is still reported. An
//! unconstrained row's mask is all ones.
//!
//! Log-probabilities are the log-softmax of `adjusted / temperature` (temperature 1 for a greedy
//! row): the chosen token's and the [`MAX_TOP_LOGPROBS`] most likely tokens' (ties to the lower
//! id), before top-k, top-p and min-p; the host keeps as many as the request asked for.
//!
//! The token history is two carried states of `[rows, vocab]` counts: every token a row's
//! sequence holds, and its output tokens alone. Each step adds the tokens the host names in the
//! history slot (the tokens the step feeds, so a prefill chunk's thrown-away draw is never
//! counted) to its row, as prompt or as output by the row's flag, before the penalties read the
//! counts. `reset_state` zeroes them for a new sequence.

use poot_executor::{StepInputs, StepOutputs};
use poot_graph_ir::ops::{binary_bcast, scalar_like};
use poot_graph_ir::{
    BinaryOp, Builder, BuilderError, CompareOp, DType, Graph, Outputs, Slot, Storage, TensorType,
    TraceLimits, Traced, UnaryOp,
};

pub mod verify;

/// Candidates a restricted draw chooses among.
pub const CANDIDATES: usize = 32;

/// The slot of each row's sampler parameters, f32 `[rows, 4]`: temperature, top-p, min-p, top-k.
pub const SAMPLER_SLOT: &str = "sampler";
/// The slot of each row's draw counter, u32 `[rows, 2]`: the seed's hash and the step number.
pub const SEED_SLOT: &str = "sample_seed";
/// The slot of each row's penalties, f32 `[rows, 4]`: repetition, presence, frequency, and 1
/// when the row's history tokens this step are its own earlier draws (0: prompt tokens).
pub const PENALTY_SLOT: &str = "sample_penalties";
/// The slot of the tokens each row adds to its history this step, i32 `[rows, tokens]` (the
/// step's tokens per row); -1 adds nothing.
pub const HISTORY_SLOT: &str = "sample_history";
/// The slot of each row's logit-bias token ids, i32 `[rows, MAX_LOGIT_BIAS]`.
pub const BIAS_IDS_SLOT: &str = "sample_bias_ids";
/// The slot of each row's logit biases, f32 `[rows, MAX_LOGIT_BIAS]`, one per id.
pub const BIAS_SLOT: &str = "sample_bias";
/// The state counting every token of each row's sequence, f32 `[rows, vocab]`.
pub const SEEN_STATE: &str = "sample.seen";
/// The slot naming each row's history row and whether the row starts a sequence, i32
/// `[rows, 2]`: the history states have one row per driver row, shared by every entry.
pub const HISTORY_ROWS_SLOT: &str = "sample_rows";
/// The state counting each row's output tokens, f32 `[rows, vocab]`.
pub const OUTPUT_STATE: &str = "sample.output";
/// The slot of each row's allowed-token bit mask, u32 `[rows, mask_words(vocab)]`: token `t`
/// is allowed when bit `t % 32` of word `t / 32` is set (llguidance's layout).
pub const MASK_SLOT: &str = "sample_mask";
/// The logit a disallowed token gets: finite (the non-finite flag stays for real faults) and
/// still far below any real logit after division by the smallest temperature (1e-6).
pub const MASKED_LOGIT: f32 = -1e30;

/// u32 words of one row's allowed-token mask over a vocabulary of `vocab`.
pub fn mask_words(vocab: usize) -> usize {
    vocab.div_ceil(32)
}

/// How a step ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Head {
    /// The logits themselves (a caller that asks for them).
    Logits,
    /// The arg-max token: the narrowest head, for greedy rows.
    Greedy,
    /// Temperature, top-k, top-p and min-p sampling.
    Sample,
    /// Logit bias and penalties from the device's token history, then a greedy or sampled pick.
    Adjusted,
    /// [`Head::Adjusted`] plus the log-probability record.
    Logprobs,
    /// Speculative verification of greedy rows over a step of `k + 1` tokens a row (the last
    /// accepted token and `k` drafts): the arg-max at every position, and how many drafts
    /// equal it. See [`verify`].
    Verify,
    /// [`Head::Verify`] for rows that sample: the speculative rejection rule at each position,
    /// so the tokens kept follow the target's distribution (greedy rows as in `Verify`).
    VerifySample,
}

impl Head {
    /// Whether the head reads and updates the token history.
    pub fn adjusts(self) -> bool {
        matches!(self, Head::Adjusted | Head::Logprobs)
    }

    /// Whether the head reads the sampler and seed slots.
    pub fn samples(self) -> bool {
        matches!(
            self,
            Head::Sample | Head::Adjusted | Head::Logprobs | Head::VerifySample
        )
    }

    /// Whether the head verifies drafted tokens (its step returns every position's logits).
    pub fn verifies(self) -> bool {
        matches!(self, Head::Verify | Head::VerifySample)
    }
}

/// Most logit-bias entries one request may carry.
pub const MAX_LOGIT_BIAS: usize = 64;
/// Most alternatives a request may ask log-probabilities for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Penalties on tokens the sequence has already seen, from a token-count history kept on the
/// device. Repetition follows llama.cpp/vLLM (prompt and output tokens: positive logits divided,
/// negative multiplied); presence and frequency follow OpenAI (output tokens only:
/// `logit - count * frequency - (count > 0) * presence`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    /// 1 disables.
    pub repetition: f32,
    /// 0 disables.
    pub presence: f32,
    /// 0 disables.
    pub frequency: f32,
}

impl Penalties {
    pub const NONE: Penalties = Penalties {
        repetition: 1.0,
        presence: 0.0,
        frequency: 0.0,
    };

    pub fn is_none(&self) -> bool {
        *self == Penalties::NONE
    }
}

impl Default for Penalties {
    fn default() -> Penalties {
        Penalties::NONE
    }
}

/// A request's sampling parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampler {
    /// 0 is greedy.
    pub temperature: f32,
    /// 0 disables.
    pub top_k: u32,
    /// 1 disables.
    pub top_p: f32,
    /// 0 disables.
    pub min_p: f32,
    pub seed: u64,
    pub penalties: Penalties,
    /// Added to the logits of these tokens before anything else (at most [`MAX_LOGIT_BIAS`]; an
    /// id listed twice gets the sum).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn greedy() -> Sampler {
        Sampler {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            penalties: Penalties::NONE,
            logit_bias: Vec::new(),
        }
    }

    pub fn new(temperature: f32, top_k: u32, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            top_k,
            top_p,
            min_p: 0.0,
            seed,
            penalties: Penalties::NONE,
            logit_bias: Vec::new(),
        }
    }

    /// The narrowest head that serves this sampler, with the log-probability record when
    /// `logprobs`.
    pub fn head(&self, logprobs: bool) -> Head {
        if logprobs {
            Head::Logprobs
        } else if !self.penalties.is_none() || !self.logit_bias.is_empty() {
            Head::Adjusted
        } else if self.temperature <= 0.0 {
            Head::Greedy
        } else {
            Head::Sample
        }
    }

    /// The row's sampler slot values.
    pub fn slot_values(&self) -> [f32; 4] {
        [
            self.temperature.max(0.0),
            self.top_p,
            self.min_p,
            self.top_k as f32,
        ]
    }

    /// The row's counter slot values for draw number `step`.
    pub fn seed_values(&self, step: u32) -> [u32; 2] {
        [
            (self.seed as u32) ^ ((self.seed >> 32) as u32).rotate_left(16),
            step,
        ]
    }

    /// The row's penalty slot values; `generated` says the step's history tokens are output.
    pub fn penalty_values(&self, generated: bool) -> [f32; 4] {
        let p = self.penalties;
        [
            p.repetition,
            p.presence,
            p.frequency,
            if generated { 1.0 } else { 0.0 },
        ]
    }

    /// The row's bias slot values: distinct ids with summed biases, padded to
    /// [`MAX_LOGIT_BIAS`] by repeating the first entry (the device writes each biased logit
    /// by a scatter, and a repeated entry writes the same value), or token 0 with no bias.
    /// Entries past [`MAX_LOGIT_BIAS`] distinct ids are dropped (the driver refuses them).
    pub fn bias_values(&self) -> ([i32; MAX_LOGIT_BIAS], [f32; MAX_LOGIT_BIAS]) {
        let mut merged: Vec<(u32, f32)> = Vec::with_capacity(self.logit_bias.len());
        for &(id, bias) in &self.logit_bias {
            match merged.iter_mut().find(|(m, _)| *m == id) {
                Some((_, b)) => *b += bias,
                None => merged.push((id, bias)),
            }
        }
        merged.truncate(MAX_LOGIT_BIAS);
        let pad = merged.first().copied().unwrap_or((0, 0.0));
        let mut ids = [pad.0 as i32; MAX_LOGIT_BIAS];
        let mut biases = [pad.1; MAX_LOGIT_BIAS];
        for (i, &(id, bias)) in merged.iter().enumerate() {
            ids[i] = id as i32;
            biases[i] = bias;
        }
        (ids, biases)
    }
}

/// One row of a step as the sampling suffix reads it.
#[derive(Clone, Copy, Debug)]
pub struct RowSampling<'a> {
    pub sampler: &'a Sampler,
    /// The row's draw number: each draw gets fresh uniforms.
    pub draw: u32,
    /// The tokens the step feeds the row: they join its history.
    pub fed: &'a [u32],
    /// `fed` are the row's own earlier draws (output), not prompt tokens.
    pub generated: bool,
    /// The row of the history states the row's sequence owns.
    pub history_row: usize,
    /// The step starts the sequence: its history row is cleared first.
    pub fresh: bool,
    /// The row's allowed-token mask (`mask_words(vocab)` words) for an adjusting head; `None`
    /// allows every token.
    pub mask: Option<&'a [u32]>,
}

/// Writes the slots `head`'s suffix reads, one row each, for a step of `tokens` tokens per row
/// over a vocabulary of `vocab`. A row mask of another length than `mask_words(vocab)` is cut
/// or padded with allowed words (the driver builds them at the right length).
pub fn bind_slots(
    inputs: &mut StepInputs,
    head: Head,
    rows: &[RowSampling<'_>],
    tokens: usize,
    vocab: usize,
) {
    fn words<T: Copy, const N: usize>(
        rows: &[RowSampling<'_>],
        f: impl Fn(&RowSampling<'_>) -> [T; N],
        bytes: fn(T) -> [u8; 4],
    ) -> Vec<u8> {
        rows.iter().flat_map(f).flat_map(bytes).collect()
    }
    if head.samples() {
        let params = words(rows, |r| r.sampler.slot_values(), f32::to_le_bytes);
        inputs.set(Slot::Named(SAMPLER_SLOT.to_string()), params);
        let seeds = words(rows, |r| r.sampler.seed_values(r.draw), u32::to_le_bytes);
        inputs.set(Slot::Named(SEED_SLOT.to_string()), seeds);
    }
    if head.adjusts() {
        let pen = words(
            rows,
            |r| r.sampler.penalty_values(r.generated),
            f32::to_le_bytes,
        );
        inputs.set(Slot::Named(PENALTY_SLOT.to_string()), pen);
        let history: Vec<i32> = rows
            .iter()
            .flat_map(|r| (0..tokens).map(|i| r.fed.get(i).map_or(-1, |&t| t as i32)))
            .collect();
        inputs.set_i32(Slot::Named(HISTORY_SLOT.to_string()), &history);
        let at: Vec<i32> = rows
            .iter()
            .flat_map(|r| [r.history_row as i32, i32::from(r.fresh)])
            .collect();
        inputs.set_i32(Slot::Named(HISTORY_ROWS_SLOT.to_string()), &at);
        let ids = words(rows, |r| r.sampler.bias_values().0, i32::to_le_bytes);
        inputs.set(Slot::Named(BIAS_IDS_SLOT.to_string()), ids);
        let biases = words(rows, |r| r.sampler.bias_values().1, f32::to_le_bytes);
        inputs.set(Slot::Named(BIAS_SLOT.to_string()), biases);
        let mask = mask_slot_bytes(rows.iter().map(|r| r.mask), vocab);
        inputs.set(Slot::Named(MASK_SLOT.to_string()), mask);
    }
}

/// The [`MASK_SLOT`] contents for rows' allowed-token masks: no mask (or a missing tail)
/// allows every token.
pub fn mask_slot_bytes<'a>(
    masks: impl ExactSizeIterator<Item = Option<&'a [u32]>>,
    vocab: usize,
) -> Vec<u8> {
    let n = mask_words(vocab);
    let mut bytes = Vec::with_capacity(masks.len() * n * 4);
    for given in masks {
        let given = given.unwrap_or_default();
        bytes.extend((0..n).flat_map(|i| given.get(i).copied().unwrap_or(u32::MAX).to_le_bytes()));
    }
    bytes
}

/// What the suffix returned for one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    /// The chosen token as the device wrote it (the caller checks it against the vocabulary).
    pub token: i32,
    /// Some logit was not finite: the pick is not trustworthy.
    pub non_finite: bool,
    /// With [`Head::Logprobs`]: the chosen token's log-probability and the most likely tokens
    /// with theirs, most likely first.
    pub logprobs: Option<(f32, Vec<(i32, f32)>)>,
}

/// The suffix's output was shorter than its head writes (an executor that broke its contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sampling suffix's output {output} holds {got_bytes} B, its head writes {want_bytes} B"
)]
pub struct ShortReadback {
    pub output: usize,
    pub want_bytes: usize,
    pub got_bytes: usize,
}

/// Reads each row's pick from a step of `head` over `rows` rows and a vocabulary of `vocab`.
pub fn read_picks(
    out: &StepOutputs,
    head: Head,
    rows: usize,
    vocab: usize,
) -> Result<Vec<Pick>, ShortReadback> {
    let n = if head == Head::Logprobs {
        top_logprobs_width(vocab)
    } else {
        0
    };
    let ints = checked(0, out.i32(0), rows * (2 + n))?;
    let floats = if n > 0 {
        checked(1, out.f32(1), rows * (1 + n))?
    } else {
        Vec::new()
    };
    Ok((0..rows)
        .map(|r| {
            let row = &ints[r * (2 + n)..(r + 1) * (2 + n)];
            let logprobs = (n > 0).then(|| {
                let lp = &floats[r * (1 + n)..(r + 1) * (1 + n)];
                (
                    lp[0],
                    row[2..]
                        .iter()
                        .copied()
                        .zip(lp[1..].iter().copied())
                        .collect(),
                )
            });
            Pick {
                token: row[0],
                non_finite: row[1] != 0,
                logprobs,
            }
        })
        .collect())
}

/// Output `output`'s words, when it holds at least `want` of them.
fn checked<T>(output: usize, words: Option<Vec<T>>, want: usize) -> Result<Vec<T>, ShortReadback> {
    let words = words.unwrap_or_default();
    if words.len() < want {
        return Err(ShortReadback {
            output,
            want_bytes: 4 * want,
            got_bytes: 4 * words.len(),
        });
    }
    Ok(words)
}

/// Alternatives the log-probability record holds for a vocabulary of `vocab`.
pub fn top_logprobs_width(vocab: usize) -> usize {
    MAX_TOP_LOGPROBS.min(vocab)
}

/// Appends `head`'s suffix to a step graph whose first output is `[rows, vocab]` logits. The
/// new first output is i32 `[rows, 2]`: the chosen token and 1 when any (adjusted) logit was not
/// finite. [`Head::Logprobs`] widens it to `[rows, 2 + n]` with the `n` most likely token ids
/// and adds an f32 `[rows, 1 + n]` second output: the chosen token's log-probability, then the
/// alternatives' (`n` is [`top_logprobs_width`]). The graph's other outputs follow.
///
/// The history slot holds as many tokens per row as the graph's token slot (one when the graph
/// has none, as a suffix over fixed logits in a test).
///
/// The adjusting heads carry the token history in states of `history_rows` rows (one per
/// sequence the driver can hold), read and written at the rows [`HISTORY_ROWS_SLOT`] names, so
/// entries of any row count share them.
pub fn append_head(
    graph: Graph,
    head: Head,
    limits: TraceLimits,
    history_rows: usize,
) -> Result<Graph, BuilderError> {
    if head == Head::Logits {
        return Ok(graph);
    }
    if head.verifies() {
        return verify::append(graph, head == Head::VerifySample, limits);
    }
    let fed = graph
        .values()
        .iter()
        .find(|v| v.storage == Storage::Slot(Slot::Token))
        .and_then(|v| v.ty.dims().get(1).copied())
        .unwrap_or(1);
    let ext = Builder::extend(graph, limits)?;
    let b = &ext.builder;
    let raw = ext.outputs[0];
    let dims = b.dims(raw)?;
    let (rows, vocab) = (dims[0], dims[1]);
    let mut state = ext.state.clone();
    let logits = if head.adjusts() {
        let (adjusted, pairs) = adjust(b, raw, rows, vocab, fed, history_rows.max(rows))?;
        state.extend(pairs);
        adjusted
    } else {
        raw
    };
    let bad_at = non_finite(b, logits)?;
    let bad = b.reduce_max(bad_at, 1)?;
    let logits = if head.adjusts() {
        allow(b, logits, rows, vocab)?
    } else {
        logits
    };
    let (token, draw) = if head.samples() {
        // A row with a non-finite logit is flagged and its pick discarded; the draw reads the
        // lowest finite value there instead, so top-k and the gathers after it stay in range
        // whatever a backend's compiler makes of NaN comparisons.
        let zero = b.broadcast(b.lit_i32(0)?, dims.clone())?;
        let logits = b.select(
            b.compare(CompareOp::Eq, bad_at, zero)?,
            logits,
            scalar_like(b, f32::MIN, logits)?,
        )?;
        let greedy = b.argmax(logits, 1)?;
        let draw = sample(b, logits, greedy, rows, vocab)?;
        (draw.token, Some(draw))
    } else {
        (b.argmax(logits, 1)?, None)
    };
    let mut outputs = match (head, &draw) {
        (Head::Logprobs, Some(d)) => {
            let n = top_logprobs_width(vocab);
            let top = b.slice(d.candidates, vec![0, 0], vec![rows, n])?;
            let lse = d.log_sum_exp;
            let at = |ids: Traced| -> Result<Traced, BuilderError> {
                binary_bcast(b, BinaryOp::Sub, b.take_along(d.scaled, ids, 1)?, lse)
            };
            let ints = b.name(b.concat(&[token, bad, top], 1)?, "sample")?;
            let record = b.concat(&[at(token)?, at(top)?], 1)?;
            Outputs::new(ints).and(b.name(record, "sample.logprobs")?)
        }
        _ => Outputs::new(b.name(b.concat(&[token, bad], 1)?, "sample")?),
    };
    for &o in &ext.outputs[1..] {
        outputs = outputs.and(o);
    }
    ext.builder.finish(outputs.with_state(&state))
}

/// i32 1 where `x` is NaN or infinite, else 0. `x - x != 0` would do in IEEE arithmetic, but a
/// shader compiler that assumes finite floats folds it (lavapipe does); this reads the answer
/// from the conversion to i32 instead, whose NaN and saturation rules every backend implements
/// on the bits: `max(|x| * 2^-126, 1)` is in [1, 4) for a finite `x` and converts to 1..=3,
/// NaN (kept by max) converts to 0, and infinity saturates. One comparison on `n - 1` as u32
/// keeps the chain inline in its reader.
fn non_finite(b: &Builder, x: Traced) -> Result<Traced, BuilderError> {
    let scaled = b.mul(
        b.unary(UnaryOp::Abs, x)?,
        scalar_like(b, 2f32.powi(-126), x)?,
    )?;
    let n = b.cast(b.max(scaled, scalar_like(b, 1.0, x)?)?, DType::I32)?;
    let dims = b.dims(x)?;
    let from_one = b.cast(
        b.sub(n, b.broadcast(b.lit_i32(1)?, dims.clone())?)?,
        DType::U32,
    )?;
    let two = b.broadcast(b.literal(poot_graph_ir::Scalar::U32(2))?, dims)?;
    b.cast(b.compare(CompareOp::Gt, from_one, two)?, DType::I32)
}

/// `logits` with each token the row's [`MASK_SLOT`] bit mask leaves clear set to
/// [`MASKED_LOGIT`].
fn allow(b: &Builder, logits: Traced, rows: usize, vocab: usize) -> Result<Traced, BuilderError> {
    let words = mask_words(vocab);
    let mask = b.slot_named(MASK_SLOT, TensorType::new(DType::U32, vec![rows, words]))?;
    let shape = [rows, vocab];
    let u32c = |v: u32| -> Result<Traced, BuilderError> {
        b.broadcast(b.literal(poot_graph_ir::Scalar::U32(v))?, shape)
    };
    let id = b.iota(shape, 1, DType::U32)?;
    let word_at = b.cast(b.binary(BinaryOp::Shr, id, u32c(5)?)?, DType::I32)?;
    let word = b.take_along(mask, word_at, 1)?;
    let bit = b.binary(
        BinaryOp::And,
        b.binary(BinaryOp::Shr, word, b.binary(BinaryOp::And, id, u32c(31)?)?)?,
        u32c(1)?,
    )?;
    let allowed = b.compare(CompareOp::Ne, bit, u32c(0)?)?;
    let masked = b.select(allowed, logits, scalar_like(b, MASKED_LOGIT, logits)?)?;
    b.name(masked, "sample.allowed")
}

/// Logit bias, then the repetition penalty over the row's whole history, then presence and
/// frequency over its output, after adding this step's `fed` history tokens per row. Returns
/// the adjusted logits and the history's state pairs (`history_rows` rows, read and written at
/// the rows the history-rows slot names).
fn adjust(
    b: &Builder,
    raw: Traced,
    rows: usize,
    vocab: usize,
    fed: usize,
    history_rows: usize,
) -> Result<(Traced, Vec<(Traced, Traced)>), BuilderError> {
    let f32_ty = |cols: usize| TensorType::new(DType::F32, vec![rows, cols]);
    let i32_ty = |cols: usize| TensorType::new(DType::I32, vec![rows, cols]);
    let params = b.slot_named(PENALTY_SLOT, f32_ty(4))?;
    let history = b.slot_named(HISTORY_SLOT, i32_ty(fed))?;
    let bias_ids = b.slot_named(BIAS_IDS_SLOT, i32_ty(MAX_LOGIT_BIAS))?;
    let bias = b.slot_named(BIAS_SLOT, f32_ty(MAX_LOGIT_BIAS))?;
    let all_ty = TensorType::new(DType::F32, vec![history_rows, vocab]);
    let seen_all = b.state_input(SEEN_STATE, all_ty.clone())?;
    let output_all = b.state_input(OUTPUT_STATE, all_ty)?;
    let at = b.slot_named(HISTORY_ROWS_SLOT, i32_ty(2))?;
    let which = b.reshape(column(b, at, rows, 0)?, [rows])?;
    let fresh = b.broadcast(
        b.compare(
            CompareOp::Ne,
            column(b, at, rows, 1)?,
            b.broadcast(b.lit_i32(0)?, [rows, 1])?,
        )?,
        [rows, vocab],
    )?;
    // A sequence's first step starts from an empty history.
    let mine = |all: Traced| -> Result<Traced, BuilderError> {
        let rows_of = b.gather(all, which, 0)?;
        b.select(fresh, scalar_like(b, 0.0, rows_of)?, rows_of)
    };
    let (seen, output) = (mine(seen_all)?, mine(output_all)?);

    // This step's history tokens, counted per (row, token): a sum of one-hot rows, so repeated
    // tokens in a prefill chunk each count.
    let per_token = [rows, vocab, fed];
    let ids = b.broadcast(b.reshape(history, [rows, 1, fed])?, per_token)?;
    let hit = b.compare(CompareOp::Eq, b.iota(per_token, 1, DType::I32)?, ids)?;
    let hits = b.reshape(b.reduce_sum(b.cast(hit, DType::F32)?, 2)?, [rows, vocab])?;
    let seen = b.add(seen, hits)?;
    let generated = column(b, params, rows, 3)?;
    let output = b.add(output, binary_bcast(b, BinaryOp::Mul, hits, generated)?)?;
    let seen_pair = (seen_all, b.scatter_update(seen_all, which, seen, 0)?);
    let output_pair = (output_all, b.scatter_update(output_all, which, output, 0)?);

    // Bias: gather the listed logits of the flattened [rows * vocab] table, add, scatter back.
    let flat = b.reshape(raw, [rows * vocab])?;
    let row_start = b.mul(
        b.iota([rows, MAX_LOGIT_BIAS], 0, DType::I32)?,
        b.broadcast(b.lit_i32(vocab as i32)?, [rows, MAX_LOGIT_BIAS])?,
    )?;
    let at = b.reshape(b.add(bias_ids, row_start)?, [rows * MAX_LOGIT_BIAS])?;
    let biased = b.add(
        b.gather(flat, at, 0)?,
        b.reshape(bias, [rows * MAX_LOGIT_BIAS])?,
    )?;
    let logits = b.reshape(b.scatter_update(flat, at, biased, 0)?, [rows, vocab])?;

    let wide = |j: usize| -> Result<Traced, BuilderError> {
        b.broadcast(column(b, params, rows, j)?, [rows, vocab])
    };
    let zero = || scalar_like(b, 0.0, logits);
    let repetition = wide(0)?;
    let penalized = b.select(
        b.compare(CompareOp::Gt, logits, zero()?)?,
        b.div(logits, repetition)?,
        b.mul(logits, repetition)?,
    )?;
    let logits = b.select(b.compare(CompareOp::Gt, seen, zero()?)?, penalized, logits)?;
    let present = b.cast(b.compare(CompareOp::Gt, output, zero()?)?, DType::F32)?;
    let logits = b.sub(
        b.sub(logits, b.mul(output, wide(2)?)?)?,
        b.mul(present, wide(1)?)?,
    )?;
    Ok((
        b.name(logits, "sample.adjusted")?,
        vec![seen_pair, output_pair],
    ))
}

/// One column of a `[rows, n]` slot, as `[rows, 1]`.
fn column(b: &Builder, x: Traced, rows: usize, j: usize) -> Result<Traced, BuilderError> {
    b.slice(x, vec![0, j], vec![rows, j + 1])
}

/// Uniform draws in (0, 1), `[rows, n]`, from a murmur-style hash of (seed, step, index).
fn uniform(
    b: &Builder,
    seed: Traced,
    rows: usize,
    n: usize,
    salt: u32,
) -> Result<Traced, BuilderError> {
    let shape = [rows, n];
    let u32c = |v: u32| -> Result<Traced, BuilderError> {
        b.broadcast(b.literal(poot_graph_ir::Scalar::U32(v))?, shape)
    };
    let idx = b.iota(shape, 1, DType::U32)?;
    let s = b.broadcast(column(b, seed, rows, 0)?, shape)?;
    let step = b.broadcast(column(b, seed, rows, 1)?, shape)?;
    let mix = |x: Traced, shift: u32, mul: u32| -> Result<Traced, BuilderError> {
        let x = b.binary(BinaryOp::Xor, x, b.binary(BinaryOp::Shr, x, u32c(shift)?)?)?;
        b.mul(x, u32c(mul)?)
    };
    let mut x = b.binary(BinaryOp::Xor, b.mul(idx, u32c(0x9E37_79B1)?)?, s)?;
    x = b.binary(
        BinaryOp::Xor,
        x,
        b.mul(b.add(step, u32c(salt)?)?, u32c(0x85EB_CA77)?)?,
    )?;
    x = mix(x, 16, 0x85EB_CA6B)?;
    x = mix(x, 13, 0xC2B2_AE35)?;
    x = b.binary(BinaryOp::Xor, x, b.binary(BinaryOp::Shr, x, u32c(16)?)?)?;
    // The top 23 bits, centred in their interval: `code + 0.5` is exact in f32, so a draw is
    // never 0 or 1. (With 24 bits the top code's centre rounds up to 1, whose Gumbel noise is
    // +inf: a noise that beats every logit and every guided mask.)
    let top = b.cast(
        b.binary(BinaryOp::Shr, x, u32c(UNIFORM_SHIFT)?)?,
        DType::F32,
    )?;
    let half = scalar_like(b, 0.5, top)?;
    b.mul(
        b.add(top, half)?,
        scalar_like(b, 1.0 / (1u32 << (32 - UNIFORM_SHIFT)) as f32, top)?,
    )
}

/// How far [`uniform`] shifts its 32-bit hash: the bits it keeps fit an f32's significand with
/// the half step added.
const UNIFORM_SHIFT: u32 = 9;

/// The least `-log(u)` [`gumbel`] takes: an exact log never goes below it (`u` is at most
/// `1 - 2^-24`), but Vulkan allows `log` an absolute error of 2^-21 near 1, which could make
/// `-log(u)` zero or negative and the noise infinite or NaN.
const GUMBEL_INNER_FLOOR: f32 = 1.0 / (1u32 << 25) as f32;

/// Gumbel noise `-log(-log(u))`, at most `-log(GUMBEL_INNER_FLOOR)` (about 17.3).
fn gumbel(b: &Builder, u: Traced) -> Result<Traced, BuilderError> {
    let inner = b.neg(b.unary(UnaryOp::Log, u)?)?;
    let inner = b.max(inner, scalar_like(b, GUMBEL_INNER_FLOOR, inner)?)?;
    b.neg(b.unary(UnaryOp::Log, inner)?)
}

/// A sampled pick and what the log-probability record reuses.
struct Draw {
    /// i32 `[rows, 1]`.
    token: Traced,
    /// `logits / temperature` (temperature 1 for a greedy row), `[rows, vocab]`.
    scaled: Traced,
    /// `log(sum(exp(scaled)))`, `[rows, 1]`.
    log_sum_exp: Traced,
    /// The `CANDIDATES` most likely token ids, most likely first (ties to the lower id).
    candidates: Traced,
}

/// The distribution a row draws from: `logits / temperature`, restricted by top-k, top-p and
/// min-p to the kept candidates when any of them is on. The draw ([`sample`]) and the
/// speculative verification ([`verify`]) both read it, built in three parts ([`scale`],
/// [`restrict`], [`unrestricted`]) so the draw keeps its equations in the order the planner's
/// fusion was measured with (its full-vocabulary arg-max shares one split reduction with the
/// softmax's maximum).
struct Scaled {
    /// bool `[rows, 1]`: temperature 0, the arg-max.
    is_greedy: Traced,
    /// `logits / temperature` (temperature 1 for a greedy row), `[rows, vocab]`.
    scaled: Traced,
    top_p: Traced,
    min_p: Traced,
    top_k: Traced,
}

/// The row's candidates and which of them the restrictions keep.
struct Restricted {
    /// `log(sum(exp(scaled)))`, `[rows, 1]`.
    log_sum_exp: Traced,
    /// The `CANDIDATES` most likely token ids, most likely first, i32 `[rows, kc]`.
    candidates: Traced,
    /// Their scaled logits, `[rows, kc]`.
    cand: Traced,
    /// Their probabilities under the whole distribution, `[rows, kc]`.
    p: Traced,
    /// bool `[rows, kc]`: the candidate survives top-k, top-p and min-p.
    keep: Traced,
}

/// The sampler parameters of `params` (f32 `[rows, 4]`) and `logits` at the temperature.
fn scale(b: &Builder, logits: Traced, params: Traced, rows: usize) -> Result<Scaled, BuilderError> {
    let temperature = column(b, params, rows, 0)?;
    let top_p = column(b, params, rows, 1)?;
    let min_p = column(b, params, rows, 2)?;
    let top_k = column(b, params, rows, 3)?;
    let is_greedy = b.compare(
        CompareOp::Le,
        temperature,
        scalar_like(b, 0.0, temperature)?,
    )?;
    // A greedy row's draw is discarded, but its log-probabilities are at temperature 1.
    let t_safe = b.select(
        is_greedy,
        scalar_like(b, 1.0, temperature)?,
        b.max(temperature, scalar_like(b, 1e-6, temperature)?)?,
    )?;
    let scaled = binary_bcast(b, BinaryOp::Div, logits, t_safe)?;
    Ok(Scaled {
        is_greedy,
        scaled,
        top_p,
        min_p,
        top_k,
    })
}

/// The most likely candidates, in descending order, and which of them top-k, top-p and min-p
/// keep.
fn restrict(
    b: &Builder,
    logits: Traced,
    s: &Scaled,
    rows: usize,
    vocab: usize,
) -> Result<Restricted, BuilderError> {
    let kc = CANDIDATES.min(vocab);
    let cand_idx = b.arg_top_k(logits, kc)?;
    let cand = b.take_along(s.scaled, cand_idx, 1)?;
    let max = b.reduce_max(s.scaled, 1)?;
    let shifted = binary_bcast(b, BinaryOp::Sub, s.scaled, max)?;
    let lse = b.add(
        b.unary(UnaryOp::Log, b.reduce_sum(b.exp(shifted)?, 1)?)?,
        max,
    )?;
    let p = b.exp(binary_bcast(b, BinaryOp::Sub, cand, lse)?)?;
    // Cumulative probability by rank: p @ U, U[i][j] = (i <= j).
    let cum = b.matmul(p, upper_triangle(b, kc)?, false)?;
    let rank = b.iota([rows, kc], 1, DType::F32)?;
    let zero = scalar_like(b, 0.0, s.top_k)?;
    let k_off = b.compare(CompareOp::Le, s.top_k, zero)?;
    let keep_k = binary_bcast(
        b,
        BinaryOp::Or,
        b.broadcast(k_off, [rows, kc])?,
        b.compare(CompareOp::Lt, rank, b.broadcast(s.top_k, [rows, kc])?)?,
    )?;
    let before = b.sub(cum, p)?;
    let keep_p = b.compare(CompareOp::Lt, before, b.broadcast(s.top_p, [rows, kc])?)?;
    let p_first = b.slice(p, vec![0, 0], vec![rows, 1])?;
    let floor = b.mul(s.min_p, p_first)?;
    let keep_min = b.compare(CompareOp::Ge, p, b.broadcast(floor, [rows, kc])?)?;
    let keep = b.binary(
        BinaryOp::And,
        b.binary(BinaryOp::And, keep_k, keep_p)?,
        keep_min,
    )?;
    Ok(Restricted {
        log_sum_exp: lse,
        candidates: cand_idx,
        cand,
        p,
        keep,
    })
}

/// bool `[rows, 1]`: no restriction is on, the draw is over the whole vocabulary.
fn unrestricted(b: &Builder, s: &Scaled) -> Result<Traced, BuilderError> {
    let k_off = b.compare(CompareOp::Le, s.top_k, scalar_like(b, 0.0, s.top_k)?)?;
    let p_off = b.compare(CompareOp::Ge, s.top_p, scalar_like(b, 1.0, s.top_p)?)?;
    let min_off = b.compare(CompareOp::Le, s.min_p, scalar_like(b, 0.0, s.min_p)?)?;
    b.binary(
        BinaryOp::And,
        b.binary(BinaryOp::And, k_off, p_off)?,
        min_off,
    )
}

/// f32 `[n, n]`, 1 where row <= column: `x @ U` sums each row of `x` up to each column.
fn upper_triangle(b: &Builder, n: usize) -> Result<Traced, BuilderError> {
    b.cast(
        b.compare(
            CompareOp::Le,
            b.iota([n, n], 0, DType::I32)?,
            b.iota([n, n], 1, DType::I32)?,
        )?,
        DType::F32,
    )
}

fn sample(
    b: &Builder,
    logits: Traced,
    greedy: Traced,
    rows: usize,
    vocab: usize,
) -> Result<Draw, BuilderError> {
    let params = b.slot_named(SAMPLER_SLOT, TensorType::new(DType::F32, vec![rows, 4]))?;
    let seed = b.slot_named(SEED_SLOT, TensorType::new(DType::U32, vec![rows, 2]))?;
    let s = scale(b, logits, params, rows)?;

    // Unrestricted: Gumbel-max over the whole vocabulary.
    let full_noise = gumbel(b, uniform(b, seed, rows, vocab, 0)?)?;
    let full = b.argmax(b.add(s.scaled, full_noise)?, 1)?;

    // Restricted: Gumbel-max over the kept candidates.
    let r = restrict(b, logits, &s, rows, vocab)?;
    let kc = CANDIDATES.min(vocab);
    let noise = gumbel(b, uniform(b, seed, rows, kc, 0x5EED)?)?;
    let score = b.select(
        r.keep,
        b.add(r.cand, noise)?,
        scalar_like(b, f32::MIN, r.cand)?,
    )?;
    let pick = b.argmax(score, 1)?;
    let restricted = b.take_along(r.candidates, pick, 1)?;

    let drawn = b.select(unrestricted(b, &s)?, full, restricted)?;
    Ok(Draw {
        token: b.select(s.is_greedy, greedy, drawn)?,
        scaled: s.scaled,
        log_sum_exp: r.log_sum_exp,
        candidates: r.candidates,
    })
}
