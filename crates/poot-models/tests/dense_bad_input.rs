//! Dense-decoder checkpoints of the families of issue #24 (gemma2, olmo2, smollm3, phi3, mpt,
//! bloom) whose config or tensors disagree fail at load with a typed error naming the key or the
//! tensor, never a panic; so do the MPT and BLOOM options this engine does not implement.

#![allow(clippy::unwrap_used)]

#[path = "common/edited_checkpoint.rs"]
mod edited_checkpoint;
#[path = "common/tiny_gguf.rs"]
mod tiny_gguf;

use edited_checkpoint::{build, build_hf, scratch};
use poot_models::ModelError;
use serde_json::json;
use tiny_gguf::{Meta, TinyGguf};

#[test]
fn the_unchanged_checkpoints_build_as_their_families() {
    for family in ["gemma2", "olmo2", "smollm3", "phi3", "mpt", "bloom"] {
        assert_eq!(build_hf(family, |_| {}, |h| h).unwrap(), family);
    }
}

#[test]
fn gemma2_softcap_and_query_scalar_out_of_range_are_named() {
    for (k, v) in [
        ("attn_logit_softcapping", json!(0.0)),
        ("final_logit_softcapping", json!(-30.0)),
        ("query_pre_attn_scalar", json!(0)),
    ] {
        let err = build_hf("gemma2", |c| c[k] = v.clone(), |h| h);
        match err {
            Err(ModelError::OutOfRange { key, .. }) => assert_eq!(key, k),
            other => panic!("{k} = {v}: expected a refusal naming it, got {other:?}"),
        }
    }
}

#[test]
fn gemma2_missing_post_norm_is_named() {
    let gone = "model.layers.3.post_feedforward_layernorm.weight";
    let err = build_hf(
        "gemma2",
        |_| {},
        |h| h.replace(gone, &gone.replace("post_", "xost_")),
    );
    match err {
        Err(ModelError::MissingTensor { name, .. }) => assert_eq!(name, gone),
        other => panic!("expected the missing post-norm named, got {other:?}"),
    }
}

#[test]
fn gemma2_layer_types_of_the_wrong_length_are_refused() {
    let err = build_hf(
        "gemma2",
        |c| c["layer_types"] = json!(["sliding_attention", "full_attention"]),
        |h| h,
    );
    match err {
        Err(ModelError::Unsupported { key, .. }) => assert_eq!(key, "layer_types"),
        other => panic!("expected layer_types refused, got {other:?}"),
    }
}

