//! Mixture-of-experts checkpoints whose expert count, top-k or expert tensors disagree fail at
//! load with a typed error naming the key or the tensor: a missing or extra expert, a stack
//! of the wrong expert count, top-k beyond the experts, per-expert tensors of two types, and
//! the Qwen3-MoE and Qwen2-MoE layouts with dense layers this engine does not run, a
//! Qwen2-MoE shared expert that disagrees with its config, and a gpt-oss checkpoint missing its
//! sinks or biases, or with its clamp or YaRN keys out of range; a gpt-oss checkpoint with
//! MXFP4 experts whose blocks disagree with its config in shape, whose scales are not bytes,
//! or a layer of which lacks its blocks or scales; and a gpt-oss GGUF (MXFP4 stacks) whose stacks, biases or sinks disagree in shape, whose stacks
//! hold integers, or whose clamp limits differ between layers.

#![allow(clippy::unwrap_used)]

#[path = "common/edited_checkpoint.rs"]
mod edited_checkpoint;
#[path = "common/tiny_gguf.rs"]
mod tiny_gguf;

use edited_checkpoint::{build, build_edited, build_hf, scratch};
use poot_models::ModelError;
use tiny_gguf::{Meta, TinyGguf};

fn build_gguf(g: &TinyGguf) -> Result<String, ModelError> {
    let dir = scratch();
    let path = dir.join("model.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    let built = build(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    built
}

/// [`TinyGguf::llama`] as a Mixtral: `experts` experts, each expert stack holding `stacked`.
fn gguf_mixtral(experts: u32, stacked: u64) -> TinyGguf {
    let mut g = TinyGguf::llama();
    g.set("llama.expert_count", Meta::U32(experts));
    g.set("llama.expert_used_count", Meta::U32(2));
    // The dense feed-forwards become a router and three expert stacks.
    g.tensors.retain(|(name, _)| {
        !name.ends_with(".ffn_gate.weight")
            && !name.ends_with(".ffn_up.weight")
            && !name.ends_with(".ffn_down.weight")
    });
    for l in 0..2 {
        for (role, shape) in [
            ("ffn_gate_inp", &[u64::from(experts), 8][..]),
            ("ffn_gate_exps", &[stacked, 16, 8]),
            ("ffn_up_exps", &[stacked, 16, 8]),
            ("ffn_down_exps", &[stacked, 8, 16]),
        ] {
            g.tensor(&format!("blk.{l}.{role}.weight"), shape);
        }
    }
    g
}

#[test]
fn the_unchanged_checkpoints_build_as_their_families() {
    assert_eq!(build_hf("mixtral", |_| {}, |h| h).unwrap(), "mixtral");
    assert_eq!(build_hf("qwen3moe", |_| {}, |h| h).unwrap(), "qwen3moe");
    assert_eq!(build_hf("qwen2moe", |_| {}, |h| h).unwrap(), "qwen2moe");
    assert_eq!(build_hf("gpt_oss", |_| {}, |h| h).unwrap(), "gpt_oss");
    assert_eq!(build_gguf(&gguf_mixtral(4, 4)).unwrap(), "mixtral");
}

#[test]
fn a_missing_expert_is_named() {
    let gone = "model.layers.1.block_sparse_moe.experts.2.w3.weight";
    let err = build_hf(
        "mixtral",
        |_| {},
        |h| h.replace(gone, &gone.replace("w3", "x3")),
    );
    match err {
        Err(ModelError::MissingTensor { name, role }) => {
            assert_eq!(name, gone);
            assert_eq!(role, "w.l1.ffn.experts.up");
        }
        other => panic!("expected a missing expert, got {other:?}"),
    }
}

#[test]
fn more_experts_than_the_config_declares_is_refused() {
    let err = build_hf(
        "mixtral",
        |c| {
            c["num_local_experts"] = 3.into();
        },
        |h| h,
    );
    match err {
        Err(ModelError::ExpertCount {
            key,
            declared: 3,
            tensor,
        }) => {
            assert_eq!(key, "num_local_experts");
            assert_eq!(
                tensor,
                "model.layers.0.block_sparse_moe.experts.3.w1.weight"
            );
        }
        other => panic!("expected the extra expert, got {other:?}"),
    }
    // With layer 0's fourth expert renamed away, its router's four rows disagree.
    let err = build_hf(
        "qwen3moe",
        |c| {
            c["num_experts"] = 3.into();
        },
        |h| {
            h.replace(
                "\"model.layers.0.mlp.experts.3.",
                "\"model.layers.0.mlp.experts.9.",
            )
        },
    );
    match err {
        Err(ModelError::TensorShape { name, .. }) => {
            assert_eq!(name, "model.layers.0.mlp.gate.weight")
        }
        other => panic!("expected the router's shape, got {other:?}"),
    }
}

#[test]
fn a_stack_of_the_wrong_expert_count_is_named() {
    match build_gguf(&gguf_mixtral(4, 3)) {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "blk.0.ffn_gate_exps.weight");
            assert_eq!(expected, vec![4, 16, 8]);
            assert_eq!(found, vec![3, 16, 8]);
        }
        other => panic!("expected the stack's shape, got {other:?}"),
    }
}

