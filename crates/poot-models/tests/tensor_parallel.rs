//! Tensor parallelism on the CPU oracle: a model traced as the R rank graphs of a group and
//! evaluated in lockstep (`poot_eval::eval_group`, which sums at each all-reduce) against the
//! same model traced whole.
//!
//! Tolerance: logits within 1e-4 of the whole model's, relative to the largest logit (the
//! group only reassociates the sums of the row-parallel projections: measured below 2e-6 on
//! these fixtures); greedy tokens equal. Every rank of a group computes bit-identical logits
//! (the residual stream after each all-reduce is the same on every rank).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use poot_eval::{EvalOptions, eval_group};
use poot_graph_ir::{Graph, OpKind, TraceLimits};
use poot_models::weights::WeightMap;
use poot_models::{Shard, StepShape, StepSpec, TraceError};

const TOLERANCE: f32 = 1e-4;

/// One contiguous-KV sequence decoded by a group of `ranks` on the group oracle.
struct GroupSession<'m> {
    loaded: &'m Loaded,
    ranks: usize,
    capacity: usize,
    weights: Vec<WeightMap>,
    states: Vec<Carried>,
}

impl<'m> GroupSession<'m> {
    fn new(loaded: &'m Loaded, ranks: usize, capacity: usize) -> Result<Self, TraceError> {
        let mut weights = Vec::new();
        for r in 0..ranks {
            let shard = Shard::new(r, ranks)?;
            weights.push(loaded.model.shard_weights(shard)?.into_owned());
        }
        Ok(GroupSession {
            loaded,
            ranks,
            capacity,
            weights,
            states: vec![Vec::new(); ranks],
        })
    }

    /// One step of `tokens` from `start`; returns rank 0's logits, after checking every rank's
    /// are the same bits.
    fn step(&mut self, tokens: &[i32], start: usize) -> Vec<f32> {
        let t = tokens.len();
        let mut graphs = Vec::new();
        for r in 0..self.ranks {
            let shape =
                StepShape::new(1, t, self.capacity).with_shard(Shard::new(r, self.ranks).unwrap());
            graphs.push(
                self.loaded
                    .model
                    .trace(&StepSpec::step(shape), TraceLimits::standard(4096))
                    .unwrap(),
            );
        }
        let mut all_inputs = Vec::new();
        for (r, g) in graphs.iter().enumerate() {
            let prev = std::mem::take(&mut self.states[r]);
            all_inputs.push(member_inputs(
                g,
                &self.weights[r],
                self.loaded,
                tokens,
                start,
                prev,
            ));
        }
        let refs: Vec<&Graph> = graphs.iter().collect();
        let outs = eval_group(&refs, &all_inputs, EvalOptions::default()).unwrap();
        agreed_logits(outs, &mut self.states, "rank")
    }
}

/// Prefills `prompt` and decodes `steps` greedy tokens both whole and as a group of `ranks`;
/// checks every step's logits and the tokens. Returns the tokens.
fn group_matches_whole(loaded: &Loaded, ranks: usize, prompt: &[i32], steps: usize) -> Vec<i32> {
    let cap = prompt.len() + steps + 1;
    let mut whole = OracleSession::new(loaded, 1, cap);
    let mut group = GroupSession::new(loaded, ranks, cap).unwrap();
    let mut want = whole
        .step(
            &[prompt.to_vec()],
            &[0],
            StepShape::new(1, prompt.len(), cap),
        )
        .0;
    let mut got = group.step(prompt, 0);
    let mut tokens = Vec::new();
    let mut worst = 0f32;
    for i in 0..steps {
        let err = max_rel_err(&got, &want);
        worst = worst.max(err);
        assert!(
            err <= TOLERANCE,
            "{ranks} ranks, step {i}: logits differ by {err} (relative)"
        );
        let (a, b) = (argmax(&got) as i32, argmax(&want) as i32);
        assert_eq!(a, b, "{ranks} ranks, step {i}: greedy token");
        tokens.push(a);
        let pos = prompt.len() + i;
        want = whole.step(&[vec![a]], &[pos], StepShape::new(1, 1, cap)).0;
        got = group.step(&[a], pos);
    }
    eprintln!("{ranks} ranks: largest relative logit difference {worst:e}, tokens {tokens:?}");
    tokens
}

fn fixture(name: &str) -> Loaded {
    load(&fixture_dir("random").join(name))
}

const PROMPT: &[i32] = &[1, 17, 42, 99, 7, 3];

