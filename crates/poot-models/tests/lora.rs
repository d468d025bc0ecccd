//! LoRA adapters on the CPU oracle against transformers + peft: two random PEFT adapters for the
//! random llama fixture (written with their references by
//! `scripts/ref/models/gen_lora_fixtures.py`): `a` (rank 4, all seven projections) and `b`
//! (rank 2, rsLoRA, q/v/down), one adapter each on the qwen2, qwen3 and gemma3 fixtures, and
//! one on a GPTQ base: every prefill position's logits and greedy decode.
//!
//! Tolerance: as `random_checkpoints.rs`, the largest |oracle - reference| over a step's logits
//! relative to the largest reference logit is at most 2e-5 (both sides f32; summation order).
//! Rows with different adapters in one step must equal their lone runs exactly: the oracle
//! computes each row's contractions on its own.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/tiny_gguf.rs"]
mod tiny_gguf;

use common::*;
use poot_models::lora::{LoraError, LoraTarget, LoraTargets};
use poot_models::{LogitsMode, LoraAdapter, LoraShape, LoraTables, StepShape, TraceError};
use serde::Deserialize;

const TOLERANCE: f32 = 2e-5;
const CAP: usize = 64;

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

fn reference(dir: &std::path::Path) -> Run {
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn adapter(name: &str) -> LoraAdapter {
    LoraAdapter::read(&fixture_dir("lora").join(name)).unwrap()
}

fn llama() -> Loaded {
    load(&fixture_dir("random").join("llama"))
}

/// Tables with `a` at index 1 and `b` at index 2.
fn tables(loaded: &Loaded) -> LoraTables {
    let w = loaded.model.weights();
    let n_layers = loaded.model.config().n_layers;
    let mut t = LoraTables::new(w, n_layers, LoraShape::new(3, 8)).unwrap();
    t.write(1, &adapter("a"), w).unwrap();
    t.write(2, &adapter("b"), w).unwrap();
    t
}

/// Prefill (every position's logits) then greedy decode of one row with adapter `index`.
fn check_run(loaded: &Loaded, tables: &LoraTables, index: i32, run: &Run, what: &str) {
    let shape = tables.shape();
    let mut s = OracleSession::new(loaded, 1, CAP);
    s.lora = Some((tables, vec![index]));
    let n = run.prompt_ids.len();
    let (logits, dims) = s.step(
        std::slice::from_ref(&run.prompt_ids),
        &[0],
        StepShape::new(1, n, CAP)
            .with_logits(LogitsMode::All)
            .with_lora(Some(shape)),
    );
    let vocab = dims[2];
    for (p, want) in run.prefill_logits.iter().enumerate() {
        let err = max_rel_err(&logits[p * vocab..(p + 1) * vocab], want);
        assert!(err <= TOLERANCE, "{what}: prefill position {p}: {err}");
    }
    for (i, d) in run.decode.iter().enumerate() {
        let (logits, _) = s.step(
            &[vec![d.input_id]],
            &[d.position],
            StepShape::new(1, 1, CAP).with_lora(Some(shape)),
        );
        let err = max_rel_err(&logits, &d.logits);
        assert!(err <= TOLERANCE, "{what}: decode step {i}: {err}");
        assert_eq!(argmax(&logits), argmax(&d.logits), "{what}: decode {i}");
    }
}

#[test]
fn adapters_match_transformers_peft() {
    let loaded = llama();
    let t = tables(&loaded);
    for (name, index) in [("a", 1), ("b", 2)] {
        let run = reference(&fixture_dir("lora").join(name));
        check_run(&loaded, &t, index, &run, name);
    }
}

/// The references differ from the base model's by far more than the tolerance, so the match
/// above shows the adapter is applied; index 0 (and a cleared index) give the base logits.
#[test]
fn index_zero_and_cleared_adapters_are_the_base_model() {
    let loaded = llama();
    let mut t = tables(&loaded);
    let base: Run = {
        let text =
            std::fs::read_to_string(fixture_dir("random").join("llama/reference.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let run_a = reference(&fixture_dir("lora").join("a"));
    let last = |r: &Run| r.prefill_logits.last().unwrap().clone();
    // Same prompt length; the prompts differ, so compare each run through the base model.
    let mut s = OracleSession::new(&loaded, 1, CAP);
    s.lora = Some((&t, vec![0]));
    let n = run_a.prompt_ids.len();
    let shape = StepShape::new(1, n, CAP).with_lora(Some(t.shape()));
    let (with_zero, _) = s.step(std::slice::from_ref(&run_a.prompt_ids), &[0], shape);
    let mut plain = OracleSession::new(&loaded, 1, CAP);
    let (no_lora, _) = plain.step(
        std::slice::from_ref(&run_a.prompt_ids),
        &[0],
        StepShape::new(1, n, CAP),
    );
    assert_eq!(with_zero, no_lora, "index 0 adds nothing");
    assert!(
        max_rel_err(&no_lora, &last(&run_a)) > 100.0 * TOLERANCE,
        "adapter a changes the logits"
    );
    // The base fixture's own reference through index 0 of the LoRA step.
    let mut s = OracleSession::new(&loaded, 1, CAP);
    s.lora = Some((&t, vec![0]));
    let nb = base.prompt_ids.len();
    let (logits, _) = s.step(
        std::slice::from_ref(&base.prompt_ids),
        &[0],
        StepShape::new(1, nb, CAP).with_lora(Some(t.shape())),
    );
    assert!(max_rel_err(&logits, &last(&base)) <= TOLERANCE);
    t.clear(1).unwrap();
    let mut s = OracleSession::new(&loaded, 1, CAP);
    s.lora = Some((&t, vec![1]));
    let (cleared, _) = s.step(std::slice::from_ref(&run_a.prompt_ids), &[0], shape);
    assert_eq!(cleared, no_lora, "a cleared index adds nothing");
}

/// Three rows in one step, each with its own adapter (a, b, none), equal their lone runs
/// exactly, in prefill and in decode.
#[test]
fn rows_with_different_adapters_equal_their_lone_runs() {
    let loaded = llama();
    let t = tables(&loaded);
    let runs = [
        reference(&fixture_dir("lora").join("a")),
        reference(&fixture_dir("lora").join("b")),
        reference(&fixture_dir("lora").join("a")),
    ];
    let indices = [1, 2, 0];
    let n = runs[0].prompt_ids.len();
    let prompts: Vec<Vec<i32>> = runs.iter().map(|r| r.prompt_ids.clone()).collect();
    let mut batch = OracleSession::new(&loaded, 3, CAP);
    batch.lora = Some((&t, indices.to_vec()));
    let shape = |rows, tokens| StepShape::new(rows, tokens, CAP).with_lora(Some(t.shape()));
    let (together, dims) = batch.step(&prompts, &[0, 0, 0], shape(3, n));
    let vocab = dims[dims.len() - 1];
    let next: Vec<Vec<i32>> = (0..3)
        .map(|r| vec![argmax(&together[r * vocab..(r + 1) * vocab]) as i32])
        .collect();
    let (together_decode, _) = batch.step(&next, &[n, n, n], shape(3, 1));
    for (r, &index) in indices.iter().enumerate() {
        let mut lone = OracleSession::new(&loaded, 1, CAP);
        lone.lora = Some((&t, vec![index]));
        let (alone, _) = lone.step(&prompts[r..r + 1], &[0], shape(1, n));
        assert_eq!(
            &together[r * vocab..(r + 1) * vocab],
            &alone[..],
            "row {r} prefill"
        );
        let (alone_decode, _) = lone.step(&next[r..r + 1], &[n], shape(1, 1));
        assert_eq!(
            &together_decode[r * vocab..(r + 1) * vocab],
            &alone_decode[..],
            "row {r} decode"
        );
    }
    // Row 0 (adapter a) is also transformers + peft's first prefill logits... of its last
    // position.
    let want = runs[0].prefill_logits.last().unwrap();
    assert!(max_rel_err(&together[..vocab], want) <= TOLERANCE);
}

#[test]
fn adapters_are_checked_against_the_capacity_and_the_model() {
    let loaded = llama();
    let w = loaded.model.weights();
    let n_layers = loaded.model.config().n_layers;
    let a = adapter("a");
    // Rank 4 over a compiled rank of 2.
    let mut small = LoraTables::new(w, n_layers, LoraShape::new(1, 2)).unwrap();
    assert!(matches!(
        small.write(1, &a, w),
        Err(LoraError::RankTooLarge {
            rank: 4,
            max_rank: 2
        })
    ));
    // Index 0 is reserved; past max_loras is out of range.
    assert!(matches!(
        small.write(0, &adapter("b"), w),
        Err(LoraError::Index { index: 0, .. })
    ));
    assert!(matches!(
        small.write(2, &adapter("b"), w),
        Err(LoraError::Index { index: 2, .. })
    ));
    // Tables compiled for q/v/down only refuse an adapter on all seven.
    let qvd = LoraShape {
        targets: LoraTargets::NONE
            .with(LoraTarget::Q)
            .with(LoraTarget::V)
            .with(LoraTarget::Down),
        ..LoraShape::new(1, 8)
    };
    let mut partial = LoraTables::new(w, n_layers, qvd).unwrap();
    assert!(matches!(
        partial.write(1, &a, w),
        Err(LoraError::TargetNotCompiled { .. })
    ));
    partial.write(1, &adapter("b"), w).unwrap();
    // Capacity limits.
    assert!(matches!(
        LoraTables::new(w, n_layers, LoraShape::new(0, 8)),
        Err(LoraError::Capacity { .. })
    ));
    assert!(matches!(
        LoraTables::new(w, n_layers, LoraShape::new(1, 1 << 20)),
        Err(LoraError::Capacity { .. })
    ));
    // A layer the model lacks.
    let mut far = a.clone();
    let pair = far.pairs.values().next().unwrap().clone();
    far.pairs.insert((7, LoraTarget::Q), pair);
    let mut t = LoraTables::new(w, n_layers, LoraShape::new(1, 8)).unwrap();
    assert!(matches!(
        t.write(1, &far, w),
        Err(LoraError::Layer { layer: 7, .. })
    ));
    // A projection of another width (an adapter for another model).
    let mut wide = a.clone();
    let p = wide.pairs.get_mut(&(0, LoraTarget::Q)).unwrap();
    p.in_features = 96;
    p.a = vec![0.0; 4 * 96];
    assert!(matches!(
        t.write(1, &wide, w),
        Err(LoraError::TensorShape { .. })
    ));
}

#[test]
fn a_sharded_step_with_lora_is_refused() {
    let loaded = llama();
    let spec = poot_models::StepSpec::step(
        StepShape::new(1, 1, CAP)
            .with_lora(Some(LoraShape::new(1, 4)))
            .with_shard(poot_models::Shard { rank: 0, ranks: 2 }),
    );
    let err = loaded
        .model
        .trace(&spec, poot_graph_ir::TraceLimits::standard(4096))
        .unwrap_err();
    assert!(matches!(err, TraceError::LoraSharded { ranks: 2 }), "{err}");
}

/// A safetensors file of f32 tensors.
fn safetensors(tensors: &[(&str, Vec<u64>, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, values) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    out
}

fn q_pair(rank: u64) -> Vec<u8> {
    let p = "base_model.model.model.layers.0.self_attn.q_proj";
    safetensors(&[
        (
            &format!("{p}.lora_A.weight"),
            vec![rank, 64],
            vec![0.1; rank as usize * 64],
        ),
        (
            &format!("{p}.lora_B.weight"),
            vec![64, rank],
            vec![0.2; rank as usize * 64],
        ),
    ])
}

#[test]
fn peft_configs_poot_cannot_honour_are_refused() {
    let ok = r#"{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}"#;
    let a = LoraAdapter::parse(ok.as_bytes(), &q_pair(2)).unwrap();
    assert_eq!((a.rank, a.scaling), (2, 2.0));
    let rs = r#"{"r": 4, "lora_alpha": 4, "use_rslora": true, "target_modules": "all-linear"}"#;
    assert_eq!(
        LoraAdapter::parse(rs.as_bytes(), &q_pair(4))
            .unwrap()
            .scaling,
        2.0
    );
    for (config, key) in [
        (r#"{"r": 2, "fan_in_fan_out": true}"#, "fan_in_fan_out"),
        (r#"{"r": 2, "use_dora": true}"#, "use_dora"),
        (r#"{"r": 2, "rank_pattern": {"q_proj": 8}}"#, "rank_pattern"),
        (
            r#"{"r": 2, "alpha_pattern": {"q_proj": 8}}"#,
            "alpha_pattern",
        ),
        (r#"{"r": 2, "bias": "all"}"#, "bias"),
        (
            r#"{"r": 2, "modules_to_save": ["lm_head"]}"#,
            "modules_to_save",
        ),
        (r#"{"r": 2, "peft_type": "IA3"}"#, "peft_type"),
        (r#"{"r": 2, "target_modules": ".*proj"}"#, "target_modules"),
    ] {
        match LoraAdapter::parse(config.as_bytes(), &q_pair(2)) {
            Err(LoraError::Unsupported { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{config}: {other:?}"),
        }
    }
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2, "target_modules": ["lm_head"]}"#, &q_pair(2)),
        Err(LoraError::UnsupportedModule { .. })
    ));
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 0}"#, &q_pair(2)),
        Err(LoraError::ConfigKey { key: "r", .. })
    ));
    assert!(matches!(
        LoraAdapter::parse(b"{not json", &q_pair(2)),
        Err(LoraError::ConfigJson { .. })
    ));
    // The tensors' rank disagrees with the config's.
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &q_pair(3)),
        Err(LoraError::TensorShape { .. })
    ));
    // A tensor of a module outside the seven, and one that is no layer projection.
    let embed = safetensors(&[(
        "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight",
        vec![2, 64],
        vec![0.0; 128],
    )]);
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &embed),
        Err(LoraError::UnsupportedModule { .. })
    ));
    let head = safetensors(&[(
        "base_model.model.lm_head.lora_A.weight",
        vec![2, 64],
        vec![0.0; 128],
    )]);
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &head),
        Err(LoraError::TensorName { .. })
    ));
    // An A without its B; no tensors at all; a truncated file.
    let half = safetensors(&[(
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        vec![2, 64],
        vec![0.0; 128],
    )]);
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &half),
        Err(LoraError::MissingHalf { missing: "B", .. })
    ));
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &safetensors(&[])),
        Err(LoraError::Empty)
    ));
    let bytes = q_pair(2);
    assert!(matches!(
        LoraAdapter::parse(br#"{"r": 2}"#, &bytes[..bytes.len() - 3]),
        Err(LoraError::Safetensors(_))
    ));
    assert!(matches!(
        LoraAdapter::read(std::path::Path::new("/nonexistent/adapter")),
        Err(LoraError::Io { .. })
    ));
}