#[test]
fn top_k_beyond_the_experts_or_zero_is_refused() {
    for top_k in [0u32, 5] {
        let err = build_hf(
            "mixtral",
            |c| {
                c["num_experts_per_tok"] = top_k.into();
            },
            |h| h,
        );
        match err {
            Err(ModelError::TopK {
                key, experts: 4, ..
            }) => {
                assert_eq!(key, "num_experts_per_tok")
            }
            other => panic!("top-k {top_k}: got {other:?}"),
        }
    }
    let mut g = gguf_mixtral(4, 4);
    g.set("llama.expert_used_count", Meta::U32(6));
    match build_gguf(&g) {
        Err(ModelError::TopK {
            key,
            top_k: 6,
            experts: 4,
        }) => assert_eq!(key, "llama.expert_used_count"),
        other => panic!("got {other:?}"),
    }
}

#[test]
fn experts_stored_in_two_types_are_refused() {
    // BF16 and F16 words are the same size, so only the type changes.
    let expert = "\"model.layers.1.mlp.experts.3.down_proj.weight\":{\"dtype\":\"BF16\"";
    let err = build_hf(
        "qwen3moe",
        |_| {},
        |h| {
            assert!(h.contains(expert), "the fixture's header spells {expert}");
            h.replace(expert, &expert.replace("\"BF16\"", "\"F16\" "))
        },
    );
    match err {
        Err(ModelError::ExpertType {
            name,
            stored,
            first,
            ..
        }) => {
            assert_eq!(name, "model.layers.1.mlp.experts.3.down_proj.weight");
            assert_eq!(first, "model.layers.1.mlp.experts.0.down_proj.weight");
            assert!(stored.contains("16"), "{stored}");
        }
        other => panic!("expected mixed expert types, got {other:?}"),
    }
}

#[test]
fn qwen3moe_dense_layers_are_refused() {
    let err = build_hf(
        "qwen3moe",
        |c| {
            c["mlp_only_layers"] = serde_json::json!([1]);
        },
        |h| h,
    );
    assert!(
        matches!(&err, Err(ModelError::Unsupported { key, .. }) if key == "mlp_only_layers"),
        "{err:?}"
    );
    let err = build_hf(
        "qwen3moe",
        |c| {
            c["decoder_sparse_step"] = 2.into();
        },
        |h| h,
    );
    assert!(
        matches!(&err, Err(ModelError::Unsupported { key, .. }) if key == "decoder_sparse_step"),
        "{err:?}"
    );
}

