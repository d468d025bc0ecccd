//! A toy two-layer decoder traced with the `Builder` directly, evaluated by the oracle as one
//! prefill, as a prefill followed by single-token decode steps, and in equal chunks, carrying its
//! KV caches (state pairs) from each step's `Evaluation::state` into the next.
//!
//! The model: embed -> 2 x [rmsnorm -> q/k/v linear -> rope (half split) -> write k/v into a
//! cache of `CAP` positions at the step's first position (`dynamic_update_slice`) ->
//! `attention_masked` over the whole cache under `causal_mask` (GQA, n_rep 2) -> o linear ->
//! residual -> rmsnorm -> SwiGLU FFN -> residual] -> final rmsnorm -> head, for a batch of two
//! sequences. Weights are seeded random f32 constants.
//!
//! Tolerances, relative to the largest magnitude of the compared tensor:
//! - [`TOL_SCHEDULE`] (1e-5) between schedules: the same positions computed in steps of
//!   different lengths must agree to f32 rounding (the oracle's dot products do not depend on
//!   the step length, so they agree bit for bit today; the tolerance leaves room for a
//!   contraction order that does).
//! - [`TOL_REFERENCE`] (1e-5) against the f64 reference of the same model, written with plain
//!   loops and no cache (attention over keys `0..=p`): two layers of f32 roundings over
//!   contractions of at most 24 terms (observed about 3e-7).

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

mod common;
mod composite_ref;

use std::collections::BTreeMap;
use std::time::Instant;

use common::Rng;
use composite_ref::{AttnRef, Pairing, assert_close, f32s, wide};
use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::ops::{self, AttentionOptions, RopeStyle};
use poot_graph_ir::{
    Builder, BuilderError, DType, Graph, Outputs, Slot, TensorType, TraceLimits, Traced,
};

const VOCAB: usize = 13;
const D_MODEL: usize = 16;
const N_HEADS: usize = 4;
const N_KV_HEADS: usize = 2;
const HEAD_DIM: usize = 4;
const FFN: usize = 24;
const LAYERS: usize = 2;
/// Cache capacity in positions (more than the sequence, so some entries stay unwritten).
const CAP: usize = 12;
const BATCH: usize = 2;
const ROPE_BASE: f64 = 10_000.0;
const EPS: f32 = 1e-5;
/// The two sequences of the batch.
const TOKENS: [[i32; 9]; BATCH] = [[1, 5, 12, 0, 7, 7, 3, 11, 2], [4, 4, 9, 1, 12, 6, 0, 8, 10]];
const SEQ: usize = TOKENS[0].len();

const TOL_SCHEDULE: f64 = 1e-5;
const TOL_REFERENCE: f64 = 1e-5;

/// The model's constants by name, with their dims and f32 values.
struct Weights(BTreeMap<String, (Vec<usize>, Vec<f32>)>);

impl Weights {
    fn random(seed: u64) -> Weights {
        let mut rng = Rng(seed);
        let mut w = BTreeMap::new();
        let mut put = |name: String, dims: Vec<usize>, lo: f64, hi: f64, rng: &mut Rng| {
            let v = f32s(rng, dims.iter().product(), lo, hi);
            w.insert(name, (dims, v));
        };
        // Linear weights scaled by 1/sqrt(K) so activations stay O(1).
        let lin = |n: usize, k: usize| (vec![n, k], 1.0 / (k as f64).sqrt());
        put("embed".into(), vec![VOCAB, D_MODEL], -1.0, 1.0, &mut rng);
        for l in 0..LAYERS {
            put(format!("l{l}.attn_norm"), vec![D_MODEL], 0.5, 1.5, &mut rng);
            put(format!("l{l}.ffn_norm"), vec![D_MODEL], 0.5, 1.5, &mut rng);
            for (role, (dims, a)) in [
                ("wq", lin(N_HEADS * HEAD_DIM, D_MODEL)),
                ("wk", lin(N_KV_HEADS * HEAD_DIM, D_MODEL)),
                ("wv", lin(N_KV_HEADS * HEAD_DIM, D_MODEL)),
                ("wo", lin(D_MODEL, N_HEADS * HEAD_DIM)),
                ("w_gate", lin(FFN, D_MODEL)),
                ("w_up", lin(FFN, D_MODEL)),
                ("w_down", lin(D_MODEL, FFN)),
            ] {
                put(format!("l{l}.{role}"), dims, -2.0 * a, 2.0 * a, &mut rng);
            }
        }
        put("final_norm".into(), vec![D_MODEL], 0.5, 1.5, &mut rng);
        let (dims, a) = lin(VOCAB, D_MODEL);
        put("head".into(), dims, -2.0 * a, 2.0 * a, &mut rng);
        // Rope tables of CAP rows from the textbook angles, rounded to f32.
        let half = HEAD_DIM / 2;
        let angles: Vec<f64> = (0..CAP)
            .flat_map(|p| {
                (0..half).map(move |i| composite_ref::rope_angle(p as i64, i, HEAD_DIM, ROPE_BASE))
            })
            .collect();
        let table = |f: fn(f64) -> f64| angles.iter().map(|&a| f(a) as f32).collect();
        w.insert("rope_cos".into(), (vec![CAP, half], table(f64::cos)));
        w.insert("rope_sin".into(), (vec![CAP, half], table(f64::sin)));
        Weights(w)
    }

