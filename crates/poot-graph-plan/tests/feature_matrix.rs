//! The generated part of docs/feature-matrix.md: what the planner says about every registered
//! family's fixture, reference models at real dimensions, and a one-layer decoder in every weight
//! format, for each target preset. The test fails when the document is stale; regenerate with
//! `POOT_REGEN_MATRIX=1 cargo test -p poot-graph-plan --test feature_matrix`.

#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write;
use std::path::PathBuf;

use common::reference_models::*;
use poot_formats::{
    AwqFormat, DenseType, Fp8Format, Fp8Scaling, GgmlType, GptqFormat, GptqZeros, GroupSize,
    PackedFormat, ScaleType, StoredType,
};
use poot_graph_ir::{Graph, TraceLimits};
use poot_graph_plan::{Target, compile};
use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::{LoraShape, Model, ModelKind, Registry, StepShape, StepSpec};

const BEGIN: &str = "<!-- BEGIN GENERATED: feature matrix (tests/feature_matrix.rs) -->";
const END: &str = "<!-- END GENERATED -->";

fn targets() -> Vec<(&'static str, Target)> {
    vec![
        ("PTX", Target::ptx_preset()),
        ("wgpu", Target::wgpu_preset()),
        ("wgpu on lavapipe", Target::lavapipe_preset()),
        ("Vulkan", Target::vulkan_preset()),
        ("CPU", Target::cpu_preset()),
        ("ROCm (planned + compiled, not run)", Target::rocm_preset()),
    ]
}

/// "Plans" when every graph plans, else the first refusal with the step it came from.
fn cell(graphs: &[(&str, Graph)], target: &Target) -> String {
    for (kind, g) in graphs {
        if let Err(e) = compile(g, target) {
            return format!("Refused {kind}: {e}");
        }
    }
    "Plans".to_string()
}

fn decoder_graphs(
    model: &dyn Model,
    capacity: usize,
    prefill: usize,
) -> Vec<(&'static str, Graph)> {
    let trace = |t| {
        model
            .trace(
                &StepSpec::step(StepShape::new(1, t, capacity)),
                TraceLimits::standard(4096),
            )
            .unwrap()
    };
    vec![("decode", trace(1)), ("prefill", trace(prefill))]
}

/// A 4-row decode and a `prefill`-token prefill with adapter tables for 4 adapters of rank 16
/// on all seven projections.
fn lora_graphs(model: &dyn Model, capacity: usize, prefill: usize) -> Vec<(&'static str, Graph)> {
    let trace = |rows, t| {
        let shape = StepShape::new(rows, t, capacity).with_lora(Some(LoraShape::new(4, 16)));
        model
            .trace(&StepSpec::step(shape), TraceLimits::standard(4096))
            .unwrap()
    };
    vec![("decode", trace(4, 1)), ("prefill", trace(1, prefill))]
}

fn header(out: &mut String, first: &str) {
    let names: Vec<&str> = targets().iter().map(|(n, _)| *n).collect();
    let _ = writeln!(out, "| {first} | {} |", names.join(" | "));
    let _ = writeln!(out, "| --- |{}", " --- |".repeat(names.len()));
}

fn row(out: &mut String, name: &str, graphs: &[(&str, Graph)]) {
    let cells: Vec<String> = targets().iter().map(|(_, t)| cell(graphs, t)).collect();
    let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
}

/// Every Hugging Face packed layout poot binds, in the parameters checkpoints use.
fn component_formats() -> Vec<PackedFormat> {
    let g128 = GroupSize::Elems(std::num::NonZeroU32::new(128).unwrap());
    let fp8 = |scaling, scale_type| {
        PackedFormat::Fp8(Fp8Format {
            scaling,
            scale_type,
        })
    };
    vec![
        PackedFormat::Gptq(GptqFormat {
            group: g128,
            act_order: false,
            zeros: GptqZeros::V1PlusOne,
        }),
        PackedFormat::Gptq(GptqFormat {
            group: g128,
            act_order: true,
            zeros: GptqZeros::V1PlusOne,
        }),
        PackedFormat::Awq(AwqFormat { group: g128 }),
        fp8(Fp8Scaling::PerChannel, ScaleType::BF16),
        fp8(Fp8Scaling::PerChannel, ScaleType::F32),
        fp8(Fp8Scaling::Block128, ScaleType::BF16),
        fp8(Fp8Scaling::Block128, ScaleType::F32),
        fp8(Fp8Scaling::PerTensor, ScaleType::F32),
        PackedFormat::Fp4E2M1,
    ]
}