#[test]
fn olmoe_expert_counts_top_k_and_clipping_are_checked() {
    assert_eq!(build_hf("olmoe", |_| {}, |h| h).unwrap(), "olmoe");
    // One expert more than stored: the ninth is missing, by name.
    match build_hf("olmoe", |c| c["num_experts"] = 9.into(), |h| h) {
        Err(ModelError::MissingTensor { name, role }) => {
            assert_eq!(name, "model.layers.0.mlp.experts.8.gate_proj.weight");
            assert_eq!(role, "w.l0.ffn.experts.gate");
        }
        other => panic!("expected the missing ninth expert, got {other:?}"),
    }
    // One fewer: the eighth stored expert is extra.
    match build_hf("olmoe", |c| c["num_experts"] = 7.into(), |h| h) {
        Err(ModelError::ExpertCount {
            key,
            declared: 7,
            tensor,
        }) => {
            assert_eq!(key, "num_experts");
            assert_eq!(tensor, "model.layers.0.mlp.experts.7.gate_proj.weight");
        }
        other => panic!("expected the extra expert, got {other:?}"),
    }
    match build_hf("olmoe", |c| c["num_experts_per_tok"] = 9.into(), |h| h) {
        Err(ModelError::TopK {
            key,
            top_k: 9,
            experts: 8,
        }) => assert_eq!(key, "num_experts_per_tok"),
        other => panic!("expected top-k over the experts, got {other:?}"),
    }
    let err = build_hf("olmoe", |c| c["clip_qkv"] = 8.0.into(), |h| h);
    assert!(
        matches!(&err, Err(ModelError::Unsupported { key, .. }) if key == "clip_qkv"),
        "{err:?}"
    );
}

/// Granite's multipliers (shared by Granite-MoE): a logit divisor or attention scale that is
/// not positive, or a multiplier that is not a number, is refused by key.
#[test]
fn granite_multipliers_out_of_range_are_refused() {
    for family in ["granite", "granitemoe"] {
        assert_eq!(build_hf(family, |_| {}, |h| h).unwrap(), family);
        for (k, v) in [("logits_scaling", 0.0), ("attention_multiplier", -0.5)] {
            match build_hf(family, |c| c[k] = v.into(), |h| h) {
                Err(ModelError::OutOfRange { key, .. }) => assert_eq!(key, k),
                other => panic!("{family}: {k} = {v}: got {other:?}"),
            }
        }
        match build_hf(family, |c| c["residual_multiplier"] = "half".into(), |h| h) {
            Err(ModelError::KeyType { key, .. }) => assert_eq!(key, "residual_multiplier"),
            other => panic!("{family}: a string multiplier: got {other:?}"),
        }
    }
}

/// Granite-MoE's stored stacks: a fused gate/up stack whose expert count or rows disagree with
/// the config is named with both shapes; top-k beyond the experts is refused.
#[test]
fn granitemoe_stack_shapes_and_top_k_are_checked() {
    let fused = "model.layers.0.block_sparse_moe.input_linear.weight";
    for (k, v, expected) in [
        ("num_local_experts", 3, vec![3, 96, 64]),
        ("intermediate_size", 40, vec![4, 80, 64]),
    ] {
        match build_hf("granitemoe", |c| c[k] = v.into(), |h| h) {
            Err(ModelError::TensorShape {
                name,
                expected: e,
                found,
            }) => {
                assert_eq!(name, fused, "{k}");
                assert_eq!(e, expected, "{k}");
                assert_eq!(found, vec![4, 96, 64], "{k}");
            }
            other => panic!("{k} = {v}: expected the fused stack's shape, got {other:?}"),
        }
    }
    match build_hf("granitemoe", |c| c["num_experts_per_tok"] = 5.into(), |h| h) {
        Err(ModelError::TopK {
            key,
            top_k: 5,
            experts: 4,
        }) => assert_eq!(key, "num_experts_per_tok"),
        other => panic!("expected top-k over the experts, got {other:?}"),
    }
}

#[test]
fn qwen2moe_dense_layers_are_refused() {
    for (k, v) in [
        ("mlp_only_layers", serde_json::json!([0])),
        ("decoder_sparse_step", serde_json::json!(2)),
    ] {
        let err = build_hf("qwen2moe", |c| c[k] = v.clone(), |h| h);
        assert!(
            matches!(&err, Err(ModelError::Unsupported { key, .. }) if key == k),
            "{k}: {err:?}"
        );
    }
}

