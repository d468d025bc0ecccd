//! The sampling suffix: the equations appended to a step's graph so the device picks each row's
//! next token and the host reads back a token id and a non-finite flag, never the logits.
//!
//! Sampler parameters are slot values, so one entry serves every temperature, top-k, top-p,
//! min-p and seed. Rules, per row:
//! - temperature 0: the arg-max of the logits (ties to the lower id);
//! - otherwise `logits / temperature` sampled by the Gumbel-max trick, with uniform draws from a
//!   counter-based hash of (seed, step, index), so a seed reproduces a run exactly;
//! - with top-k, top-p or min-p, the draw is among the `CANDIDATES` most likely tokens: ranks past
//!   top-k, tokens after the cumulative probability (of the full distribution) reaches top-p, and
//!   tokens below min-p times the most likely one's probability are excluded. A top-k above
//!   `CANDIDATES` acts as `CANDIDATES`, and a nucleus wider than the candidates is cut there.

use poot_graph_ir::ops::{binary_bcast, scalar_like};
use poot_graph_ir::{
    BinaryOp, Builder, BuilderError, CompareOp, DType, Graph, Outputs, TensorType, TraceLimits,
    Traced, UnaryOp,
};

/// Candidates a restricted draw chooses among.
pub const CANDIDATES: usize = 32;

/// The slot of each row's sampler parameters, f32 `[rows, 4]`: temperature, top-p, min-p, top-k.
pub const SAMPLER_SLOT: &str = "sampler";
/// The slot of each row's draw counter, u32 `[rows, 2]`: the seed's hash and the step number.
pub const SEED_SLOT: &str = "sample_seed";

/// How a step ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Head {
    /// The logits themselves (a caller that asks for them).
    Logits,
    /// The arg-max token: the narrowest head, for greedy rows.
    Greedy,
    /// Temperature, top-k, top-p and min-p sampling.
    Sample,
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
    /// Added to the logits of these tokens before anything else (at most [`MAX_LOGIT_BIAS`]).
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

    /// The narrowest head that serves this sampler.
    pub fn head(&self) -> Head {
        if self.temperature <= 0.0 {
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
}

/// Appends `head`'s suffix to a step graph whose first output is `[rows, vocab]` logits. The
/// new first output is i32 `[rows, 2]`: the chosen token and 1 when any logit was not finite.
pub fn append_head(graph: Graph, head: Head, limits: TraceLimits) -> Result<Graph, BuilderError> {
    if head == Head::Logits {
        return Ok(graph);
    }
    let ext = Builder::extend(graph, limits)?;
    let b = &ext.builder;
    let logits = ext.outputs[0];
    let dims = b.dims(logits)?;
    let rows = dims[0];
    let greedy = b.argmax(logits, 1)?;
    let token = match head {
        Head::Greedy | Head::Logits => greedy,
        Head::Sample => sample(b, logits, greedy, rows, dims[1])?,
    };
    // x - x is 0 exactly when x is finite.
    let diff = b.sub(logits, logits)?;
    let finite = b.compare(CompareOp::Eq, diff, scalar_like(b, 0.0, diff)?)?;
    let bad = b.select(
        finite,
        b.broadcast(b.lit_i32(0)?, dims.clone())?,
        b.broadcast(b.lit_i32(1)?, dims.clone())?,
    )?;
    let bad = b.reduce_max(bad, 1)?;
    let out = b.name(b.concat(&[token, bad], 1)?, "sample")?;
    let mut outputs = Outputs::new(out);
    for &o in &ext.outputs[1..] {
        outputs = outputs.and(o);
    }
    let state = ext.state.clone();
    ext.builder.finish(outputs.with_state(&state))
}

/// One column of a `[rows, 4]` slot, as `[rows, 1]`.
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
    // The top 24 bits, centred in their interval: never 0 or 1.
    let top = b.cast(b.binary(BinaryOp::Shr, x, u32c(8)?)?, DType::F32)?;
    let half = scalar_like(b, 0.5, top)?;
    b.mul(
        b.add(top, half)?,
        scalar_like(b, 1.0 / (1u32 << 24) as f32, top)?,
    )
}

