//! The verification head: speculative decoding's check of `k` drafted tokens, run on the device
//! as the sampling suffix of one step of the target over `k + 1` positions a row (the row's
//! last accepted token, then its drafts), whose logits come back for every position.
//!
//! Position `i` of a row holds the target's distribution `p_i` after the accepted token and the
//! first `i` drafts, and is checked against draft `d_{i+1}` (the last position against none):
//!
//! - a greedy row (temperature 0) accepts `d_{i+1}` when it is the arg-max of `p_i`, and its
//!   token at `i` is that arg-max: token for token what decoding one token a step would pick;
//! - a sampled row applies the speculative rejection rule (Leviathan et al. 2023, Chen et al.
//!   2023) for a deterministic drafter, whose proposal distribution `q` is a point mass on the
//!   draft (prompt lookup, and the draft model, which drafts greedily): `d_{i+1}` is accepted
//!   with probability `min(1, p_i(d) / q(d)) = p_i(d)`, and on rejection the token is drawn
//!   from `norm(max(0, p_i - q))`, which is `p_i` with `d` removed and renormalized. With no
//!   draft left the token is an ordinary draw from `p_i`. `p_i` is the distribution the row
//!   samples from without speculation (temperature, then top-k, top-p and min-p), so the tokens
//!   a row keeps follow exactly the distribution of decoding one token at a time.
//!
//! The row keeps its first `n + 1` tokens, where `n` counts the leading accepted drafts: the
//! drafts `d_1 .. d_n` (each equal to the token at the position before it) and the token at
//! position `n` (a correction after a rejection, or a bonus token when every draft held).
//!
//! Each position draws from its own counter (the row's draw number plus the position), so the
//! uniforms behind a kept token are never reused for another kept token: whether position `j`
//! is kept depends only on positions before it, and the next step starts its draws at the
//! first draw number not kept.
//!
//! Slots: [`DRAFT_SLOT`] (i32 `[rows, k + 1]`, position `i`'s draft `d_{i+1}`, or -1 for none:
//! always at the last position, and past a row's drafts when it has fewer than `k`), and for
//! [`Head::VerifySample`] the sampler and seed slots with one row per position
//! (`[rows * (k + 1), 4]` and `[rows * (k + 1), 2]`).
//!
//! Output: i32 `[rows, 2 + k + 1]`: the accepted draft count `n`, 1 when any position's logits
//! were not finite, then the token at each position.

use poot_executor::{StepInputs, StepOutputs};
use poot_graph_ir::ops::scalar_like;
use poot_graph_ir::{
    BinaryOp, BuilderError, CompareOp, DType, Graph, Outputs, Slot, TensorType, TraceLimits,
    Traced, UnaryOp,
};

use super::{
    Builder, CANDIDATES, SAMPLER_SLOT, SEED_SLOT, Sampler, ShortReadback, checked, gumbel,
    non_finite, restrict, scale, uniform, unrestricted, upper_triangle,
};

/// The slot of the draft each position is checked against, i32 `[rows, k + 1]`; -1 for none.
pub const DRAFT_SLOT: &str = "spec_draft";

/// Keeps the acceptance test's uniforms apart from the draws' (salts 0 and 0x5EED) for any
/// draw number a sequence reaches.
const ACCEPT_SALT: u32 = 0xACC0_0000;

