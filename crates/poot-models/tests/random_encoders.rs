//! Random-weight BERT checkpoints against `transformers` float32: hidden states of every real
//! token of padded rows with segment ids, mean-pooled normalized embeddings, and a cross-encoder's
//! scores. Tolerance: 2e-5 relative to the largest reference magnitude (f32 on both sides).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde::Deserialize;

const TOLERANCE: f32 = 2e-5;

#[derive(Deserialize)]
struct EncoderRef {
    input_ids: Vec<Vec<i32>>,
    attention_mask: Vec<Vec<i32>>,
    token_type_ids: Vec<Vec<i32>>,
    last_hidden_state: Option<Vec<Vec<Vec<f32>>>>,
    mean_pooled_normalized: Option<Vec<Vec<f32>>>,
    scores: Option<Vec<f32>>,
}

fn reference(name: &str) -> EncoderRef {
    let text =
        std::fs::read_to_string(fixture_dir("random").join(name).join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn bert_hidden_states_and_pooled_embeddings_match_transformers() {
    let loaded = load(&fixture_dir("random/bert"));
    assert_eq!(loaded.model.config().family, "bert");
    let r = reference("bert");
    let (hidden, dims) = encode(&loaded, &r.input_ids, &r.attention_mask, &r.token_type_ids);
    let (t, d) = (dims[1], dims[2]);
    for (row, want_rows) in r.last_hidden_state.unwrap().iter().enumerate() {
        for (p, want) in want_rows.iter().enumerate() {
            let got = &hidden[(row * t + p) * d..(row * t + p + 1) * d];
            let err = max_rel_err(got, want);
            assert!(
                err <= TOLERANCE,
                "row {row} position {p}: relative error {err}"
            );
        }
    }
    for (row, want) in r.mean_pooled_normalized.unwrap().iter().enumerate() {
        let got = mean_pool_normalized(&hidden, t, d, row, &r.attention_mask[row]);
        let err = max_rel_err(&got, want);
        assert!(err <= TOLERANCE, "row {row} pooled: relative error {err}");
    }
}

#[test]
fn bert_cross_encoder_scores_match_transformers() {
    let loaded = load(&fixture_dir("random/bert_cross_encoder"));
    assert_eq!(loaded.model.config().family, "bert/cross_encoder");
    let r = reference("bert_cross_encoder");
    let (scores, dims) = encode(&loaded, &r.input_ids, &r.attention_mask, &r.token_type_ids);
    assert_eq!(dims, vec![3, 1]);
    let err = max_rel_err(&scores, &r.scores.unwrap());
    assert!(err <= TOLERANCE, "scores: relative error {err}");
}