#[test]
fn olmo2_qk_norm_of_one_head_width_is_refused_naming_it() {
    // A q_norm of one head's width (16) where OLMo 2 normalizes the whole projection (64).
    let name = "model.layers.0.self_attn.q_norm.weight";
    let err = build_hf(
        "olmo2",
        |_| {},
        |h| {
            let at = h.find(name).unwrap();
            let shape = h[at..].find("[64]").unwrap() + at;
            format!("{}[16]{}", &h[..shape], &h[shape + 4..])
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains(name), "{err}");
}

#[test]
fn olmo2_missing_layer_is_named_by_its_first_norm() {
    let err = build_hf("olmo2", |c| c["num_hidden_layers"] = json!(3), |h| h);
    match err {
        Err(ModelError::LayerCount { tensor, .. }) => {
            assert_eq!(tensor, "model.layers.2.post_attention_layernorm.weight")
        }
        other => panic!("expected a layer count refusal, got {other:?}"),
    }
}

#[test]
fn smollm3_no_rope_flags_that_disagree_are_named() {
    for (v, want) in [
        (json!([1, 1, 0]), "Unsupported"),
        (json!([1, 1, 2, 0]), "KeyType"),
        (json!("every fourth"), "KeyType"),
    ] {
        let err = build_hf("smollm3", |c| c["no_rope_layers"] = v.clone(), |h| h);
        match (&err, want) {
            (Err(ModelError::Unsupported { key, .. }), "Unsupported")
            | (Err(ModelError::KeyType { key, .. }), "KeyType") => {
                assert_eq!(key, "no_rope_layers")
            }
            _ => panic!("no_rope_layers = {v}: expected {want} naming it, got {err:?}"),
        }
    }
    // Without the list, the interval decides; an interval of 0 is refused.
    let err = build_hf(
        "smollm3",
        |c| {
            c.as_object_mut().unwrap().remove("no_rope_layers");
            c["no_rope_layer_interval"] = json!(0);
        },
        |h| h,
    );
    match err {
        Err(ModelError::OutOfRange { key, .. }) => assert_eq!(key, "no_rope_layer_interval"),
        other => panic!("expected the interval refused, got {other:?}"),
    }
    let err = build_hf(
        "smollm3",
        |c| {
            c["use_sliding_window"] = json!(true);
            c["sliding_window"] = json!(8);
        },
        |h| h,
    );
    match err {
        Err(ModelError::Unsupported { key, .. }) => assert_eq!(key, "use_sliding_window"),
        other => panic!("expected the sliding window refused, got {other:?}"),
    }
}

#[test]
fn phi3_fused_projections_of_the_wrong_shape_are_named() {
    // Four KV heads where the stored qkv_proj holds two: the fused tensor is named.
    let err = build_hf("phi3", |c| c["num_key_value_heads"] = json!(4), |h| h);
    match err {
        Err(ModelError::TensorShape { name, .. }) => {
            assert_eq!(name, "model.layers.0.self_attn.qkv_proj.weight")
        }
        other => panic!("expected the fused qkv named, got {other:?}"),
    }
    let err = build_hf("phi3", |c| c["intermediate_size"] = json!(96), |h| h);
    match err {
        Err(ModelError::TensorShape { name, .. }) => {
            assert_eq!(name, "model.layers.0.mlp.gate_up_proj.weight")
        }
        other => panic!("expected the fused gate/up named, got {other:?}"),
    }
}

/// The Phi-3 fixture's config given LongRoPE with `short_factor` = `short` (its heads rotate 8
/// features: 4 factors).
fn longrope(c: &mut serde_json::Value, short: serde_json::Value) {
    c["original_max_position_embeddings"] = json!(64);
    c["rope_scaling"] = json!({
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": [1.0, 2.0, 4.0, 8.0],
    });
}

#[test]
fn phi3_longrope_factors_that_disagree_are_named() {
    assert_eq!(
        build_hf("phi3", |c| longrope(c, json!([1.0, 1.5, 2.0, 3.0])), |h| h).unwrap(),
        "phi3"
    );
    let short = "rope_scaling.short_factor";
    for (v, want) in [
        (json!([1.0, 2.0]), "OutOfRange"),
        (json!([1.0, 2.0, 0.0, 3.0]), "OutOfRange"),
        (json!("long"), "KeyType"),
    ] {
        let err = build_hf("phi3", |c| longrope(c, v.clone()), |h| h);
        match (&err, want) {
            (Err(ModelError::OutOfRange { key, .. }), "OutOfRange")
            | (Err(ModelError::KeyType { key, .. }), "KeyType") => assert_eq!(key, short),
            _ => panic!("short_factor = {v}: expected {want} naming it, got {err:?}"),
        }
    }
    let err = build_hf(
        "phi3",
        |c| {
            longrope(c, json!([1.0, 1.5, 2.0, 3.0]));
            c["rope_scaling"]["rope_type"] = json!("longrope_v9");
        },
        |h| h,
    );
    match err {
        Err(ModelError::Unsupported { key, .. }) => assert_eq!(key, "rope_scaling.rope_type"),
        other => panic!("expected the rope type refused, got {other:?}"),
    }
}

/// The key (or tensor) a refusal or mismatch names, and its kind.
fn named(err: &Result<String, ModelError>) -> Option<(&'static str, String)> {
    Some(match err.as_ref().err()? {
        ModelError::Unsupported { key, .. } => ("Unsupported", key.clone()),
        ModelError::OutOfRange { key, .. } => ("OutOfRange", key.clone()),
        ModelError::KeyType { key, .. } => ("KeyType", key.clone()),
        ModelError::MissingKey { key } => ("MissingKey", key.clone()),
        ModelError::MissingTensor { name, .. } => ("MissingTensor", name.clone()),
        ModelError::TensorShape { name, .. } => ("TensorShape", name.clone()),
        ModelError::TensorType { name, .. } => ("TensorType", name.clone()),
        ModelError::LayerCount { tensor, .. } => ("LayerCount", tensor.clone()),
        _ => return None,
    })
}

#[test]
fn mpt_options_it_does_not_implement_are_refused_by_their_keys() {
    // (the config key's path, its value, the refusal, the key it names)
    let cases = [
        (&["attn_config", "alibi"][..], json!(false), "Unsupported"),
        (&["attn_config", "qk_ln"], json!(true), "Unsupported"),
        (&["attn_config", "prefix_lm"], json!(true), "Unsupported"),
        (&["attn_config", "rope"], json!(true), "Unsupported"),
        (
            &["attn_config", "attn_type"],
            json!("multiquery_attention"),
            "Unsupported",
        ),
        (
            &["attn_config", "attn_impl"],
            json!("xformers"),
            "Unsupported",
        ),
        (
            &["attn_config", "sliding_window_size"],
            json!(512),
            "Unsupported",
        ),
        (&["attn_config", "alibi_bias_max"], json!(0), "OutOfRange"),
        (&["attn_config", "clip_qkv"], json!(-1.0), "OutOfRange"),
        (&["attn_config", "softmax_scale"], json!("auto"), "KeyType"),
        (&["attn_config", "qk_ln"], json!("yes"), "KeyType"),
        (&["no_bias"], json!(false), "Unsupported"),
        (&["logit_scale"], json!(2.0), "Unsupported"),
        (&["norm_type"], json!("rmsnorm"), "Unsupported"),
        (
            &["ffn_config"],
            json!({"ffn_type": "mptglu"}),
            "Unsupported",
        ),
        (&["expansion_ratio"], json!(0.001), "OutOfRange"),
        // Five heads do not divide d_model 96.
        (&["n_heads"], json!(5), "Unsupported"),
        (&["attn_config"], json!("alibi"), "KeyType"),
    ];
    for (path, value, kind) in cases {
        let err = build_hf(
            "mpt",
            |c| {
                let mut slot = c;
                for k in path {
                    slot = &mut slot[*k];
                }
                *slot = value.clone();
            },
            |h| h,
        );
        let key = match path {
            ["ffn_config"] => "ffn_config.ffn_type".to_string(),
            _ => path.join("."),
        };
        assert_eq!(named(&err), Some((kind, key)), "{err:?}");
    }
    // The implemented ones build: another attention implementation, no clamp, no scale.
    assert_eq!(
        build_hf(
            "mpt",
            |c| {
                c["attn_config"]["attn_impl"] = json!("triton");
                c["attn_config"]["clip_qkv"] = json!(null);
                c["attn_config"]["softmax_scale"] = json!(null);
            },
            |h| h,
        )
        .unwrap(),
        "mpt"
    );
}

#[test]
fn mpt_tensors_that_disagree_with_the_config_are_named() {
    // An expansion ratio of 2 asks for 192 features; the checkpoint stores 384.
    let err = build_hf("mpt", |c| c["expansion_ratio"] = json!(2), |h| h);
    match err {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "transformer.blocks.0.ffn.up_proj.weight");
            assert_eq!((expected, found), (vec![192, 96], vec![384, 96]));
        }
        other => panic!("expected the feed-forward named, got {other:?}"),
    }
    // The fused projection stored transposed.
    let err = build_hf(
        "mpt",
        |_| {},
        |h| {
            let at = h.find("transformer.blocks.1.attn.Wqkv.weight").unwrap();
            let shape = h[at..].find("[288,96]").unwrap() + at;
            format!("{}[96,288]{}", &h[..shape], &h[shape + 8..])
        },
    );
    assert_eq!(
        named(&err),
        Some((
            "TensorShape",
            "transformer.blocks.1.attn.Wqkv.weight".to_string()
        ))
    );
    let err = build_hf("mpt", |c| c["n_layers"] = json!(3), |h| h);
    assert_eq!(
        named(&err),
        Some((
            "LayerCount",
            "transformer.blocks.2.norm_1.weight".to_string()
        ))
    );
}