fn generate() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{BEGIN}\n");
    let _ = writeln!(
        out,
        "### Model families\n\nEach registered family's fixture (tests/fixtures/random): decode and a 16-token prefill over a 64-position cache for a decoder, one 2x16 forward for an encoder.\n"
    );
    header(&mut out, "Family");
    let registry = Registry::builtin().unwrap();
    for f in FIXTURES {
        let ck = poot_load::load(&f.path(), &LoadOptions::default()).unwrap();
        let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
            .unwrap()
            .model;
        let graphs = match model.config().kind {
            ModelKind::Decoder => decoder_graphs(model.as_ref(), 64, 16),
            ModelKind::Encoder => vec![(
                "encode",
                model
                    .trace(&StepSpec::encode(2, 16), TraceLimits::standard(4096))
                    .unwrap(),
            )],
        };
        row(&mut out, f.family, &graphs);
    }
    // Packed expert stacks: the Mixtral fixture as a GGUF with Q8_0 experts, and gpt-oss with
    // MXFP4 experts (sinks, alternating windows, biased experts) as a GGUF and as a Hugging Face
    // checkpoint of blocks and scales.
    for (file, label) in [
        (
            "mixtral_gguf/model-q8_0.gguf",
            "mixtral (GGUF, Q8_0 experts)",
        ),
        ("gpt_oss_gguf/model.gguf", "gpt_oss (GGUF, MXFP4 experts)"),
        ("gpt_oss_mxfp4", "gpt_oss (Hugging Face, MXFP4 experts)"),
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../poot-models/tests/fixtures/random")
            .join(file);
        let ck = poot_load::load(&path, &LoadOptions::default()).unwrap();
        let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
            .unwrap()
            .model;
        row(&mut out, label, &decoder_graphs(model.as_ref(), 64, 16));
    }
    let _ = writeln!(
        out,
        "\n### Real dimensions\n\nPublished configs with zero-byte synthetic weights (BF16 unless stated; gpt-oss-20b's experts MXFP4, as released): decode and a 512-token prefill over the model's whole context.\n"
    );
    header(&mut out, "Model");
    for r in [
        qwen2_5_0_5b(),
        qwen3_0_6b(),
        llama_3_1_8b(),
        llama_3_1_8b_q4_k(),
        llama_3_1_8b_gptq(),
        gemma3_27b(),
        qwen3_30b_a3b(),
        gpt_oss_20b(),
        mixtral_8x7b(),
        mixtral_8x22b(),
    ] {
        let model = build(&r);
        let graphs = decoder_graphs(model.as_ref(), model.config().max_positions, 512);
        row(&mut out, r.name, &graphs);
    }
    let _ = writeln!(
        out,
        "\n### Weight formats\n\nA one-layer decoder (hidden 256) whose seven projections are stored in each format (GGUF blocks, or a Hugging Face layout's component tensors), bound as stored and decoded inside the contraction: decode and a 16-token prefill.\n"
    );
    header(&mut out, "Format");
    let dense = [
        ("F32", DenseType::F32),
        ("F16", DenseType::F16),
        ("BF16", DenseType::BF16),
    ];
    for (name, d) in dense {
        let r = one_layer(name, StoredType::Dense(d).into());
        let model = build(&r);
        row(
            &mut out,
            &format!("{name} (dense)"),
            &decoder_graphs(model.as_ref(), 64, 16),
        );
    }
    for g in GgmlType::ALL {
        if !matches!(
            g.packed_format(),
            Ok(Some(poot_formats::PackedFormat::Block(_)))
        ) {
            continue;
        }
        let r = one_layer(g.name(), StoredType::Ggml(g).into());
        let model = build(&r);
        row(
            &mut out,
            &format!("GGUF {}", g.name()),
            &decoder_graphs(model.as_ref(), 64, 16),
        );
    }
    for format in component_formats() {
        let r = one_layer("packed", Projections::Packed(format));
        let model = build(&r);
        row(
            &mut out,
            &format.to_string(),
            &decoder_graphs(model.as_ref(), 64, 16),
        );
    }
    let _ = writeln!(
        out,
        "\n### LoRA adapters\n\nSteps compiled with adapter tables for 4 adapters of rank 16 on all seven projections (two per-row gathered contractions each, so rows with different adapters share a step): a 4-row decode and a prefill (16 tokens over a 64-position cache for the fixture, 512 over 4096 positions for the real dimensions).\n"
    );
    header(&mut out, "Model");
    let llama = FIXTURES.iter().find(|f| f.family == "llama").unwrap();
    let ck = poot_load::load(&llama.path(), &LoadOptions::default()).unwrap();
    let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
        .unwrap()
        .model;
    row(
        &mut out,
        "llama fixture",
        &lora_graphs(model.as_ref(), 64, 16),
    );
    for r in [qwen2_5_0_5b(), llama_3_1_8b_q4_k()] {
        let model = build(&r);
        let graphs = lora_graphs(model.as_ref(), model.config().max_positions.min(4096), 512);
        row(&mut out, r.name, &graphs);
    }
    let _ = writeln!(out, "\n{END}");
    out
}

#[test]
fn the_feature_matrix_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/feature-matrix.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/feature-matrix.md lacks the generated-region markers");
    };
    let current = &doc[a..b + END.len() + 1];
    let fresh = generate();
    if std::env::var_os("POOT_REGEN_MATRIX").is_some() {
        let updated = format!("{}{}{}", &doc[..a], fresh, &doc[b + END.len() + 1..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        current == fresh,
        "docs/feature-matrix.md is stale: run POOT_REGEN_MATRIX=1 cargo test -p poot-graph-plan --test feature_matrix"
    );
}