#[test]
fn qwen2moe_shared_expert_disagreements_are_named() {
    // The config's shared width disagrees with the stored shared expert.
    let err = build_hf(
        "qwen2moe",
        |c| c["shared_expert_intermediate_size"] = 80.into(),
        |h| h,
    );
    match err {
        Err(ModelError::TensorShape { name, .. }) => {
            assert_eq!(name, "model.layers.0.mlp.shared_expert.gate_proj.weight")
        }
        other => panic!("expected the shared expert named, got {other:?}"),
    }
    // No shared width at all.
    let err = build_hf(
        "qwen2moe",
        |c| {
            c.as_object_mut()
                .unwrap()
                .remove("shared_expert_intermediate_size");
        },
        |h| h,
    );
    match err {
        Err(ModelError::MissingKey { key }) => assert_eq!(key, "shared_expert_intermediate_size"),
        other => panic!("expected the missing key named, got {other:?}"),
    }
    // A missing shared expert gate.
    let gone = "model.layers.1.mlp.shared_expert_gate.weight";
    let err = build_hf(
        "qwen2moe",
        |_| {},
        |h| h.replace(gone, &gone.replace("gate.weight", "gatX.weight")),
    );
    match err {
        Err(ModelError::MissingTensor { name, role }) => {
            assert_eq!(name, gone);
            assert_eq!(role, "w.l1.ffn.shared.gate_logit");
        }
        other => panic!("expected the missing gate named, got {other:?}"),
    }
}

#[test]
fn gpt_oss_missing_sinks_and_biases_are_named() {
    for gone in [
        "model.layers.1.self_attn.sinks",
        "model.layers.0.mlp.router.bias",
        "model.layers.2.mlp.experts.gate_up_proj_bias",
        "model.layers.3.mlp.experts.down_proj_bias",
    ] {
        let renamed = format!("{}X\"", &gone[..gone.len() - 1]);
        let err = build_hf(
            "gpt_oss",
            |_| {},
            |h| h.replace(&format!("{gone}\""), &renamed),
        );
        match err {
            Err(ModelError::MissingTensor { name, .. }) => assert_eq!(name, gone),
            other => panic!("{gone}: expected the missing tensor named, got {other:?}"),
        }
    }
}

#[test]
fn gpt_oss_stacks_of_the_wrong_width_are_named() {
    // Stored [experts, in, out]: the config's expert width is the stack's last dim.
    match build_hf("gpt_oss", |c| c["intermediate_size"] = 40.into(), |h| h) {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "model.layers.0.mlp.experts.gate_up_proj");
            assert_eq!(expected, vec![4, 64, 80]);
            assert_eq!(found, vec![4, 64, 96]);
        }
        other => panic!("expected the gate/up stack's shape, got {other:?}"),
    }
}

/// The gpt-oss fixture saved as OpenAI released gpt-oss, its experts as MXFP4 blocks and
/// scales (`gen_dense_fixtures.py gpt_oss_mxfp4`), edited by `edit` and `header`.
fn build_gpt_oss_mxfp4(
    edit: impl FnOnce(&mut serde_json::Value),
    header: impl FnOnce(String) -> String,
) -> Result<String, ModelError> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/random/gpt_oss_mxfp4");
    build_edited(&dir, edit, header)
}

#[test]
fn gpt_oss_mxfp4_blocks_of_the_wrong_width_are_named() {
    assert_eq!(build_gpt_oss_mxfp4(|_| {}, |h| h).unwrap(), "gpt_oss");
    // Stored [experts, out, in / 32, 16]: the gate/up rows are twice the expert width.
    match build_gpt_oss_mxfp4(|c| c["intermediate_size"] = 32.into(), |h| h) {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "model.layers.0.mlp.experts.gate_up_proj_blocks");
            assert_eq!(expected, vec![4, 64, 2, 16]);
            assert_eq!(found, vec![4, 128, 2, 16]);
        }
        other => panic!("expected the blocks' shape, got {other:?}"),
    }
}

#[test]
fn gpt_oss_mxfp4_scales_that_are_not_bytes_are_named() {
    let scales = "model.layers.1.mlp.experts.down_proj_scales";
    let err = build_gpt_oss_mxfp4(
        |_| {},
        |h| {
            let at = h.find(&format!("\"{scales}\":{{\"dtype\":\"U8\"")).unwrap();
            let mut h = h;
            let dtype = at + scales.len() + 13;
            h.replace_range(dtype..dtype + 2, "I8");
            h
        },
    );
    match err {
        Err(ModelError::TensorType { name, stored }) => {
            assert_eq!(name, scales);
            assert_eq!(stored, "I8");
        }
        other => panic!("expected the scales' type named, got {other:?}"),
    }
}

