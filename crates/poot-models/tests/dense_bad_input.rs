//! Dense-decoder checkpoints of the families of issue #24 (gemma2, olmo2, smollm3, phi3) whose config
//! or tensors disagree fail at load with a typed error naming the key or the tensor, never a
//! panic.

#![allow(clippy::unwrap_used)]

#[path = "common/edited_checkpoint.rs"]
mod edited_checkpoint;

use edited_checkpoint::build_hf;
use poot_models::ModelError;
use serde_json::json;

#[test]
fn the_unchanged_checkpoints_build_as_their_families() {
    for family in ["gemma2", "olmo2", "smollm3", "phi3"] {
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