/// Appends the verification head to a step graph whose first output is the logits of every
/// position, `[rows, k + 1, vocab]` (a `[rows, vocab]` output verifies one position a row).
/// `sampled` builds [`super::Head::VerifySample`], else [`super::Head::Verify`].
pub(super) fn append(
    graph: Graph,
    sampled: bool,
    limits: TraceLimits,
) -> Result<Graph, BuilderError> {
    let ext = Builder::extend(graph, limits)?;
    let b = &ext.builder;
    let raw = ext.outputs[0];
    let dims = b.dims(raw)?;
    let (rows, positions, vocab) = match dims[..] {
        [rows, positions, vocab] => (rows, positions, vocab),
        [rows, vocab] => (rows, 1, vocab),
        _ => (dims.first().copied().unwrap_or(0), 1, 0),
    };
    let flat = rows * positions;
    let logits = b.reshape(raw, [flat, vocab])?;
    let draft_slot = b.slot_named(
        DRAFT_SLOT,
        TensorType::new(DType::I32, vec![rows, positions]),
    )?;
    let draft = b.reshape(draft_slot, [flat, 1])?;
    let bad_at = non_finite(b, logits)?;
    let bad = b.reduce_max(bad_at, 1)?;
    // As in the sampling head: a non-finite row is flagged, and its picks read the lowest
    // finite value there so every index stays in range.
    let zero = b.broadcast(b.lit_i32(0)?, [flat, vocab])?;
    let logits = b.select(
        b.compare(CompareOp::Eq, bad_at, zero)?,
        logits,
        scalar_like(b, f32::MIN, logits)?,
    )?;
    let greedy = b.argmax(logits, 1)?;
    let greedy_accept = b.compare(CompareOp::Eq, greedy, draft)?;
    let (token, accept) = if sampled {
        rejection(b, logits, greedy, greedy_accept, draft, flat, vocab)?
    } else {
        (greedy, greedy_accept)
    };

    // The leading accepted drafts: positions before which nothing was rejected.
    let accepted = b.reshape(b.cast(accept, DType::F32)?, [rows, positions])?;
    let rejected = b.sub(scalar_like(b, 1.0, accepted)?, accepted)?;
    let rejected_by = b.matmul(rejected, upper_triangle(b, positions)?, false)?;
    let leading = b.compare(
        CompareOp::Eq,
        rejected_by,
        scalar_like(b, 0.0, rejected_by)?,
    )?;
    let count = b.cast(b.reduce_sum(b.cast(leading, DType::F32)?, 1)?, DType::I32)?;
    let row_bad = b.reduce_max(b.reshape(bad, [rows, positions])?, 1)?;
    let tokens = b.reshape(token, [rows, positions])?;
    let mut outputs = Outputs::new(b.name(b.concat(&[count, row_bad, tokens], 1)?, "verify")?);
    for &o in &ext.outputs[1..] {
        outputs = outputs.and(o);
    }
    let state = ext.state.clone();
    ext.builder.finish(outputs.with_state(&state))
}

/// The rejection rule at each of `flat` positions: (the token, whether the draft was accepted).
fn rejection(
    b: &Builder,
    logits: Traced,
    greedy: Traced,
    greedy_accept: Traced,
    draft: Traced,
    flat: usize,
    vocab: usize,
) -> Result<(Traced, Traced), BuilderError> {
    let params = b.slot_named(SAMPLER_SLOT, TensorType::new(DType::F32, vec![flat, 4]))?;
    let seed = b.slot_named(SEED_SLOT, TensorType::new(DType::U32, vec![flat, 2]))?;
    let s = scale(b, logits, params, flat)?;
    let t = restrict(b, logits, &s, flat, vocab)?;
    let unrestricted = unrestricted(b, &s)?;
    let kc = CANDIDATES.min(vocab);
    let zero = b.broadcast(b.lit_i32(0)?, [flat, 1])?;
    let has_draft = b.compare(CompareOp::Ge, draft, zero)?;
    let at = b.max(draft, zero)?;
    let min = |x: Traced| scalar_like(b, f32::MIN, x);

    // Unrestricted: p(d) from the log-softmax; the residual is a Gumbel-max draw with d out.
    let p_full = b.exp(b.sub(b.take_along(s.scaled, at, 1)?, t.log_sum_exp)?)?;
    let is_draft = b.compare(
        CompareOp::Eq,
        b.iota([flat, vocab], 1, DType::I32)?,
        b.broadcast(draft, [flat, vocab])?,
    )?;
    let noisy = b.add(s.scaled, gumbel(b, uniform(b, seed, flat, vocab, 0)?)?)?;
    let full = b.argmax(b.select(is_draft, min(noisy)?, noisy)?, 1)?;

    // Restricted: p(d) is its share of the kept candidates' mass; the residual draws among the
    // kept candidates other than d.
    let cand_is_draft = b.compare(CompareOp::Eq, t.candidates, b.broadcast(draft, [flat, kc])?)?;
    let kept = b.mul(b.cast(t.keep, DType::F32)?, t.p)?;
    let p_kept = b.div(
        b.reduce_sum(b.mul(kept, b.cast(cand_is_draft, DType::F32)?)?, 1)?,
        b.reduce_sum(kept, 1)?,
    )?;
    let noise = gumbel(b, uniform(b, seed, flat, kc, 0x5EED)?)?;
    let others = b.binary(BinaryOp::And, t.keep, b.unary(UnaryOp::Not, cand_is_draft)?)?;
    let score = b.select(others, b.add(t.cand, noise)?, min(t.cand)?)?;
    let restricted = b.take_along(t.candidates, b.argmax(score, 1)?, 1)?;

    let p_draft = b.select(unrestricted, p_full, p_kept)?;
    let p_draft = b.select(has_draft, p_draft, scalar_like(b, 0.0, p_draft)?)?;
    let residual = b.select(unrestricted, full, restricted)?;
    let u = uniform(b, seed, flat, 1, ACCEPT_SALT)?;
    let sampled_accept = b.compare(CompareOp::Lt, u, p_draft)?;
    let sampled = b.select(sampled_accept, draft, residual)?;
    Ok((
        b.select(s.is_greedy, greedy, sampled)?,
        b.select(s.is_greedy, greedy_accept, sampled_accept)?,
    ))
}