#[test]
fn llama_group_of_two_matches_the_whole_model() {
    let loaded = fixture("llama");
    group_matches_whole(&loaded, 1, PROMPT, 6);
    group_matches_whole(&loaded, 2, PROMPT, 6);
}

#[test]
fn qwen2_biases_and_gemma3_sandwich_norms_split_over_two() {
    // Qwen2: query/key/value biases split with their heads. Gemma 3: per-head q/k norms,
    // post-attention and post-feed-forward norms after the all-reduce, scaled embeddings.
    for name in ["qwen2", "gemma3"] {
        let loaded = fixture(name);
        group_matches_whole(&loaded, 2, PROMPT, 5);
    }
}

#[test]
fn alibi_slopes_and_per_head_qkv_split_with_their_heads() {
    // MPT: six slopes (one per query head) sliced with each rank's heads, a fused `Wqkv`'s row
    // ranges narrowed to them. BLOOM: twelve slopes, and `query_key_value`'s per-head runs of
    // rows narrowed to each rank's heads; biases, the embeddings' norm.
    for (name, ranks) in [("mpt", [2, 3]), ("bloom", [2, 4])] {
        let loaded = fixture(name);
        for r in ranks {
            group_matches_whole(&loaded, r, PROMPT, 5);
        }
    }
}

#[test]
fn the_serving_fixture_splits_over_two() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let loaded = load(&dir);
    group_matches_whole(&loaded, 2, &[5, 60, 300, 11, 2], 6);
}

#[test]
fn a_group_of_one_traces_the_whole_models_graph() {
    let loaded = fixture("llama");
    let shape = StepShape::new(1, 3, 16);
    let limits = TraceLimits::standard(64);
    let whole = loaded.model.trace(&StepSpec::step(shape), limits).unwrap();
    let one = loaded
        .model
        .trace(&StepSpec::step(shape.with_shard(Shard::WHOLE)), limits)
        .unwrap();
    assert_eq!(whole.to_string(), one.to_string());
    assert!(
        !whole
            .eqns()
            .iter()
            .any(|e| matches!(e.op, OpKind::AllReduceSum { .. }))
    );
    // A rank of two: one all-reduce after each layer's attention and feed-forward.
    let rank = loaded
        .model
        .trace(
            &StepSpec::step(shape.with_shard(Shard::new(1, 2).unwrap())),
            limits,
        )
        .unwrap();
    let reduces = rank
        .eqns()
        .iter()
        .filter(|e| e.op == OpKind::AllReduceSum { ranks: 2 })
        .count();
    assert_eq!(reduces, 2 * loaded.model.config().n_layers);
}

#[test]
fn groups_that_do_not_divide_the_heads_are_refused() {
    let loaded = fixture("llama"); // 4 query heads, 2 key/value heads
    let refusal = |ranks| GroupSession::new(&loaded, ranks, 16).err().unwrap();
    for n in [3, 4] {
        match refusal(n) {
            TraceError::TooFewParts { what, count, ranks } => {
                assert_eq!((what, count, ranks), ("key/value heads", 2, n))
            }
            e => panic!("unexpected: {e}"),
        }
    }
    // Tracing a rank directly is refused the same way, before any graph is built.
    let shape = StepShape::new(1, 1, 16).with_shard(Shard::new(0, 4).unwrap());
    let e = loaded
        .model
        .trace(&StepSpec::step(shape), TraceLimits::standard(64))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "2 key/value heads cannot be shared by 4 ranks (each needs at least one)"
    );
    assert!(matches!(
        Shard::new(2, 2),
        Err(TraceError::ShardRank { rank: 2, ranks: 2 })
    ));
}

#[test]
fn encoders_refuse_tensor_parallel() {
    let loaded = fixture("bert");
    match loaded.model.shard_weights(Shard::new(0, 2).unwrap()) {
        Err(TraceError::Unsharded { family, ranks }) => assert_eq!((family, ranks), ("bert", 2)),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("bert split over two ranks"),
    }
}