/// A GPTQ (4-bit) base, bound as its stored packed components, with an adapter on all seven
/// projections: the oracle matches transformers + peft run on the dequantized weights.
#[test]
fn an_adapter_on_a_gptq_base_matches_transformers_peft() {
    let dir = fixture_dir("lora").join("gptq");
    let loaded = load(&dir.join("base"));
    let w = loaded.model.weights();
    let q = w
        .get(poot_models::WeightRole::layer(
            0,
            poot_models::weights::Role::AttnQ,
        ))
        .unwrap();
    assert!(
        matches!(q.ty.dtype, poot_graph_ir::DType::Components(_)),
        "the base stays packed: {}",
        q.ty
    );
    let mut t = LoraTables::new(w, loaded.model.config().n_layers, LoraShape::new(2, 4)).unwrap();
    let adapter = LoraAdapter::read(&dir.join("adapter")).unwrap();
    t.write(2, &adapter, w).unwrap();
    check_run(&loaded, &t, 2, &reference(&dir.join("adapter")), "gptq");
}

/// The same module names adapt the other registered decoder families: qwen2 (biases, bf16
/// weights), qwen3 (qk-norm) and gemma3 (sandwich norms, sliding window, scaled embedding).
#[test]
fn adapters_on_qwen2_qwen3_and_gemma3_match_transformers_peft() {
    for family in ["qwen2", "qwen3", "gemma3"] {
        let loaded = load(&fixture_dir("random").join(family));
        let w = loaded.model.weights();
        let mut t =
            LoraTables::new(w, loaded.model.config().n_layers, LoraShape::new(1, 4)).unwrap();
        t.write(1, &adapter(family), w).unwrap();
        let run = reference(&fixture_dir("lora").join(family));
        check_run(&loaded, &t, 1, &run, family);
    }
}