#[test]
fn bloom_disagreements_and_refusals_are_named() {
    let post_ln = "apply_residual_connection_post_layernorm";
    let err = build_hf("bloom", |c| c[post_ln] = json!(true), |h| h);
    assert_eq!(named(&err), Some(("Unsupported", post_ln.to_string())));
    let err = build_hf("bloom", |c| c["n_head"] = json!(7), |h| h);
    assert_eq!(named(&err), Some(("Unsupported", "n_head".to_string())));
    let err = build_hf("bloom", |c| c["n_layer"] = json!(2), |h| h);
    assert_eq!(
        named(&err),
        Some((
            "LayerCount",
            "transformer.h.2.input_layernorm.weight".to_string()
        ))
    );
    // Every bias is required: a missing one is named, not read as zeros.
    for gone in [
        "transformer.h.1.self_attention.query_key_value.bias",
        "transformer.h.2.mlp.dense_4h_to_h.bias",
        "transformer.word_embeddings_layernorm.bias",
        "transformer.ln_f.bias",
    ] {
        let renamed = format!("{}X\"", &gone[..gone.len() - 1]);
        let err = build_hf(
            "bloom",
            |_| {},
            |h| h.replace(&format!("{gone}\""), &renamed),
        );
        assert_eq!(named(&err), Some(("MissingTensor", gone.to_string())));
    }
    // The per-head fused projection stored transposed is named.
    let err = build_hf(
        "bloom",
        |_| {},
        |h| {
            let name = "transformer.h.0.self_attention.query_key_value.weight";
            let at = h.find(name).unwrap();
            let shape = h[at..].find("[288,96]").unwrap() + at;
            format!("{}[96,288]{}", &h[..shape], &h[shape + 8..])
        },
    );
    assert_eq!(
        named(&err),
        Some((
            "TensorShape",
            "transformer.h.0.self_attention.query_key_value.weight".to_string()
        ))
    );
}