/// A deterministic pseudo-random f32 stream in [-scale, scale).
fn noise(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A llama checkpoint with 8 query heads and 4 key/value heads (so groups of 1, 2 and 4
/// divide it), f32 random weights, written under the test's temporary directory.
fn llama_eight_heads() -> PathBuf {
    let (d, heads, kv, hd, ff, vocab, layers) =
        (64usize, 8usize, 4usize, 8usize, 96usize, 128usize, 2);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tp-llama-8-4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": d, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "intermediate_size": ff, "vocab_size": vocab, "max_position_embeddings": 64,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors: Vec<(String, Vec<u64>, Vec<f32>)> = Vec::new();
    let mut seed = 1u64;
    let mut put = |name: String, dims: &[usize], scale: f32, offset: f32| {
        let n = dims.iter().product();
        seed += 1;
        let v = noise(seed, n, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        tensors.push((name, dims.iter().map(|&x| x as u64).collect(), v));
    };
    put("model.embed_tokens.weight".into(), &[vocab, d], 0.5, 0.0);
    put("lm_head.weight".into(), &[vocab, d], 0.25, 0.0);
    put("model.norm.weight".into(), &[d], 0.1, 1.0);
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let w = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
        put(format!("{p}.input_layernorm.weight"), &[d], 0.1, 1.0);
        put(
            format!("{p}.post_attention_layernorm.weight"),
            &[d],
            0.1,
            1.0,
        );
        put(
            format!("{p}.self_attn.q_proj.weight"),
            &[heads * hd, d],
            w(d),
            0.0,
        );
        put(
            format!("{p}.self_attn.k_proj.weight"),
            &[kv * hd, d],
            w(d),
            0.0,
        );
        put(
            format!("{p}.self_attn.v_proj.weight"),
            &[kv * hd, d],
            w(d),
            0.0,
        );
        put(
            format!("{p}.self_attn.o_proj.weight"),
            &[d, heads * hd],
            w(heads * hd),
            0.0,
        );
        put(format!("{p}.mlp.gate_proj.weight"), &[ff, d], w(d), 0.0);
        put(format!("{p}.mlp.up_proj.weight"), &[ff, d], w(d), 0.0);
        put(format!("{p}.mlp.down_proj.weight"), &[d, ff], w(ff), 0.0);
    }
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dims, v) in &tensors {
        let begin = data.len();
        data.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": dims, "data_offsets": [begin, data.len()]}),
        );
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    dir
}

#[test]
fn groups_of_one_to_four_give_the_whole_models_tokens() {
    // Three ranks share the 4 key/value heads as 1, 1 and 2 (with 2, 2 and 4 query heads) and
    // the 96 feed-forward features as 32 each.
    let loaded = load(&llama_eight_heads());
    let want = group_matches_whole(&loaded, 1, PROMPT, 8);
    for ranks in [2, 3, 4] {
        assert_eq!(group_matches_whole(&loaded, ranks, PROMPT, 8), want);
    }
}

#[test]
fn smollm2_splits_over_two_and_three_ranks_not_four() {
    let Some(path) = real_checkpoint("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let loaded = load(&path);
    // 9 query heads in 3 groups of 3 around the 3 key/value heads: two ranks hold 1 and 2
    // groups (the Q4_1 output projection's 576 columns as 192 and 384, whole blocks of 32),
    // three ranks one each; the 1536 feed-forward features split as 48 blocks of 32.
    let prompt: Vec<i32> = vec![1, 504, 3458, 282, 4649, 314];
    let want = group_matches_whole(&loaded, 1, &prompt, 6);
    for ranks in [2, 3] {
        assert_eq!(group_matches_whole(&loaded, ranks, &prompt, 6), want);
    }
    match GroupSession::new(&loaded, 4, 16).err().unwrap() {
        TraceError::TooFewParts { what, count, ranks } => {
            assert_eq!((what, count, ranks), ("key/value heads", 3, 4))
        }
        e => panic!("unexpected: {e}"),
    }
}

// ---- Component-format (GPTQ, AWQ, FP8, FP4) linears ------------------------------------------

/// The random Llama checkpoints of every Hugging Face packed layout that
/// `scripts/ref/models/gen_quantized_checkpoints.py` writes (`tp`: at its `--tp` dimensions,
/// whose halves are whole 128x128 FP8 tiles), or `None` after a SKIP line when no Python
/// imports what it needs.
fn quantized(test: &str, tp: bool) -> Option<PathBuf> {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let mut candidates: Vec<String> = std::env::var("POOT_PYTHON").into_iter().collect();
    candidates.push(cache.join("venv/bin/python").display().to_string());
    candidates.push("python3".to_owned());
    let Some(py) = candidates.into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import numpy, torch, transformers, safetensors"])
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        eprintln!("SKIP {test}: no Python imports numpy, torch, transformers and safetensors");
        return None;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "tp-quantized-{}-{}",
        if tp { "tp" } else { "default" },
        std::process::id()
    ));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/ref/models/gen_quantized_checkpoints.py");
    let mut cmd = std::process::Command::new(py);
    cmd.arg(&script);
    if tp {
        cmd.arg("--tp");
    }
    let run = cmd.arg(&out).output().unwrap();
    assert!(
        run.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    Some(out)
}

#[test]
fn component_format_linears_split_over_two() {
    let Some(dir) = quantized("component_format_linears_split_over_two", true) else {
        return;
    };
    let prompt = [1, 17, 200, 45, 3, 99, 128, 7, 64];
    for layout in [
        "gptq",
        "awq",
        "fp8_channel",
        "fp8_tensor",
        "fp8_block",
        "mxfp4",
    ] {
        let loaded = load(&dir.join(layout));
        // Every projection is a component-format constant, and each rank's is its share.
        let q = loaded.model.weights().by_const("w.l0.attn.q").unwrap();
        assert!(
            matches!(q.ty.dtype, poot_graph_ir::DType::Components(_)),
            "{layout}: {}",
            q.ty.dtype
        );
        let rank = loaded
            .model
            .shard_weights(Shard::new(1, 2).unwrap())
            .unwrap()
            .into_owned();
        for (name, dims) in [
            ("w.l0.attn.q", [128, 256]),
            ("w.l0.attn.k", [64, 256]),
            ("w.l0.attn.o", [256, 128]),
            ("w.l1.ffn.up", [256, 256]),
            ("w.l1.ffn.down", [256, 256]),
        ] {
            assert_eq!(
                rank.by_const(name).unwrap().ty.dims(),
                dims,
                "{layout} {name}"
            );
        }
        eprintln!("{layout}:");
        let tokens = group_matches_whole(&loaded, 2, &prompt, 4);
        // The group's tokens are also transformers' on the dequantized weights.
        let reference: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(layout).join("reference.json")).unwrap(),
        )
        .unwrap();
        let want: Vec<i32> = reference["greedy_ids"].as_array().unwrap()[..4]
            .iter()
            .map(|t| t.as_i64().unwrap() as i32)
            .collect();
        assert_eq!(tokens, want, "{layout}: transformers' greedy tokens");
    }
}

