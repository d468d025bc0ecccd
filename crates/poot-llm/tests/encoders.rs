//! Sentence embeddings on the wgpu backend (lavapipe in CI): all-MiniLM-L6-v2's mean-pooled,
//! normalized embeddings of 12 sentences equal sentence-transformers' within 1e-4 cosine distance,
//! with the same token ids.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use poot_llm::{BackendChoice, SentenceEncoder, open_executor};
use serde::Deserialize;

#[derive(Deserialize)]
struct MiniLm {
    sentences: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

#[test]
fn minilm_embeddings_match_sentence_transformers_on_wgpu() {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let path = cache.join("models/all-minilm-l6-v2");
    if !path.exists() {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        return;
    }
    let exec = match open_executor(BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return;
        }
    };
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-models/tests/fixtures/real/minilm.json");
    let r: MiniLm = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let mut enc = SentenceEncoder::load_up_to(&path, exec, r.sentences.len(), 64).unwrap();
    let text = enc.handle().text().unwrap();
    for (s, want) in r.sentences.iter().zip(&r.input_ids) {
        assert_eq!(&text.encode(s).unwrap(), want, "token ids of {s:?}");
    }
    let texts: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let vectors = enc.embed(&texts).unwrap();
    for (i, (got, want)) in vectors.iter().zip(&r.embeddings).enumerate() {
        let cos: f64 = got
            .iter()
            .zip(want)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum();
        assert!(
            1.0 - cos <= 1e-4,
            "sentence {i}: cosine distance {}",
            1.0 - cos
        );
    }
}

/// The encoder takes the same load options as a generation model: a manifest whose digest for
/// the weights is wrong fails the load, naming the file.
#[test]
fn an_encoder_load_checks_the_integrity_manifest() {
    let exec = match open_executor(BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return;
        }
    };
    let bert =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures/random/bert");
    let recorded = poot_llm::handle::Manifest::record(&bert).unwrap().to_json();
    let mut tampered: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    tampered["files"]["model.safetensors"]["sha256"] = "0".repeat(64).into();
    let manifest = poot_llm::handle::Manifest::from_json(tampered.to_string().as_bytes()).unwrap();
    let options = poot_llm::LoadOptions {
        integrity: Some(manifest),
    };
    let err = SentenceEncoder::load_with(&bert, exec, 1, 8, &options)
        .err()
        .unwrap();
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[derive(Deserialize)]
struct RerankCase {
    query: String,
    documents: Vec<String>,
    scores: Vec<f32>,
    ranking: Vec<usize>,
}

#[derive(Deserialize)]
struct RerankReference {
    cases: Vec<RerankCase>,
}

fn reranker() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-reranker")
}

/// Scores of sentence-transformers' `CrossEncoder.predict` (its default sigmoid over the one
/// label) within 1e-5: both sides compute in f32, and a sigmoid's slope is at most 1/4, so the
/// logits agree at least as closely. Each query's documents rank in `CrossEncoder.rank`'s order.
#[test]
fn a_cross_encoder_scores_and_ranks_as_sentence_transformers_does_on_wgpu() {
    let exec = match open_executor(BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return;
        }
    };
    let r: RerankReference =
        serde_json::from_str(&std::fs::read_to_string(reranker().join("reference.json")).unwrap())
            .unwrap();
    // Three rows: five documents take two steps.
    let mut ce = poot_llm::CrossEncoder::load_with(
        &reranker(),
        exec,
        3,
        32,
        &poot_llm::LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(ce.activation(), poot_llm::ScoreActivation::Sigmoid);
    assert_eq!(ce.max_tokens(), 32);
    for case in &r.cases {
        let docs: Vec<&str> = case.documents.iter().map(String::as_str).collect();
        let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (case.query.as_str(), *d)).collect();
        let scores = ce.score(&pairs).unwrap();
        for (got, want) in scores.iter().zip(&case.scores) {
            assert!(
                (got - want).abs() <= 1e-5,
                "{}: {got} vs {want}",
                case.query
            );
        }
        let ranked = ce.rerank(&case.query, &docs).unwrap();
        let order: Vec<usize> = ranked.iter().map(|r| r.index).collect();
        assert_eq!(order, case.ranking, "{}", case.query);
    }
    assert!(matches!(
        ce.rerank("a query", &[]),
        Err(poot_llm::EncoderError::NoDocuments)
    ));
    let long = "cats ".repeat(40);
    assert!(matches!(
        ce.rerank(&long, &["cats"]),
        Err(poot_llm::EncoderError::Pair(_))
    ));
}

/// An embedding model or a generator given where a cross-encoder is needed is refused, naming
/// what it is.
#[test]
fn a_model_that_is_not_a_cross_encoder_is_refused() {
    let open = || match open_executor(BackendChoice::Wgpu) {
        Ok(o) => Some(o.executor),
        Err(e) => {
            eprintln!("SKIP: {e}");
            None
        }
    };
    let Some(exec) = open() else { return };
    let bert =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures/random/bert");
    let err = poot_llm::CrossEncoder::load_with(&bert, exec, 1, 16, &Default::default())
        .err()
        .unwrap();
    assert!(
        matches!(err, poot_llm::EncoderError::NotCrossEncoder { .. }),
        "{err}"
    );
    let Some(exec) = open() else { return };
    let chat = reranker().join("../tiny-chat");
    let err = poot_llm::CrossEncoder::load(&chat, exec, 1).err().unwrap();
    assert!(
        matches!(err, poot_llm::EncoderError::NotEncoder { .. }),
        "{err}"
    );
}