    fn get(&self, name: &str) -> &[f32] {
        &self.0[name].1
    }

    fn wide(&self, name: &str) -> Vec<f64> {
        wide(self.get(name))
    }

    /// Every constant bound by name.
    fn inputs(&self) -> Inputs<'_> {
        let mut inputs = Inputs::new();
        for (name, (dims, v)) in &self.0 {
            inputs.set_const(name.clone(), HostTensor::f32(dims.clone(), &v[..]).unwrap());
        }
        inputs
    }
}

fn f32_ty(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

fn cache_name(l: usize, kv: &str) -> String {
    format!("l{l}.cache.{kv}")
}

fn cache_dims() -> [usize; 4] {
    [BATCH, N_KV_HEADS, CAP, HEAD_DIM]
}

/// `[B, T, H * HEAD_DIM]` to `[B, H, T, HEAD_DIM]`.
fn split_heads(b: &Builder, x: Traced, t: usize, h: usize) -> Result<Traced, BuilderError> {
    let x = b.reshape(x, [BATCH, t, h, HEAD_DIM])?;
    b.transpose(x, vec![0, 2, 1, 3])
}

/// The step graph for `t` new tokens per sequence: logits `[B, t, VOCAB]` out, and per layer
/// the k and v caches `[B, N_KV_HEADS, CAP, HEAD_DIM]` carried as state.
fn trace_step(t: usize) -> Result<Graph, BuilderError> {
    let b = Builder::new(TraceLimits::standard(BATCH as u64 * t as u64));
    b.admit_tokens(BATCH as u64 * t as u64)?;
    let c = |name: &str, dims: &[usize]| b.constant(name, f32_ty(dims));
    let tok = b.slot(Slot::Token, TensorType::new(DType::I32, [BATCH, t]))?;
    let pos = b.slot(Slot::Pos, TensorType::new(DType::I32, [BATCH, t]))?;
    let cos = c("rope_cos", &[CAP, HEAD_DIM / 2])?;
    let sin = c("rope_sin", &[CAP, HEAD_DIM / 2])?;
    // The step's first position: where its keys and values go in the cache.
    let start = b.reshape(b.slice(pos, vec![0, 0], vec![1, 1])?, [0usize; 0])?;
    let start = b.name(start, "cache_start")?;
    let zero = b.lit_i32(0)?;
    let mask = b.name(ops::causal_mask(&b, pos, CAP, None)?, "mask")?;
    let mut x = b.name(
        ops::embed(&b, c("embed", &[VOCAB, D_MODEL])?, tok)?,
        "embed",
    )?;
    let mut state = Vec::new();
    for l in 0..LAYERS {
        let k_cache = b.state_input(&cache_name(l, "k"), f32_ty(&cache_dims()))?;
        let v_cache = b.state_input(&cache_name(l, "v"), f32_ty(&cache_dims()))?;
        let (y, k_new, v_new) = b.scope(&format!("l{l}"), |b| {
            let w = |role: &str, dims: &[usize]| b.constant(&format!("l{l}.{role}"), f32_ty(dims));
            let hd = N_HEADS * HEAD_DIM;
            let h = ops::rmsnorm(b, x, w("attn_norm", &[D_MODEL])?, EPS)?;
            // Project `h` to `n` heads, `[B, n, T, HEAD_DIM]`.
            let heads = |role: &str, n: usize| {
                let y = ops::linear(b, h, w(role, &[n * HEAD_DIM, D_MODEL])?, None)?;
                split_heads(b, y, t, n)
            };
            let rotate = |x: Traced| ops::rope(b, x, cos, sin, pos, RopeStyle::HalfSplit);
            let q = b.name(rotate(heads("wq", N_HEADS)?)?, "attn.q")?;
            let k = b.name(rotate(heads("wk", N_KV_HEADS)?)?, "attn.k")?;
            let v = b.name(heads("wv", N_KV_HEADS)?, "attn.v")?;
            let at = [zero, zero, start, zero];
            let k_all = b.name(b.dynamic_update_slice(k_cache, k, &at)?, "attn.k_cache")?;
            let v_all = b.name(b.dynamic_update_slice(v_cache, v, &at)?, "attn.v_cache")?;
            let opts = AttentionOptions {
                n_rep: N_HEADS / N_KV_HEADS,
                scale: 1.0 / (HEAD_DIM as f32).sqrt(),
                softcap: None,
            };
            let a = ops::attention_masked(b, q, k_all, v_all, mask, opts)?;
            let a = b.reshape(b.transpose(a, vec![0, 2, 1, 3])?, [BATCH, t, hd])?;
            let x = b.add(x, ops::linear(b, a, w("wo", &[D_MODEL, hd])?, None)?)?;
            let x = b.name(x, "attn.out")?;
            let h = ops::rmsnorm(b, x, w("ffn_norm", &[D_MODEL])?, EPS)?;
            let gate = ops::linear(b, h, w("w_gate", &[FFN, D_MODEL])?, None)?;
            let up = ops::linear(b, h, w("w_up", &[FFN, D_MODEL])?, None)?;
            let down = ops::linear(
                b,
                ops::swiglu(b, gate, up)?,
                w("w_down", &[D_MODEL, FFN])?,
                None,
            )?;
            let x = b.name(b.add(x, down)?, "ffn.out")?;
            Ok::<_, BuilderError>((x, k_all, v_all))
        })?;
        x = y;
        state.push((k_cache, k_new));
        state.push((v_cache, v_new));
    }
    let h = ops::rmsnorm(&b, x, c("final_norm", &[D_MODEL])?, EPS)?;
    let logits = b.name(
        ops::linear(&b, h, c("head", &[VOCAB, D_MODEL])?, None)?,
        "logits",
    )?;
    b.finish(Outputs::new(logits).with_state(&state))
}

/// What a schedule of steps produced: each sequence's logits at every position
/// (`[B][SEQ][VOCAB]`, flattened) and the final caches by name.
struct Run {
    logits: Vec<f32>,
    state: Vec<(String, HostTensor<'static>)>,
}

/// Evaluates the sequences in steps of `chunks` tokens (summing to `SEQ`), starting from zeroed
/// caches and feeding each step the state the previous one returned.
fn run(weights: &Weights, graphs: &BTreeMap<usize, Graph>, chunks: &[usize]) -> Run {
    let consts = weights.inputs();
    let zeros = vec![0.0f32; cache_dims().iter().product()];
    let mut state: Vec<(String, HostTensor<'static>)> = (0..LAYERS)
        .flat_map(|l| ["k", "v"].map(|kv| cache_name(l, kv)))
        .map(|name| (name, HostTensor::f32(cache_dims(), zeros.clone()).unwrap()))
        .collect();
    let mut logits = vec![0.0f32; BATCH * SEQ * VOCAB];
    let mut p0 = 0;
    for &t in chunks {
        let mut inputs = consts.clone();
        let toks: Vec<i32> = TOKENS.iter().flat_map(|s| s[p0..p0 + t].to_vec()).collect();
        let pos: Vec<i32> = (0..BATCH)
            .flat_map(|_| p0 as i32..(p0 + t) as i32)
            .collect();
        inputs.set_slot(Slot::Token, HostTensor::i32([BATCH, t], toks).unwrap());
        inputs.set_slot(Slot::Pos, HostTensor::i32([BATCH, t], pos).unwrap());
        for (name, tensor) in state {
            inputs.set_state(name, tensor);
        }
        let ev = eval(&graphs[&t], &inputs, EvalOptions::default()).unwrap();
        let out = ev.outputs[0].as_f32().unwrap();
        assert_eq!(ev.outputs[0].dims(), &[BATCH, t, VOCAB]);
        for bi in 0..BATCH {
            for ti in 0..t {
                let src = (bi * t + ti) * VOCAB;
                let dst = (bi * SEQ + p0 + ti) * VOCAB;
                logits[dst..dst + VOCAB].copy_from_slice(&out[src..src + VOCAB]);
            }
        }
        state = ev.state;
        p0 += t;
    }
    assert_eq!(p0, SEQ, "the schedule covers the sequence");
    Run { logits, state }
}

/// The same model in f64 with plain loops and no cache: every position attends to keys
/// `0..=p` of its own sequence. Returns logits `[B][SEQ][VOCAB]`, flattened.
fn reference_logits(w: &Weights) -> Vec<f64> {
    let half = HEAD_DIM / 2;
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..SEQ {
        for i in 0..half {
            let a = composite_ref::rope_angle(p as i64, i, HEAD_DIM, ROPE_BASE);
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let positions: Vec<i64> = (0..SEQ as i64).collect();
    // `[SEQ, H * HEAD_DIM]` rows to `[1, H, SEQ, HEAD_DIM]`, and back.
    let to_heads = |x: &[f64], h: usize| {
        let mut out = vec![0.0; x.len()];
        for p in 0..SEQ {
            for hi in 0..h {
                for e in 0..HEAD_DIM {
                    out[(hi * SEQ + p) * HEAD_DIM + e] = x[p * h * HEAD_DIM + hi * HEAD_DIM + e];
                }
            }
        }
        out
    };
    let from_heads = |x: &[f64], h: usize| {
        let mut out = vec![0.0; x.len()];
        for p in 0..SEQ {
            for hi in 0..h {
                for e in 0..HEAD_DIM {
                    out[p * h * HEAD_DIM + hi * HEAD_DIM + e] = x[(hi * SEQ + p) * HEAD_DIM + e];
                }
            }
        }
        out
    };
    let opts = AttnRef {
        n_rep: N_HEADS / N_KV_HEADS,
        scale: 1.0 / (HEAD_DIM as f64).sqrt(),
        softcap: None,
    };
    let eps = f64::from(EPS);
    let mut all = Vec::new();
    for seq in &TOKENS {
        let ids: Vec<i64> = seq.iter().map(|&t| i64::from(t)).collect();
        let mut x = composite_ref::embed(&w.wide("embed"), D_MODEL, &ids);
        for l in 0..LAYERS {
            let lw = |role: &str| w.wide(&format!("l{l}.{role}"));
            let h = composite_ref::rmsnorm(&x, D_MODEL, &lw("attn_norm"), eps, 0.0);
            let q = to_heads(
                &composite_ref::linear(&h, D_MODEL, &lw("wq"), None),
                N_HEADS,
            );
            let k = to_heads(
                &composite_ref::linear(&h, D_MODEL, &lw("wk"), None),
                N_KV_HEADS,
            );
            let v = to_heads(
                &composite_ref::linear(&h, D_MODEL, &lw("wv"), None),
                N_KV_HEADS,
            );
            let rot = |x: &[f64], h: usize| {
                let dims = [1, h, SEQ, HEAD_DIM];
                composite_ref::rope(x, dims, &positions, &cos, &sin, half, Pairing::HalfSplit)
            };
            let (q, k) = (rot(&q, N_HEADS), rot(&k, N_KV_HEADS));
            let a = composite_ref::attention(
                &q,
                &k,
                &v,
                [1, N_HEADS, SEQ, HEAD_DIM],
                SEQ,
                opts,
                |_, _, p, j| j <= p,
            );
            let o = composite_ref::linear(
                &from_heads(&a, N_HEADS),
                N_HEADS * HEAD_DIM,
                &lw("wo"),
                None,
            );
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let h = composite_ref::rmsnorm(&x, D_MODEL, &lw("ffn_norm"), eps, 0.0);
            let gate = composite_ref::linear(&h, D_MODEL, &lw("w_gate"), None);
            let up = composite_ref::linear(&h, D_MODEL, &lw("w_up"), None);
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(&g, &u)| composite_ref::silu(g) * u)
                .collect();
            let down = composite_ref::linear(&act, FFN, &lw("w_down"), None);
            x.iter_mut().zip(&down).for_each(|(x, d)| *x += d);
        }
        let h = composite_ref::rmsnorm(&x, D_MODEL, &w.wide("final_norm"), eps, 0.0);
        all.extend(composite_ref::linear(&h, D_MODEL, &w.wide("head"), None));
    }
    all
}

fn logits_tensor(v: &[f32]) -> HostTensor<'_> {
    HostTensor::f32([BATCH, SEQ, VOCAB], v).unwrap()
}

#[test]
fn prefill_decode_and_chunks_agree_and_match_the_f64_reference() {
    let started = Instant::now();
    let weights = Weights::random(0x70E_DEC0DE);
    let graphs: BTreeMap<usize, Graph> = [SEQ, 5, 3, 1]
        .into_iter()
        .map(|t| (t, trace_step(t).unwrap()))
        .collect();
    let traced = started.elapsed();

    let prefill = run(&weights, &graphs, &[SEQ]);
    let decode = run(&weights, &graphs, &[5, 1, 1, 1, 1]);
    let chunked = run(&weights, &graphs, &[3, 3, 3]);
    let evaluated = started.elapsed() - traced;

    // Every position's logits agree across the three schedules.
    let want = wide(&prefill.logits);
    let dims = [BATCH, SEQ, VOCAB];
    let e_decode = assert_close(
        "prefill 5 + 4 decode steps vs one prefill",
        &logits_tensor(&decode.logits),
        &dims,
        &want,
        TOL_SCHEDULE,
    );
    let e_chunks = assert_close(
        "chunks of 3 vs one prefill",
        &logits_tensor(&chunked.logits),
        &dims,
        &want,
        TOL_SCHEDULE,
    );

    // The final caches agree too: same names, same order, same values.
    let mut e_state = 0.0f64;
    for other in [&decode, &chunked] {
        assert_eq!(other.state.len(), prefill.state.len());
        for ((name, got), (want_name, want)) in other.state.iter().zip(&prefill.state) {
            assert_eq!(name, want_name);
            let w = wide(want.as_f32().unwrap());
            e_state = e_state.max(assert_close(name, got, &cache_dims(), &w, TOL_SCHEDULE));
        }
    }
    // Positions past the sequence were never written.
    for (name, cache) in &prefill.state {
        let v = cache.as_f32().unwrap();
        for (i, &x) in v.iter().enumerate() {
            let p = (i / HEAD_DIM) % CAP;
            assert!(p < SEQ || x == 0.0, "{name}: position {p} written");
            assert!(x.is_finite(), "{name}: element {i} is {x}");
        }
    }

    // The oracle against the independent f64 model, first position and all positions.
    let reference = reference_logits(&weights);
    let first: Vec<f32> = (0..BATCH)
        .flat_map(|bi| prefill.logits[bi * SEQ * VOCAB..bi * SEQ * VOCAB + VOCAB].to_vec())
        .collect();
    let first_ref: Vec<f64> = (0..BATCH)
        .flat_map(|bi| reference[bi * SEQ * VOCAB..bi * SEQ * VOCAB + VOCAB].to_vec())
        .collect();
    let e_first = assert_close(
        "first position vs the f64 reference",
        &HostTensor::f32([BATCH, VOCAB], first).unwrap(),
        &[BATCH, VOCAB],
        &first_ref,
        TOL_REFERENCE,
    );
    let e_all = assert_close(
        "every position vs the f64 reference",
        &logits_tensor(&prefill.logits),
        &dims,
        &reference,
        TOL_REFERENCE,
    );
    let e_decode_ref = assert_close(
        "decode schedule vs the f64 reference",
        &logits_tensor(&decode.logits),
        &dims,
        &reference,
        TOL_REFERENCE,
    );
    println!(
        "schedules: decode {e_decode:.2e}, chunks {e_chunks:.2e}, caches {e_state:.2e} \
         (tolerance {TOL_SCHEDULE:.0e}); vs f64: first position {e_first:.2e}, all {e_all:.2e}, \
         decode {e_decode_ref:.2e} (tolerance {TOL_REFERENCE:.0e}); traced in {traced:?}, \
         evaluated in {evaluated:?}"
    );
}

#[test]
fn the_step_graph_names_its_roles_and_pairs_every_cache() {
    let g = trace_step(1).unwrap();
    let labels: Vec<&str> = g.values().iter().map(|v| v.label.as_str()).collect();
    for l in 0..LAYERS {
        for role in [
            "attn.q",
            "attn.k",
            "attn.k_cache",
            "attn.v_cache",
            "ffn.out",
        ] {
            let label = format!("l{l}.{role}");
            assert!(
                labels.contains(&label.as_str()),
                "no value labelled {label}"
            );
        }
    }
    assert!(labels.contains(&"logits"));
}