#[test]
fn component_shares_off_their_packing_are_refused() {
    let test = "component_shares_off_their_packing_are_refused";
    let Some(default) = quantized(test, false) else {
        return;
    };
    // Intermediate 320 over two ranks: 160 features each, and 160 starts inside the second
    // 128x128 scale tile of the gate projection's outputs.
    let loaded = load(&default.join("fp8_block"));
    match GroupSession::new(&loaded, 2, 16).err().unwrap() {
        TraceError::ComponentSplit {
            name,
            format,
            axis,
            start,
            end,
            len,
            align,
            ..
        } => {
            assert_eq!(name, "w.l0.ffn.gate");
            assert_eq!(format, "fp8_e4m3{block128,f32}");
            assert_eq!(
                (axis, start, end, len, align),
                ("output rows", 160, 320, 320, 128)
            );
        }
        e => panic!("unexpected: {e}"),
    }
    // Its attention splits within one tile per rank, and the other layouts split whole.
    for layout in ["gptq", "awq", "fp8_channel", "mxfp4"] {
        let loaded = load(&default.join(layout));
        assert!(
            loaded
                .model
                .shard_weights(Shard::new(1, 2).unwrap())
                .is_ok(),
            "{layout}"
        );
    }
    // GPTQ act-order: the output projection's inputs (rows of heads) cannot split.
    let loaded = load(&default.join("gptq_act_order"));
    let e = GroupSession::new(&loaded, 2, 16).err().unwrap();
    match &e {
        TraceError::ComponentActOrder { name, format } => {
            assert_eq!(
                (name.as_str(), format.as_str()),
                ("w.l0.attn.o", "gptq_int4{g32,act,v1}")
            );
        }
        e => panic!("unexpected: {e}"),
    }
    assert!(e.to_string().contains("desc_act"), "{e}");
}

/// The expert stacks are not split over ranks yet: an MoE family refuses a group.
#[test]
fn moe_families_refuse_tensor_parallel() {
    for name in ["mixtral", "qwen3moe"] {
        let loaded = fixture(name);
        match loaded.model.shard_weights(Shard::new(1, 2).unwrap()) {
            Err(TraceError::Unsharded { family, ranks }) => assert_eq!((family, ranks), (name, 2)),
            Err(e) => panic!("{name}: unexpected: {e}"),
            Ok(_) => panic!("{name} split over two ranks"),
        }
    }
}