#[test]
fn gpt_oss_mxfp4_layers_missing_blocks_or_scales_are_named() {
    // A later layer stored otherwise than layer 0 (no blocks), or blocks without their scales.
    for gone in [
        "model.layers.2.mlp.experts.gate_up_proj_blocks",
        "model.layers.3.mlp.experts.down_proj_scales",
    ] {
        let renamed = gone.replace("proj_", "proj-");
        let err = build_gpt_oss_mxfp4(
            |_| {},
            |h| h.replace(&format!("{gone}\""), &format!("{renamed}\"")),
        );
        match err {
            Err(ModelError::MissingTensor { name, .. }) => assert_eq!(name, gone),
            other => panic!("{gone}: expected the missing tensor named, got {other:?}"),
        }
    }
}

#[test]
fn gpt_oss_clamp_and_yarn_keys_are_checked() {
    for (k, v) in [("swiglu_limit", -1.0), ("swiglu_alpha", 0.0)] {
        match build_hf("gpt_oss", |c| c[k] = v.into(), |h| h) {
            Err(ModelError::OutOfRange { key, .. }) => assert_eq!(key, k),
            other => panic!("{k} = {v}: expected out of range, got {other:?}"),
        }
    }
    let err = build_hf(
        "gpt_oss",
        |c| c["rope_parameters"]["truncate"] = "no".into(),
        |h| h,
    );
    match err {
        Err(ModelError::KeyType { key, .. }) => assert_eq!(key, "rope_scaling.truncate"),
        other => panic!("expected truncate's type named, got {other:?}"),
    }
}

const MXFP4: u32 = 39;

/// A two-layer gpt-oss as llama.cpp's converter writes it: hidden 32, two query heads and one
/// key/value head of 16, four experts of 32 features (top-2) stored as MXFP4 stacks with F32
/// biases, sinks, a window of 8, YaRN.
fn gguf_gpt_oss() -> TinyGguf {
    let mut g = TinyGguf::default();
    g.set("general.architecture", Meta::Str("gpt-oss".into()));
    for (k, v) in [
        ("embedding_length", 32),
        ("block_count", 2),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 16),
        ("attention.value_length", 16),
        ("feed_forward_length", 32),
        ("expert_feed_forward_length", 32),
        ("context_length", 64),
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("attention.sliding_window", 8),
        ("rope.scaling.original_context_length", 16),
    ] {
        g.set(&format!("gpt-oss.{k}"), Meta::U32(v));
    }
    g.set("gpt-oss.rope.freq_base", Meta::F32(150000.0));
    g.set("gpt-oss.attention.layer_norm_rms_epsilon", Meta::F32(1e-5));
    g.set("gpt-oss.rope.scaling.type", Meta::Str("yarn".into()));
    g.set("gpt-oss.rope.scaling.factor", Meta::F32(4.0));
    g.set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
    g.set(
        "tokenizer.ggml.tokens",
        Meta::Strs((0..16).map(|i| format!("t{i}")).collect()),
    );
    g.set("tokenizer.ggml.merges", Meta::Strs(Vec::new()));
    g.tensor("token_embd.weight", &[16, 32]);
    g.tensor("output_norm.weight", &[32]);
    g.tensor("output.weight", &[16, 32]);
    for l in 0..2 {
        for (name, shape) in [
            ("attn_norm.weight", &[32][..]),
            ("post_attention_norm.weight", &[32]),
            ("attn_q.weight", &[32, 32]),
            ("attn_q.bias", &[32]),
            ("attn_k.weight", &[16, 32]),
            ("attn_k.bias", &[16]),
            ("attn_v.weight", &[16, 32]),
            ("attn_v.bias", &[16]),
            ("attn_output.weight", &[32, 32]),
            ("attn_output.bias", &[32]),
            ("attn_sinks.weight", &[2]),
            ("ffn_gate_inp.weight", &[4, 32]),
            ("ffn_gate_inp.bias", &[4]),
            ("ffn_gate_exps.weight", &[4, 32, 32]),
            ("ffn_gate_exps.bias", &[4, 32]),
            ("ffn_up_exps.weight", &[4, 32, 32]),
            ("ffn_up_exps.bias", &[4, 32]),
            ("ffn_down_exps.weight", &[4, 32, 32]),
            ("ffn_down_exps.bias", &[4, 32]),
        ] {
            let name = format!("blk.{l}.{name}");
            if name.ends_with("_exps.weight") {
                g.types.insert(name.clone(), MXFP4);
            }
            g.tensor(&name, shape);
        }
    }
    g
}

