//! Every registered family's fixture graphs (decode and prefill for a decoder, over a contiguous
//! and a paged KV cache; one forward for an encoder) plan for every target preset, with valid
//! kernels and every buffer bound.

#![allow(clippy::unwrap_used)]

use poot_graph_ir::TraceLimits;
use poot_graph_plan::{BufferRole, Target, compile};
use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::{KvLayout, ModelKind, Registry, StepShape, StepSpec};

fn targets() -> Vec<Target> {
    vec![
        Target::ptx_preset(),
        Target::wgpu_preset(),
        Target::lavapipe_preset(),
        Target::vulkan_preset(),
        Target::vulkan_lavapipe_preset(),
    ]
}

/// Raw Vulkan runs the SPIR-V of wgpu's WGSL: on the same limits it plans exactly wgpu's
/// kernels, buffers and dispatches, so each fixture's step is the same program on both.
#[test]
fn raw_vulkan_plans_what_wgpu_plans_on_the_same_limits() {
    let registry = Registry::builtin().unwrap();
    for f in FIXTURES {
        let ck = poot_load::load(&f.path(), &LoadOptions::default()).unwrap();
        let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
            .unwrap()
            .model;
        let spec = match model.config().kind {
            ModelKind::Decoder => StepSpec::step(StepShape::new(1, 16, 64)),
            ModelKind::Encoder => StepSpec::encode(2, 16),
        };
        let graph = model.trace(&spec, TraceLimits::standard(256)).unwrap();
        for (wgpu, vulkan) in [
            (Target::wgpu_preset(), Target::vulkan_preset()),
            (Target::lavapipe_preset(), Target::vulkan_lavapipe_preset()),
        ] {
            let mut on_vulkan = compile(&graph, &vulkan).unwrap();
            on_vulkan.target.backend = wgpu.backend;
            assert_eq!(on_vulkan, compile(&graph, &wgpu).unwrap(), "{}", f.family);
        }
    }
}

#[test]
fn every_fixture_plans_for_every_target() {
    let registry = Registry::builtin().unwrap();
    for f in FIXTURES {
        let ck = poot_load::load(&f.path(), &LoadOptions::default()).unwrap();
        let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
            .unwrap()
            .model;
        let paged = KvLayout::Paged {
            block_tokens: 16,
            blocks: 9,
        };
        let specs = match model.config().kind {
            ModelKind::Decoder => vec![
                StepSpec::step(StepShape::new(1, 1, 64)),
                StepSpec::step(StepShape::new(1, 16, 64)),
                StepSpec::step(StepShape::new(2, 1, 64)),
                StepSpec::step(StepShape::new(1, 1, 64).with_kv(paged)),
                StepSpec::step(StepShape::new(1, 16, 64).with_kv(paged)),
                StepSpec::step(StepShape::new(2, 1, 64).with_kv(paged)),
                StepSpec::step(StepShape::new(4, 4, 64).with_kv(paged)),
            ],
            ModelKind::Encoder => vec![StepSpec::encode(2, 16)],
        };
        for spec in &specs {
            let graph = model.trace(spec, TraceLimits::standard(256)).unwrap();
            for target in targets() {
                let plan = compile(&graph, &target).unwrap_or_else(|e| {
                    panic!("{} {:?} on {:?}: {e}", f.family, spec.shape, target.backend)
                });
                for k in &plan.kernels {
                    k.validate().unwrap();
                }
                for d in &plan.dispatches {
                    assert_eq!(d.args.len(), plan.kernels[d.kernel].params.len());
                    assert!(d.grid[0] >= 1 && d.grid[0] <= target.limits.max_groups_x);
                }
                assert_eq!(plan.states.len(), graph.states().count());
                assert_eq!(plan.outputs.len(), graph.outputs().primary.len());
                // States are updated in place: no state buffer is shared with another role,
                // and no copy kernel reads or writes one (a paged pool is scattered into where
                // it lives, never copied per step).
                for (_, s) in &plan.states {
                    assert!(matches!(
                        plan.buffers[s.buffer.0 as usize].role,
                        BufferRole::State { .. }
                    ));
                }
                for d in &plan.dispatches {
                    if plan.kernels[d.kernel].name.starts_with("copy") {
                        for a in &d.args {
                            assert!(
                                !matches!(
                                    plan.buffers[a.0 as usize].role,
                                    BufferRole::State { .. }
                                ),
                                "{} {:?}: `{}` copies a state",
                                f.family,
                                spec.shape,
                                d.label
                            );
                        }
                    }
                }
            }
        }
    }
}
