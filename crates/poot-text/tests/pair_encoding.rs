//! A cross-encoder's (query, document) pairs encode as the Hugging Face tokenizer encodes a
//! pair: `[CLS] query [SEP] document [SEP]` with token types 0 then 1 (the reranker fixture's
//! reference, from transformers); an over-long pair loses the end of its document, and a query
//! that leaves no room for one is refused.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use poot_text::{TextServices, TokenizerError};
use serde_json::Value;

fn reranker() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-reranker")
}

#[test]
fn pairs_encode_as_transformers_encodes_them() {
    let text = TextServices::from_dir(&reranker(), None).unwrap();
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(reranker().join("reference.json")).unwrap())
            .unwrap();
    let mut pairs = 0;
    for case in reference["cases"].as_array().unwrap() {
        let query = case["query"].as_str().unwrap();
        for (d, doc) in case["documents"].as_array().unwrap().iter().enumerate() {
            let got = text
                .tokenizer()
                .encode_pair(query, doc.as_str().unwrap(), 64)
                .unwrap();
            let ids: Vec<u32> = serde_json::from_value(case["input_ids"][d].clone()).unwrap();
            let types: Vec<u32> =
                serde_json::from_value(case["token_type_ids"][d].clone()).unwrap();
            assert_eq!(got.ids, ids, "{query:?} / {doc}");
            assert_eq!(got.type_ids, types, "{query:?} / {doc}");
            pairs += 1;
        }
    }
    assert_eq!(pairs, 9);
}

#[test]
fn an_over_long_pair_loses_the_end_of_its_second_text() {
    let text = TextServices::from_dir(&reranker(), None).unwrap();
    let t = text.tokenizer();
    let whole = t
        .encode_pair("what do cats eat", "cats eat fish and meat", 64)
        .unwrap();
    assert_eq!(whole.ids.len(), 12);
    let cut = t
        .encode_pair("what do cats eat", "cats eat fish and meat", 9)
        .unwrap();
    // [CLS] 4 query tokens [SEP], then 2 of the 5 document tokens and the closing [SEP].
    assert_eq!(cut.ids.len(), 9);
    assert_eq!(cut.ids[..8], whole.ids[..8]);
    assert_eq!(cut.ids.last(), whole.ids.last());
    assert_eq!(cut.type_ids, [0, 0, 0, 0, 0, 0, 1, 1, 1]);
    match t.encode_pair("what do cats eat", "cats", 7) {
        Err(TokenizerError::PairFirstTooLong { tokens, max_tokens }) => {
            assert_eq!((tokens, max_tokens), (7, 6))
        }
        other => panic!("{other:?}"),
    }
}