/// Released BLOOM checkpoints name their tensors without `transformer.` (they were saved from
/// `BloomModel`): the same weights under those names build and bind the same tensors.
#[test]
fn bloom_reads_tensors_with_and_without_the_transformer_prefix() {
    let err = build_hf(
        "bloom",
        |_| {},
        |h| {
            let stripped = h.replace("\"transformer.", "\"");
            let pad = h.len() - stripped.len();
            stripped + &" ".repeat(pad)
        },
    );
    assert_eq!(err.unwrap(), "bloom");
}

/// A two-layer MPT GGUF as llama.cpp's converter writes one: hidden 8, two heads, feed-forward
/// 32, 16 tokens, ALiBi's bias 8.
fn gguf_mpt() -> TinyGguf {
    let mut g = TinyGguf::default();
    g.set("general.architecture", Meta::Str("mpt".into()));
    for (k, v) in [
        ("mpt.embedding_length", 8),
        ("mpt.block_count", 2),
        ("mpt.attention.head_count", 2),
        ("mpt.feed_forward_length", 32),
        ("mpt.context_length", 64),
    ] {
        g.set(k, Meta::U32(v));
    }
    g.set("mpt.attention.layer_norm_epsilon", Meta::F32(1e-5));
    g.set("mpt.attention.max_alibi_bias", Meta::F32(8.0));
    g.set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
    g.set(
        "tokenizer.ggml.tokens",
        Meta::Strs((0..16).map(|i| format!("t{i}")).collect()),
    );
    g.set("tokenizer.ggml.merges", Meta::Strs(Vec::new()));
    g.tensor("token_embd.weight", &[16, 8]);
    g.tensor("output_norm.weight", &[8]);
    for l in 0..2 {
        for (role, shape) in [
            ("attn_norm", &[8][..]),
            ("attn_qkv", &[24, 8]),
            ("attn_output", &[8, 8]),
            ("ffn_norm", &[8]),
            ("ffn_up", &[32, 8]),
            ("ffn_down", &[8, 32]),
        ] {
            g.tensor(&format!("blk.{l}.{role}.weight"), shape);
        }
    }
    g
}