/// One row of a verification step as the host binds it.
#[derive(Clone, Copy, Debug)]
pub struct VerifyRow<'a> {
    pub sampler: &'a Sampler,
    /// The row's draw number at its first position.
    pub draw: u32,
    /// The drafted tokens (at most the step's positions less one).
    pub drafts: &'a [u32],
}

/// Writes the slots a verification step of `positions` positions a row reads.
pub fn bind_slots(
    inputs: &mut StepInputs,
    sampled: bool,
    rows: &[VerifyRow<'_>],
    positions: usize,
) {
    let drafts: Vec<i32> = rows
        .iter()
        .flat_map(|r| (0..positions).map(|i| r.drafts.get(i).map_or(-1, |&t| t as i32)))
        .collect();
    inputs.set_i32(Slot::Named(DRAFT_SLOT.to_string()), &drafts);
    if sampled {
        let params: Vec<u8> = rows
            .iter()
            .flat_map(|r| std::iter::repeat_n(r.sampler.slot_values(), positions))
            .flatten()
            .flat_map(f32::to_le_bytes)
            .collect();
        inputs.set(Slot::Named(SAMPLER_SLOT.to_string()), params);
        let seeds: Vec<u8> = rows
            .iter()
            .flat_map(|r| (0..positions).map(|i| r.sampler.seed_values(r.draw + i as u32)))
            .flatten()
            .flat_map(u32::to_le_bytes)
            .collect();
        inputs.set(Slot::Named(SEED_SLOT.to_string()), seeds);
    }
}

/// What the verification head decided for one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Leading drafts accepted.
    pub accepted: usize,
    /// Some position's logits were not finite: the row's tokens are not trustworthy.
    pub non_finite: bool,
    /// The tokens the row keeps: the accepted drafts, then the target's token after them
    /// (`accepted + 1` tokens), as the device wrote them.
    pub tokens: Vec<i32>,
}

/// Reads each row's verdict from a verification step over `rows` rows of `positions` positions.
pub fn read_verdicts(
    out: &StepOutputs,
    rows: usize,
    positions: usize,
) -> Result<Vec<Verdict>, ShortReadback> {
    let width = 2 + positions;
    let words = checked(0, out.i32(0), rows * width)?;
    Ok(words
        .chunks_exact(width)
        .take(rows)
        .map(|w| {
            // The count is at most `positions - 1` by construction (the last position has no
            // draft); clamp what a faulty device might write.
            let accepted = (w[0].max(0) as usize).min(positions - 1);
            Verdict {
                accepted,
                non_finite: w[1] != 0,
                tokens: w[2..3 + accepted].to_vec(),
            }
        })
        .collect())
}