/// An adapter built in code whose data disagrees with its dims is refused, not indexed past.
#[test]
fn an_adapter_whose_data_disagrees_with_its_rank_is_refused() {
    let loaded = llama();
    let w = loaded.model.weights();
    let mut a = adapter("a");
    a.pairs.get_mut(&(1, LoraTarget::Down)).unwrap().b.pop();
    let mut t = LoraTables::new(w, loaded.model.config().n_layers, LoraShape::new(1, 8)).unwrap();
    assert!(matches!(
        t.write(1, &a, w),
        Err(LoraError::TensorShape { .. })
    ));
    let mut a = adapter("a");
    a.rank = 8;
    assert!(matches!(
        t.write(1, &a, w),
        Err(LoraError::TensorShape { .. })
    ));
}

/// The random llama written as a GGUF the way llama.cpp's converter writes one (Q and K rows
/// permuted so rotary pairs are interleaved, tensors renamed, F32), to a temporary file.
fn llama_as_gguf() -> std::path::PathBuf {
    use tiny_gguf::{Meta, TinyGguf};
    let ck = poot_load::load(
        &fixture_dir("random").join("llama"),
        &poot_load::LoadOptions::default(),
    )
    .unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        let b = ck.store().tensor(name).unwrap().bytes();
        b.chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    let (d, ff, vocab, heads, kv_heads, hd) = (64u64, 128u64, 256u64, 4usize, 2usize, 16usize);
    // llama.cpp: w.reshape(heads, 2, hd / 2, in).swapaxes(1, 2).
    let permute = |w: Vec<f32>, heads: usize| -> Vec<f32> {
        let cols = d as usize;
        let mut out = vec![0.0; w.len()];
        for h in 0..heads {
            for i in 0..2 {
                for j in 0..hd / 2 {
                    let src = h * hd + i * hd / 2 + j;
                    let dst = h * hd + 2 * j + i;
                    out[dst * cols..(dst + 1) * cols]
                        .copy_from_slice(&w[src * cols..(src + 1) * cols]);
                }
            }
        }
        out
    };
    let mut g = TinyGguf::default();
    g.set("general.architecture", Meta::Str("llama".into()));
    g.set("llama.embedding_length", Meta::U32(d as u32));
    g.set("llama.block_count", Meta::U32(2));
    g.set("llama.attention.head_count", Meta::U32(heads as u32));
    g.set("llama.attention.head_count_kv", Meta::U32(kv_heads as u32));
    g.set("llama.feed_forward_length", Meta::U32(ff as u32));
    g.set("llama.context_length", Meta::U32(128));
    g.set("llama.rope.dimension_count", Meta::U32(hd as u32));
    g.set("llama.rope.freq_base", Meta::F32(10000.0));
    g.set("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5));
    g.set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
    g.set(
        "tokenizer.ggml.tokens",
        Meta::Strs((0..vocab).map(|i| format!("t{i}")).collect()),
    );
    g.set("tokenizer.ggml.merges", Meta::Strs(Vec::new()));
    g.set("tokenizer.ggml.bos_token_id", Meta::U32(1));
    g.set("tokenizer.ggml.eos_token_id", Meta::U32(2));
    let put = |g: &mut TinyGguf, gguf: &str, shape: &[u64], values: Vec<f32>| {
        g.tensor(gguf, shape);
        g.values.insert(gguf.to_string(), values);
    };
    put(
        &mut g,
        "token_embd.weight",
        &[vocab, d],
        f32s("model.embed_tokens.weight"),
    );
    put(
        &mut g,
        "output_norm.weight",
        &[d],
        f32s("model.norm.weight"),
    );
    put(&mut g, "output.weight", &[vocab, d], f32s("lm_head.weight"));
    for l in 0..2 {
        let hf = |n: &str| f32s(&format!("model.layers.{l}.{n}.weight"));
        let q_out = (heads * hd) as u64;
        let kv_out = (kv_heads * hd) as u64;
        for (name, shape, values) in [
            ("attn_norm", vec![d], hf("input_layernorm")),
            ("ffn_norm", vec![d], hf("post_attention_layernorm")),
            (
                "attn_q",
                vec![q_out, d],
                permute(hf("self_attn.q_proj"), heads),
            ),
            (
                "attn_k",
                vec![kv_out, d],
                permute(hf("self_attn.k_proj"), kv_heads),
            ),
            ("attn_v", vec![kv_out, d], hf("self_attn.v_proj")),
            ("attn_output", vec![d, q_out], hf("self_attn.o_proj")),
            ("ffn_gate", vec![ff, d], hf("mlp.gate_proj")),
            ("ffn_up", vec![ff, d], hf("mlp.up_proj")),
            ("ffn_down", vec![d, ff], hf("mlp.down_proj")),
        ] {
            put(&mut g, &format!("blk.{l}.{name}.weight"), &shape, values);
        }
    }
    let path = std::env::temp_dir().join(format!("poot-lora-llama-{}.gguf", std::process::id()));
    std::fs::write(&path, g.bytes()).unwrap();
    path
}

/// A GGUF Llama stores Q and K rows permuted (its rotary pairs interleaved); the adapter's Q
/// and K rows are written in that order, so the GGUF base with adapter `a` matches
/// transformers + peft as the Hugging Face base does. The base alone is checked first, so the
/// conversion itself is shown right.
#[test]
fn an_adapter_on_a_gguf_llama_matches_transformers_peft() {
    let path = llama_as_gguf();
    let loaded = load(&path);
    std::fs::remove_file(&path).unwrap();
    let base: Run = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir("random").join("llama/reference.json")).unwrap(),
    )
    .unwrap();
    let mut s = OracleSession::new(&loaded, 1, CAP);
    let n = base.prompt_ids.len();
    let (logits, _) = s.step(
        std::slice::from_ref(&base.prompt_ids),
        &[0],
        StepShape::new(1, n, CAP),
    );
    let err = max_rel_err(&logits, base.prefill_logits.last().unwrap());
    assert!(err <= TOLERANCE, "the GGUF base: {err}");
    let w = loaded.model.weights();
    assert_eq!(
        loaded.model.lora_qk_rows(),
        poot_models::lora::QkRows::Interleaved { head_dim: 16 }
    );
    let mut t = LoraTables::new(w, 2, LoraShape::new(1, 4))
        .unwrap()
        .with_qk_rows(loaded.model.lora_qk_rows());
    t.write(1, &adapter("a"), w).unwrap();
    check_run(
        &loaded,
        &t,
        1,
        &reference(&fixture_dir("lora").join("a")),
        "gguf llama",
    );
    // Written in the Hugging Face order instead, the adapter's Q and K rows land on the wrong
    // features.
    let mut wrong = LoraTables::new(w, 2, LoraShape::new(1, 4)).unwrap();
    wrong.write(1, &adapter("a"), w).unwrap();
    let run = reference(&fixture_dir("lora").join("a"));
    let mut s = OracleSession::new(&loaded, 1, CAP);
    s.lora = Some((&wrong, vec![1]));
    let (logits, _) = s.step(
        std::slice::from_ref(&run.prompt_ids),
        &[0],
        StepShape::new(1, n, CAP).with_lora(Some(wrong.shape())),
    );
    assert!(max_rel_err(&logits, run.prefill_logits.last().unwrap()) > 100.0 * TOLERANCE);
}

/// An MoE model has no dense gate, up or down projection: an adapter on them is refused by name
/// rather than left off the experts.
#[test]
fn an_adapter_on_an_moe_feed_forward_is_refused() {
    let loaded = load(&fixture_dir("random").join("mixtral"));
    let w = loaded.model.weights();
    let mut t = LoraTables::new(w, loaded.model.config().n_layers, LoraShape::new(3, 8)).unwrap();
    match t.write(1, &adapter("a"), w) {
        Err(poot_models::LoraError::NoProjection { module, .. }) => {
            assert!(
                ["gate_proj", "up_proj", "down_proj"].contains(&module),
                "{module}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