/// `g` with tensor `name`'s shape replaced.
fn reshaped(mut g: TinyGguf, name: &str, shape: &[u64]) -> TinyGguf {
    let t = g.tensors.iter_mut().find(|(n, _)| n == name).unwrap();
    t.1 = shape.to_vec();
    g
}

fn expect_shape(g: &TinyGguf, tensor: &str, want: &[u64], stored: &[u64]) {
    match build_gguf(g) {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, tensor);
            assert_eq!((expected.as_slice(), found.as_slice()), (want, stored));
        }
        other => panic!("expected {tensor}'s shape refused, got {other:?}"),
    }
}

#[test]
fn the_gguf_gpt_oss_builds() {
    assert_eq!(build_gguf(&gguf_gpt_oss()).unwrap(), "gpt_oss");
}

#[test]
fn gguf_gpt_oss_stacks_of_the_wrong_shape_or_count_are_named() {
    let down = "blk.1.ffn_down_exps.weight";
    expect_shape(
        &reshaped(gguf_gpt_oss(), down, &[3, 32, 32]),
        down,
        &[4, 32, 32],
        &[3, 32, 32],
    );
    let gate = "blk.0.ffn_gate_exps.weight";
    expect_shape(
        &reshaped(gguf_gpt_oss(), gate, &[4, 64, 32]),
        gate,
        &[4, 32, 32],
        &[4, 64, 32],
    );
    // A config that counts more experts than the stacks hold names the first stack.
    let mut g = gguf_gpt_oss();
    g.set("gpt-oss.expert_count", Meta::U32(8));
    expect_shape(&g, gate, &[8, 32, 32], &[4, 32, 32]);
    let bias = "blk.0.ffn_up_exps.bias";
    expect_shape(
        &reshaped(gguf_gpt_oss(), bias, &[4, 64]),
        bias,
        &[4, 32],
        &[4, 64],
    );
    let sinks = "blk.1.attn_sinks.weight";
    expect_shape(&reshaped(gguf_gpt_oss(), sinks, &[4]), sinks, &[2], &[4]);
}

#[test]
fn gguf_gpt_oss_tensors_of_the_wrong_type_are_named() {
    // An integer (I32) stack: the contraction reads floats or block formats only.
    for (tensor, ty) in [
        ("blk.0.ffn_up_exps.weight", 26u32),
        ("blk.1.ffn_down_exps.weight", 26),
    ] {
        let mut g = gguf_gpt_oss();
        g.types.insert(tensor.into(), ty);
        match build_gguf(&g) {
            Err(ModelError::TensorType { name, .. }) => assert_eq!(name, tensor),
            other => panic!("expected {tensor}'s type refused, got {other:?}"),
        }
    }
}

#[test]
fn gguf_gpt_oss_missing_expert_biases_or_unequal_clamps_are_refused() {
    let mut g = gguf_gpt_oss();
    g.tensors.retain(|(n, _)| n != "blk.1.ffn_gate_exps.bias");
    match build_gguf(&g) {
        Err(ModelError::MissingTensor { name, .. }) => {
            assert_eq!(name, "blk.1.ffn_gate_exps.bias")
        }
        other => panic!("expected the missing bias named, got {other:?}"),
    }
    let mut g = gguf_gpt_oss();
    g.set("gpt-oss.swiglu_clamp_exp", Meta::F32s(vec![7.0, 7.0]));
    assert_eq!(build_gguf(&g).unwrap(), "gpt_oss");
    g.set("gpt-oss.swiglu_clamp_exp", Meta::F32s(vec![7.0, 5.0]));
    match build_gguf(&g) {
        Err(ModelError::Unsupported { key, .. }) => assert_eq!(key, "gpt-oss.swiglu_clamp_exp"),
        other => panic!("expected unequal clamp limits refused, got {other:?}"),
    }
    g.set("gpt-oss.swiglu_clamp_exp", Meta::F32s(vec![-1.0, -1.0]));
    match build_gguf(&g) {
        Err(ModelError::OutOfRange { key, .. }) => assert_eq!(key, "gpt-oss.swiglu_clamp_exp"),
        other => panic!("expected a negative clamp limit refused, got {other:?}"),
    }
}
