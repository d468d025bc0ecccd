//! The registry and the fixture table: every shipped family resolves, builds from its fixture and
//! traces its programs; keys are unique; unknown keys are typed refusals.

#![allow(clippy::unwrap_used)]

mod common;

use common::load;
use poot_graph_ir::TraceLimits;
use poot_graph_ir::analysis::dispatch_count;
use poot_load::ConfigSource;
use poot_models::registry::config_key;
use poot_models::test_support::family_fixtures::{FIXTURES, fixture};
use poot_models::{
    ModelError, ModelKind, Program, Registry, SHIPPED, StepShape, StepSpec, TraceError,
};

#[test]
fn every_shipped_family_has_a_fixture_that_builds_and_traces() {
    for entry in SHIPPED {
        assert!(
            fixture(entry.family).is_some(),
            "family {} has no fixture",
            entry.family
        );
    }
    for f in FIXTURES {
        let loaded = load(&f.path());
        let model = &loaded.model;
        assert_eq!(model.config().family, f.family);
        let limits = TraceLimits::standard(256);
        match model.config().kind {
            ModelKind::Decoder => {
                let prefill = model
                    .trace(&StepSpec::step(StepShape::new(1, 8, 32)), limits)
                    .unwrap();
                let decode = model
                    .trace(&StepSpec::step(StepShape::new(1, 1, 32)), limits)
                    .unwrap();
                let batched = model
                    .trace(&StepSpec::step(StepShape::new(3, 1, 32)), limits)
                    .unwrap();
                assert!(dispatch_count(&decode) > 10 * model.config().n_layers);
                assert_eq!(prefill.states().count(), 2 * model.config().n_layers);
                assert_eq!(batched.states().count(), 2 * model.config().n_layers);
                assert!(matches!(
                    model.trace(&StepSpec::encode(1, 4), limits),
                    Err(TraceError::NoProgram {
                        program: Program::Encode
                    })
                ));
            }
            ModelKind::Encoder => {
                let g = model.trace(&StepSpec::encode(2, 8), limits).unwrap();
                assert_eq!(g.states().count(), 0);
                assert!(matches!(
                    model.trace(&StepSpec::step(StepShape::new(1, 1, 8)), limits),
                    Err(TraceError::NoProgram {
                        program: Program::Step
                    })
                ));
            }
        }
    }
}

#[test]
fn steps_are_checked_before_the_tracer_runs() {
    let loaded = load(&fixture("llama").unwrap().path());
    let m = &loaded.model;
    let limits = TraceLimits::standard(16);
    assert!(matches!(
        m.trace(&StepSpec::step(StepShape::new(1, 0, 8)), limits),
        Err(TraceError::Shape { .. })
    ));
    assert!(matches!(
        m.trace(&StepSpec::step(StepShape::new(1, 9, 8)), limits),
        Err(TraceError::Shape { .. })
    ));
    assert!(matches!(
        m.trace(&StepSpec::step(StepShape::new(1, 1, 4096)), limits),
        Err(TraceError::Positions {
            capacity: 4096,
            max_positions: 128
        })
    ));
    // 17 tokens over a 16-token budget is refused before any equation is recorded.
    match m.trace(&StepSpec::step(StepShape::new(1, 17, 32)), limits) {
        Err(TraceError::Builder(poot_graph_ir::BuilderError::Budget {
            resource,
            limit: 16,
            attempted: 17,
        })) => {
            assert_eq!(resource, poot_graph_ir::Resource::Tokens)
        }
        other => panic!("{:?}", other.err()),
    }
    let mut spec = StepSpec::step(StepShape::new(1, 1, 8));
    spec.carried.push("image_rows".into());
    assert!(matches!(
        m.trace(&spec, limits),
        Err(TraceError::CarriedInput { .. })
    ));
    // A tight equation budget stops the trace with a typed error.
    let mut tight = TraceLimits::standard(16);
    tight.max_equations = 50;
    assert!(matches!(
        m.trace(&StepSpec::step(StepShape::new(1, 1, 8)), tight),
        Err(TraceError::Builder(
            poot_graph_ir::BuilderError::Budget { .. }
        ))
    ));
}

#[test]
fn keys_are_unique_and_unknown_keys_are_typed() {
    let registry = Registry::builtin().unwrap();
    let raw = ConfigSource::HuggingFace(serde_json::json!({ "model_type": "not_a_model" }));
    match registry.resolve(&raw) {
        Err(ModelError::Unregistered {
            source_kind: "model_type",
            key,
        }) => assert_eq!(key, "not_a_model"),
        other => panic!("{:?}", other.err()),
    }
    let raw = ConfigSource::HuggingFace(serde_json::json!({ "model_type": "gemma3_text" }));
    assert_eq!(registry.resolve(&raw).unwrap().family, "gemma3");
    assert_eq!(config_key(&raw).unwrap().1, "gemma3_text");
    let raw = ConfigSource::HuggingFace(serde_json::json!({ "hidden_size": 3 }));
    assert!(matches!(
        registry.resolve(&raw),
        Err(ModelError::MissingKey { .. })
    ));

    static DUPLICATED: &[poot_models::FamilyEntry] = &[
        poot_models::families::llama::ENTRY,
        poot_models::families::llama::ENTRY,
    ];
    assert!(matches!(
        Registry::new(DUPLICATED),
        Err(ModelError::DuplicateKey { .. })
    ));
}