/// Gumbel noise `-log(-log(u))`.
fn gumbel(b: &Builder, u: Traced) -> Result<Traced, BuilderError> {
    let inner = b.neg(b.unary(UnaryOp::Log, u)?)?;
    b.neg(b.unary(UnaryOp::Log, inner)?)
}

fn sample(
    b: &Builder,
    logits: Traced,
    greedy: Traced,
    rows: usize,
    vocab: usize,
) -> Result<Traced, BuilderError> {
    let params = b.slot_named(SAMPLER_SLOT, TensorType::new(DType::F32, vec![rows, 4]))?;
    let seed = b.slot_named(SEED_SLOT, TensorType::new(DType::U32, vec![rows, 2]))?;
    let temperature = column(b, params, rows, 0)?;
    let top_p = column(b, params, rows, 1)?;
    let min_p = column(b, params, rows, 2)?;
    let top_k = column(b, params, rows, 3)?;
    let t_safe = b.max(temperature, scalar_like(b, 1e-6, temperature)?)?;
    let scaled = binary_bcast(b, BinaryOp::Div, logits, t_safe)?;

    // Unrestricted: Gumbel-max over the whole vocabulary.
    let full_noise = gumbel(b, uniform(b, seed, rows, vocab, 0)?)?;
    let full = b.argmax(b.add(scaled, full_noise)?, 1)?;

    // Restricted: the most likely candidates, in descending order.
    let kc = CANDIDATES.min(vocab);
    let cand_idx = b.arg_top_k(logits, kc)?;
    let cand = b.take_along(scaled, cand_idx, 1)?;
    let max = b.reduce_max(scaled, 1)?;
    let shifted = binary_bcast(b, BinaryOp::Sub, scaled, max)?;
    let lse = b.add(
        b.unary(UnaryOp::Log, b.reduce_sum(b.exp(shifted)?, 1)?)?,
        max,
    )?;
    let p = b.exp(binary_bcast(b, BinaryOp::Sub, cand, lse)?)?;
    // Cumulative probability by rank: p @ U, U[i][j] = (i <= j).
    let tri = b.cast(
        b.compare(
            CompareOp::Le,
            b.iota([kc, kc], 0, DType::I32)?,
            b.iota([kc, kc], 1, DType::I32)?,
        )?,
        DType::F32,
    )?;
    let cum = b.matmul(p, tri, false)?;
    let rank = b.iota([rows, kc], 1, DType::F32)?;
    let zero = scalar_like(b, 0.0, top_k)?;
    let k_off = b.compare(CompareOp::Le, top_k, zero)?;
    let keep_k = binary_bcast(
        b,
        BinaryOp::Or,
        b.broadcast(k_off, [rows, kc])?,
        b.compare(CompareOp::Lt, rank, b.broadcast(top_k, [rows, kc])?)?,
    )?;
    let before = b.sub(cum, p)?;
    let keep_p = b.compare(CompareOp::Lt, before, b.broadcast(top_p, [rows, kc])?)?;
    let p_first = b.slice(p, vec![0, 0], vec![rows, 1])?;
    let floor = b.mul(min_p, p_first)?;
    let keep_min = b.compare(CompareOp::Ge, p, b.broadcast(floor, [rows, kc])?)?;
    let keep = b.binary(
        BinaryOp::And,
        b.binary(BinaryOp::And, keep_k, keep_p)?,
        keep_min,
    )?;
    let noise = gumbel(b, uniform(b, seed, rows, kc, 0x5EED)?)?;
    let score = b.select(keep, b.add(cand, noise)?, scalar_like(b, f32::MIN, cand)?)?;
    let pick = b.argmax(score, 1)?;
    let restricted = b.take_along(cand_idx, pick, 1)?;

    let one = scalar_like(b, 1.0, top_p)?;
    let p_off = b.compare(CompareOp::Ge, top_p, one)?;
    let min_off = b.compare(CompareOp::Le, min_p, scalar_like(b, 0.0, min_p)?)?;
    let unrestricted = b.binary(
        BinaryOp::And,
        b.binary(BinaryOp::And, k_off, p_off)?,
        min_off,
    )?;
    let drawn = b.select(unrestricted, full, restricted)?;
    let is_greedy = b.compare(
        CompareOp::Le,
        temperature,
        scalar_like(b, 0.0, temperature)?,
    )?;
    b.select(is_greedy, greedy, drawn)
}