fn build_gguf(g: &TinyGguf) -> Result<String, ModelError> {
    let dir = scratch();
    let path = dir.join("model.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    let built = build(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    built
}

#[test]
fn mpt_ggufs_without_alibi_or_with_unread_tensors_are_refused() {
    assert_eq!(build_gguf(&gguf_mpt()).unwrap(), "mpt");
    let bias = "mpt.attention.max_alibi_bias";
    let mut g = gguf_mpt();
    g.set(bias, Meta::F32(0.0));
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("Unsupported", bias.to_string()))
    );
    let mut g = gguf_mpt();
    g.meta.retain(|(k, _)| k != bias);
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("MissingKey", bias.to_string()))
    );
    let mut g = gguf_mpt();
    g.set("mpt.attention.head_count_kv", Meta::U32(1));
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("Unsupported", "mpt.attention.head_count_kv".to_string()))
    );
    for extra in ["blk.0.attn_q_norm.weight", "blk.0.attn_qkv.bias"] {
        let mut g = gguf_mpt();
        g.tensor(extra, &[8]);
        assert_eq!(
            named(&build_gguf(&g)),
            Some(("Unsupported", extra.to_string()))
        );
    }
    let mut g = gguf_mpt();
    g.set("mpt.feed_forward_length", Meta::U32(24));
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("TensorShape", "blk.0.ffn_up.weight".to_string()))
    );
}

/// [`gguf_mpt`]'s shapes as a `bloom` GGUF: biases, the embeddings' norm and the head.
fn gguf_bloom() -> TinyGguf {
    let mut g = gguf_mpt();
    g.set("general.architecture", Meta::Str("bloom".into()));
    let meta = std::mem::take(&mut g.meta);
    for (k, v) in meta {
        match k.strip_prefix("mpt.") {
            Some("attention.max_alibi_bias") => {}
            Some(rest) => g.set(&format!("bloom.{rest}"), v),
            None => g.set(&k, v),
        }
    }
    g.set("bloom.attention.head_count_kv", Meta::U32(2));
    let weights: Vec<(String, Vec<u64>)> = g.tensors.clone();
    for (name, shape) in weights {
        if let Some(stem) = name.strip_suffix(".weight")
            && stem != "token_embd"
        {
            g.tensor(&format!("{stem}.bias"), &shape[..1]);
        }
    }
    g.tensor("token_embd_norm.weight", &[8]);
    g.tensor("token_embd_norm.bias", &[8]);
    g.tensor("output.weight", &[16, 8]);
    g
}

#[test]
fn bloom_gguf_biases_that_disagree_are_named() {
    assert_eq!(build_gguf(&gguf_bloom()).unwrap(), "bloom");
    let qkv_bias = "blk.1.attn_qkv.bias";
    let mut g = gguf_bloom();
    for (name, shape) in &mut g.tensors {
        if name == qkv_bias {
            *shape = vec![16];
        }
    }
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("TensorShape", qkv_bias.to_string()))
    );
    let mut g = gguf_bloom();
    g.tensors.retain(|(n, _)| n != "token_embd_norm.bias");
    assert_eq!(
        named(&build_gguf(&g)),
        Some(("MissingTensor", "token_embd_norm.bias".to_string()))
    );
}

#[test]
fn an_integer_bias_or_norm_is_a_type_error_naming_it() {
    // ggml type 26 is I32: a bias or a norm stored as integers is refused, not read as floats.
    for name in ["blk.1.attn_qkv.bias", "token_embd_norm.weight"] {
        let mut g = gguf_bloom();
        g.types.insert(name.to_string(), 26);
        assert_eq!(
            named(&build_gguf(&g)),
            Some(("TensorType", name.to_string())),
            "{name}"
        );
    }
}
