//! Random-weight Hugging Face checkpoints (written by `scripts/ref/models/gen_random_checkpoints.py`)
//! evaluated on the CPU oracle against `transformers` float32 (eager attention): every prefill
//! position's logits, decode after prefill, and chunked prefill then decode.
//!
//! Tolerance: the largest |oracle - reference| over a step's logits, relative to the largest
//! reference logit, is at most 2e-5 (measured: about 5e-7, at most 1.0e-6 for the MoE fixtures;
//! both sides compute in f32; they differ only in summation order, which moves results by a few
//! ulps per op over a few dozen ops).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use poot_models::{LogitsMode, StepShape};
use serde::Deserialize;

const TOLERANCE: f32 = 2e-5;

#[derive(Deserialize)]
struct DecodeStep {
    input_id: i32,
    position: usize,
    logits: Vec<f32>,
}

#[derive(Deserialize)]
struct Run {
    prompt_ids: Vec<i32>,
    prefill_logits: Vec<Vec<f32>>,
    decode: Vec<DecodeStep>,
}

#[derive(Deserialize)]
struct Reference {
    #[serde(flatten)]
    run: Run,
    long: Option<Run>,
}

fn reference(name: &str) -> Reference {
    let text =
        std::fs::read_to_string(fixture_dir("random").join(name).join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Prefill of the whole prompt with every position's logits, then decode after prefill.
fn check_prefill_then_decode(loaded: &Loaded, run: &Run, name: &str) {
    let cap = 64;
    let n = run.prompt_ids.len();
    let mut s = OracleSession::new(loaded, 1, cap);
    let (logits, dims) = s.step(
        std::slice::from_ref(&run.prompt_ids),
        &[0],
        StepShape::new(1, n, cap).with_logits(LogitsMode::All),
    );
    let vocab = dims[2];
    for (p, want) in run.prefill_logits.iter().enumerate() {
        let err = max_rel_err(&logits[p * vocab..(p + 1) * vocab], want);
        assert!(
            err <= TOLERANCE,
            "{name}: prefill position {p}: relative error {err}"
        );
    }
    for (i, d) in run.decode.iter().enumerate() {
        let (logits, _) = s.step(
            &[vec![d.input_id]],
            &[d.position],
            StepShape::new(1, 1, cap),
        );
        let err = max_rel_err(&logits, &d.logits);
        assert!(
            err <= TOLERANCE,
            "{name}: decode step {i}: relative error {err}"
        );
        assert_eq!(
            argmax(&logits),
            argmax(&d.logits),
            "{name}: decode step {i} greedy token"
        );
    }
}

/// A prefill is a step that continues from a position: chunks of 4, then decode.
fn check_chunked_prefill(loaded: &Loaded, run: &Run, name: &str) {
    let cap = 64;
    let mut s = OracleSession::new(loaded, 1, cap);
    let mut last = Vec::new();
    for (c, chunk) in run.prompt_ids.chunks(4).enumerate() {
        let (logits, _) = s.step(
            &[chunk.to_vec()],
            &[c * 4],
            StepShape::new(1, chunk.len(), cap),
        );
        last = logits;
    }
    let want = run.prefill_logits.last().unwrap();
    let err = max_rel_err(&last, want);
    assert!(
        err <= TOLERANCE,
        "{name}: chunked prefill last logits: relative error {err}"
    );
    for (i, d) in run.decode.iter().enumerate() {
        let (logits, _) = s.step(
            &[vec![d.input_id]],
            &[d.position],
            StepShape::new(1, 1, cap),
        );
        assert!(
            max_rel_err(&logits, &d.logits) <= TOLERANCE,
            "{name}: decode {i} after chunked prefill"
        );
    }
}

fn check_decoder(name: &str) {
    check_decoder_at(&load(&fixture_dir("random").join(name)), name, name);
}

/// The checks of [`check_decoder`] for `loaded` against fixture `reference`'s transformers run.
fn check_decoder_at(loaded: &Loaded, reference_name: &str, name: &str) {
    let r = reference(reference_name);
    check_prefill_then_decode(loaded, &r.run, name);
    check_chunked_prefill(loaded, &r.run, name);
    if let Some(long) = &r.long {
        check_prefill_then_decode(loaded, long, &format!("{name} (long prompt)"));
        check_chunked_prefill(loaded, long, &format!("{name} (long prompt)"));
    }
}

#[test]
fn llama_matches_transformers() {
    check_decoder("llama");
}

#[test]
fn llama3_scaled_rope_and_tied_head_match_transformers() {
    check_decoder("llama3_scaled");
}

#[test]
fn qwen2_bf16_with_biases_matches_transformers() {
    check_decoder("qwen2");
}

#[test]
fn qwen3_qk_norm_matches_transformers() {
    check_decoder("qwen3");
}

#[test]
fn gemma3_sliding_and_global_layers_match_transformers() {
    check_decoder("gemma3");
}

#[test]
fn qwen2_yarn_mqa_matches_transformers() {
    check_decoder("qwen2_yarn");
}

/// Four experts, top-2 renormalized; every expert stored as its own tensor, stacked at load.
#[test]
fn mixtral_routed_experts_match_transformers() {
    check_decoder("mixtral");
}

/// Four bf16 experts, top-2 not renormalized (`norm_topk_prob: false`), qk-norm.
#[test]
fn qwen3moe_bf16_experts_match_transformers() {
    check_decoder("qwen3moe");
}

/// The Mixtral fixture converted by gguf-py as llama.cpp does (`scripts/ref/models/gen_moe_gguf.py`):
/// a `llama` GGUF with `llama.expert_count`, Q and K rows permuted, each projection's experts
/// one stored `[experts, out, in]` stack. It builds as a Mixtral and matches transformers.
#[test]
fn gguf_mixtral_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("mixtral_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "mixtral");
    check_decoder_at(&loaded, "mixtral", "gguf mixtral");
}

/// The bf16 Qwen3-MoE as a `qwen3moe` GGUF (gen_moe_gguf.py): BF16 expert stacks as stored,
/// `expert_weights_norm` false as the checkpoint's `norm_topk_prob`. It matches transformers.
#[test]
fn gguf_qwen3moe_bf16_stacks_match_transformers() {
    let loaded = load(&fixture_dir("random").join("qwen3moe_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "qwen3moe");
    let stack = loaded
        .model
        .weights()
        .by_const("w.l1.ffn.experts.down")
        .unwrap();
    assert_eq!(stack.ty.dtype, poot_graph_ir::DType::BF16);
    assert_eq!(stack.ty.dims(), [4, 64, 48]);
    check_decoder_at(&loaded, "qwen3moe", "gguf qwen3moe");
}

/// Q8_0 expert stacks stay packed (each contraction decodes the selected experts' blocks) and
/// compute what the same values stored as f32 compute (measured: bit for bit). Against
/// transformers' f32 weights the quantization itself moves the logits, by at most
/// [`Q8_0_TOLERANCE`] (measured: 1.0e-2).
#[test]
fn gguf_mixtral_q8_0_expert_stacks_read_packed() {
    let dir = fixture_dir("random").join("mixtral_gguf");
    let packed = load(&dir.join("model-q8_0.gguf"));
    let dense = load(&dir.join("model-q8_0-dequant.gguf"));
    let stack = packed
        .model
        .weights()
        .by_const("w.l0.ffn.experts.gate")
        .unwrap();
    assert_eq!(
        stack.ty.dtype,
        poot_graph_ir::DType::Packed(poot_formats::GgmlType::Q8_0)
    );
    let r = reference("mixtral");
    for run in [&r.run, r.long.as_ref().unwrap()] {
        let n = run.prompt_ids.len();
        let shape = StepShape::new(1, n, 64).with_logits(LogitsMode::All);
        let (got, _) = OracleSession::new(&packed, 1, 64).step(
            std::slice::from_ref(&run.prompt_ids),
            &[0],
            shape,
        );
        let (want, _) = OracleSession::new(&dense, 1, 64).step(
            std::slice::from_ref(&run.prompt_ids),
            &[0],
            shape,
        );
        let err = max_rel_err(&got, &want);
        assert!(err <= TOLERANCE, "packed vs dequantized stacks: {err}");
        let vocab = got.len() / n;
        for (p, hf) in run.prefill_logits.iter().enumerate() {
            let err = max_rel_err(&got[p * vocab..(p + 1) * vocab], hf);
            assert!(err <= Q8_0_TOLERANCE, "q8_0 vs transformers at {p}: {err}");
        }
    }
}

/// Largest relative logit error of the Q8_0-expert Mixtral against transformers' f32 weights.
const Q8_0_TOLERANCE: f32 = 2e-2;

/// Eight experts, top-2 not renormalized; q and k RMS-normalized over the whole projection.
#[test]
fn olmoe_whole_projection_qk_norms_match_transformers() {
    check_decoder("olmoe");
}

/// The OLMoE as llama.cpp's converter writes it (gen_moe_gguf.py): arch `olmoe`, halves
/// rotated as stored, `[64]` and `[32]` q/k norm scales, stacked experts.
#[test]
fn gguf_olmoe_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("olmoe_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "olmoe");
    let k_norm = loaded.model.weights().by_const("w.l0.attn.k_norm").unwrap();
    assert_eq!(k_norm.ty.dims(), [32]);
    check_decoder_at(&loaded, "olmoe", "gguf olmoe");
}

/// Granite's multipliers: embeddings x4, attention scale 0.1, each block's output x0.5 before
/// the residual add, logits divided by 3; a 20-token prompt as well.
#[test]
fn granite_multipliers_match_transformers() {
    check_decoder("granite");
}

/// The Granite as llama.cpp's converter writes it (gen_moe_gguf.py): arch `granite`, Q and K
/// rows permuted, the multipliers as `granite.embedding_scale`, `.residual_scale`,
/// `.attention.scale` and `.logit_scale`.
#[test]
fn gguf_granite_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("granite_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "granite");
    check_decoder_at(&loaded, "granite", "gguf granite");
}

/// Granite-MoE: Granite's multipliers, four experts stored stacked with gate and up fused
/// (`input_linear`, one contraction split in the graph), the top-2 logits softmaxed.
#[test]
fn granitemoe_fused_expert_stacks_match_transformers() {
    let loaded = load(&fixture_dir("random").join("granitemoe"));
    let fused = loaded
        .model
        .weights()
        .by_const("w.l1.ffn.experts.gate_up")
        .unwrap();
    assert_eq!(fused.ty.dims(), [4, 96, 64]);
    check_decoder_at(&loaded, "granitemoe", "granitemoe");
}

/// The Granite-MoE as llama.cpp's converter writes it (gen_moe_gguf.py): `input_linear` split
/// into gate and up stacks, Q and K rows permuted, the multipliers as GGUF keys.
#[test]
fn gguf_granitemoe_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("granitemoe_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "granitemoe");
    check_decoder_at(&loaded, "granitemoe", "gguf granitemoe");
}

/// Gemma 2: sliding-window layers alternating with global ones (window 8, shorter than the
/// long prompt), attention and final logit softcaps small enough to bend, queries scaled by
/// `query_pre_attn_scalar`, sandwich norms.
#[test]
fn gemma2_softcaps_and_alternating_windows_match_transformers() {
    check_decoder("gemma2");
}

/// The Gemma 2 fixture as llama.cpp's converter writes it (`gen_dense_fixtures.py`: norm
/// scales stored as `w + 1`, softcaps and window in the GGUF metadata).
#[test]
fn gguf_gemma2_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("gemma2_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "gemma2");
    check_decoder_at(&loaded, "gemma2", "gguf gemma2");
}

/// gpt-oss: attention sinks (N(0, 1) per head), Q/K/V/O biases, sliding layers (window 8,
/// shorter than the long prompt) alternating with full ones, YaRN without truncation (factor 4
/// over 32 positions), a biased router over four experts top-2, interleaved gate/up stacks
/// stored `[experts, in, out]` with biases, and a clamped SwiGLU whose limit (1.5) binds
/// (`gen_dense_fixtures.py` checks that the sinks, window, YaRN and clamps each move the logits).
#[test]
fn gpt_oss_sinks_yarn_and_clamped_experts_match_transformers() {
    check_decoder("gpt_oss");
}

/// A random gpt-oss with MXFP4 experts as llama.cpp's converter writes it (arch `gpt-oss`,
/// `gen_dense_fixtures.py gpt_oss_gguf`): separate gate and up stacks and their biases split
/// from the interleaved ones, sinks, alternating windows, YaRN, a clamp limit of 1.5. Every
/// expert stack is bound as its stored MXFP4 blocks (no f32 expert table among the traced
/// graph's constants) and the model matches transformers run on the MXFP4 values.
#[test]
fn gguf_gpt_oss_mxfp4_expert_stacks_read_packed_and_match_transformers() {
    let loaded = load(&fixture_dir("random").join("gpt_oss_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "gpt_oss");
    // [experts, out, in]: 64 expert features and 64 hidden ones.
    let stacks = mxfp4_expert_stacks(&loaded);
    assert!(
        stacks.iter().all(|(_, dims)| dims == &[4, 64, 64]),
        "{stacks:?}"
    );
    assert_eq!(
        stacks.len(),
        4 * 3,
        "gate, up and down stacks of four layers"
    );
    check_decoder_at(&loaded, "gpt_oss_gguf", "gguf gpt_oss");
}

/// A random gpt-oss saved as OpenAI released gpt-oss (`gen_dense_fixtures.py gpt_oss_mxfp4`):
/// `quant_method: mxfp4`, each layer's experts as `gate_up_proj_blocks` / `_scales` (gate and
/// up rows interleaved) and `down_proj_blocks` / `_scales`, everything else bfloat16, with the
/// `gpt_oss` fixture's sinks, windows, YaRN and clamp. Every expert stack is bound as MXFP4
/// (no f32 expert table among the traced graph's constants) and the model matches transformers
/// run on the values the checkpoint encodes.
#[test]
fn hf_gpt_oss_mxfp4_expert_blocks_read_packed_and_match_transformers() {
    let loaded = load(&fixture_dir("random").join("gpt_oss_mxfp4"));
    assert_eq!(loaded.model.config().family, "gpt_oss");
    let stacks = mxfp4_expert_stacks(&loaded);
    for (name, dims) in &stacks {
        // [experts, out, in]: gate/up rows interleaved over 64 hidden inputs; down over 64.
        let want: &[usize] = match name.ends_with(".gate_up") {
            true => &[4, 128, 64],
            false => &[4, 64, 64],
        };
        assert_eq!(dims, want, "{name}");
    }
    assert_eq!(
        stacks.len(),
        4 * 2,
        "gate/up and down stacks of four layers"
    );
    check_decoder_at(&loaded, "gpt_oss_mxfp4", "hf gpt_oss mxfp4");
}

/// The expert stacks among a decode step's constants (name and dims), each asserted MXFP4, and
/// nothing else of a stack's rank: no dequantized table beside the blocks.
fn mxfp4_expert_stacks(loaded: &Loaded) -> Vec<(String, Vec<usize>)> {
    use poot_graph_ir::{DType, TraceLimits};
    use poot_models::StepSpec;
    let mxfp4 = DType::Packed(poot_formats::GgmlType::MXFP4);
    let graph = loaded
        .model
        .trace(
            &StepSpec::step(StepShape::new(1, 5, 64)),
            TraceLimits::standard(4096),
        )
        .unwrap();
    let mut stacks = Vec::new();
    for (_, name, ty) in graph.consts() {
        assert!(
            ty.dims().len() < 3 || ty.dtype == mxfp4,
            "{name}: {:?} {:?}",
            ty.dtype,
            ty.dims()
        );
        if name.contains(".experts.") && !name.ends_with(".bias") {
            assert_eq!(ty.dtype, mxfp4, "{name}");
            stacks.push((name.to_string(), ty.dims().to_vec()));
        }
    }
    stacks
}

/// OLMo 2: a norm after each block and none before, qk-norms over the whole projections.
#[test]
fn olmo2_output_norms_and_whole_qk_norms_match_transformers() {
    check_decoder("olmo2");
}

/// The OLMo 2 fixture as an `olmo2` GGUF (`gen_dense_fixtures.py`).
#[test]
fn gguf_olmo2_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("olmo2_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "olmo2");
    check_decoder_at(&loaded, "olmo2", "gguf olmo2");
}

/// Qwen2-MoE: Q, K and V biases, four experts top-2 renormalized (`norm_topk_prob`), and a
/// shared expert scaled by the sigmoid of its gate logit, added to the routed sum.
#[test]
fn qwen2moe_shared_expert_matches_transformers() {
    check_decoder("qwen2_moe");
}

/// The Qwen2-MoE as a `qwen2moe` GGUF (`gen_dense_fixtures.py`): stacked experts, the shared
/// expert as `*_shexp`, its gate logit `[1, 64]`.
#[test]
fn gguf_qwen2moe_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("qwen2_moe_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "qwen2moe");
    let gate = loaded
        .model
        .weights()
        .by_const("w.l1.ffn.shared.gate_logit")
        .unwrap();
    assert_eq!(gate.ty.dims(), [1, 64]);
    check_decoder_at(&loaded, "qwen2_moe", "gguf qwen2moe");
}

/// SmolLM3: four Llama layers, the last without rotary embeddings (`no_rope_layers`
/// `[1, 1, 1, 0]`); its queries and keys attend as projected (turning them moves the long
/// prompt's last logits by 0.67, `gen_dense_fixtures.py`).
#[test]
fn smollm3_nope_layer_matches_transformers() {
    check_decoder("smollm3");
}

/// The SmolLM3 as an `smollm3` GGUF (`gen_dense_fixtures.py`): Q and K rows permuted as for a
/// Llama, and no key for the NoPE layers (every fourth, as llama.cpp fixes it).
#[test]
fn gguf_smollm3_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("smollm3_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "smollm3");
    check_decoder_at(&loaded, "smollm3", "gguf smollm3");
}

/// Phi-3: Q, K and V stored as one `qkv_proj` and gate and up as one `gate_up_proj`, each
/// bound as row ranges of its tensor; half of each head's features rotate; a window of 8 on
/// every layer (shorter than the long prompt).
#[test]
fn phi3_fused_projections_match_transformers() {
    let loaded = load(&fixture_dir("random").join("phi3"));
    let k = loaded.model.weights().by_const("w.l1.attn.k").unwrap();
    assert_eq!(k.ty.dims(), [32, 64]);
    check_decoder_at(&loaded, "phi3", "phi3");
}

/// The Phi-3 as a `phi3` GGUF (`gen_dense_fixtures.py`): `attn_qkv` and the fused `ffn_up`
/// as llama.cpp's converter keeps them, `phi3.rope.dimension_count` 8, the window as
/// `phi3.attention.sliding_window`.
#[test]
fn gguf_phi3_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("phi3_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "phi3");
    check_decoder_at(&loaded, "phi3", "gguf phi3");
}

/// LongRoPE within its original context (64 of 128 positions): each frequency divided by its
/// short factor, the tables scaled by sqrt(1 + ln 2 / ln 64).
#[test]
fn phi3_longrope_short_factors_match_transformers() {
    check_decoder("phi3_longrope");
}

/// A step holding more positions than LongRoPE's original context would need its long
/// factors: refused when traced, naming the key.
#[test]
fn phi3_longrope_beyond_the_original_context_is_refused() {
    let loaded = load(&fixture_dir("random").join("phi3_longrope"));
    let spec = poot_models::StepSpec::step(StepShape::new(1, 1, 128));
    match loaded
        .model
        .trace(&spec, poot_graph_ir::TraceLimits::standard(4096))
    {
        Err(poot_models::TraceError::RopeCapacity {
            key,
            capacity,
            limit,
        }) => assert_eq!(
            (key, capacity, limit),
            ("original_max_position_embeddings", 128, 64)
        ),
        Err(e) => panic!("expected RopeCapacity, got {e}"),
        Ok(_) => panic!("expected RopeCapacity, got a graph"),
    }
}

/// A whole-projection qk-norm takes its mean square over every head, which a tensor-parallel
/// rank does not hold: OLMo 2 is refused over a group, naming the family.
#[test]
fn olmo2_is_refused_over_a_tensor_parallel_group() {
    let loaded = load(&fixture_dir("random").join("olmo2"));
    let shard = poot_models::Shard::new(0, 2).unwrap();
    match loaded.model.shard_weights(shard) {
        Err(poot_models::TraceError::Unsharded { family, ranks }) => {
            assert_eq!((family, ranks), ("olmo2", 2))
        }
        Err(e) => panic!("expected Unsharded, got {e}"),
        Ok(_) => panic!("expected Unsharded, got a share"),
    }
}

/// MPT: ALiBi over six heads (not a power of two: four slopes of four heads, then the odd
/// slopes of eight), Q, K and V stored as one `Wqkv` and clamped to `clip_qkv` 1.5, a
/// `softmax_scale` of 0.2, LayerNorms without bias, a plain GeLU feed-forward and a tied head
/// (`gen_dense_fixtures.py` checks that ALiBi, the clamp and the scale each move the logits).
#[test]
fn mpt_alibi_and_clamped_qkv_match_transformers() {
    let loaded = load(&fixture_dir("random").join("mpt"));
    let slopes = loaded.model.weights().by_const("w.alibi.slopes").unwrap();
    assert_eq!(slopes.ty.dims(), [6, 1]);
    assert!(loaded.model.weights().by_const("w.rope0.cos").is_none());
    check_decoder_at(&loaded, "mpt", "mpt");
}

/// The MPT as an `mpt` GGUF (`gen_dense_fixtures.py`, as llama.cpp's converter writes it): the
/// clamp as `mpt.attention.clamp_kqv`, the slopes' bias as `mpt.attention.max_alibi_bias`, and
/// the `softmax_scale` (which llama.cpp's converter drops) as `mpt.attention.scale`.
#[test]
fn gguf_mpt_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("mpt_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "mpt");
    check_decoder_at(&loaded, "mpt", "gguf mpt");
}

/// BLOOM: ALiBi over twelve heads (eight slopes of eight heads, then the odd slopes of sixteen:
/// `2^-0.5`, `2^-1.5`, ...), the embeddings' LayerNorm, biases on every projection and norm,
/// and `query_key_value` stored per head (`[heads, 3, head_dim]` rows), each part bound as its
/// runs of rows (reading it as `[3, heads, head_dim]` would move the logits by 13.6,
/// `gen_dense_fixtures.py`).
#[test]
fn bloom_alibi_and_per_head_qkv_match_transformers() {
    let loaded = load(&fixture_dir("random").join("bloom"));
    let k = loaded.model.weights().by_const("w.l2.attn.k").unwrap();
    assert_eq!(k.ty.dims(), [96, 96]);
    let slopes = loaded.model.weights().by_const("w.alibi.slopes").unwrap();
    assert_eq!(slopes.ty.dims(), [12, 1]);
    check_decoder_at(&loaded, "bloom", "bloom");
}

/// The BLOOM as a `bloom` GGUF (`gen_dense_fixtures.py`, as llama.cpp's converter writes it):
/// `attn_qkv` and its bias re-ordered to `[3, heads, head_dim]` rows, the embedding copied as
/// `output.weight`, the embeddings' norm as `token_embd_norm`.
#[test]
fn gguf_bloom_matches_transformers() {
    let loaded = load(&fixture_dir("random").join("bloom_gguf/model.gguf"));
    assert_eq!(loaded.model.config().family, "bloom");
    check_decoder_at(&loaded, "bloom", "gguf bloom");
}
