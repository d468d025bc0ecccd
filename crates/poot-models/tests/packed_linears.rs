//! Binding a quantized Hugging Face linear: the checkpoint, as the family's tensor index, finds
//! the components its quantization config describes, and the weight map binds them as one
//! component-format constant over the stored bytes (poot-load's synthetic GPTQ, AWQ and FP8
//! checkpoints). A bare weight store knows no quantization and binds nothing packed.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use poot_graph_ir::{DType, component_const_name};
use poot_load::LoadOptions;
use poot_models::ModelError;
use poot_models::weights::{ConstData, Role, WeightMap, WeightRole};

fn checkpoint(name: &str) -> poot_load::Checkpoint {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-load/tests/fixtures/synthetic")
        .join(name);
    poot_load::load(&dir, &LoadOptions::default()).unwrap()
}

const Q: WeightRole = WeightRole {
    layer: Some(0),
    role: Role::AttnQ,
};

#[test]
fn a_gptq_linear_binds_its_stored_components() {
    let ck = checkpoint("gptq");
    let mut w = WeightMap::new();
    w.bind_tensor(&ck, Q, "layer.q_proj.weight", Some(&[32, 64]))
        .unwrap();
    let e = w.get(Q).unwrap();
    let DType::Components(format) = e.ty.dtype else {
        panic!("{}", e.ty)
    };
    assert_eq!(format.name(), "gptq_int4");
    assert_eq!(e.ty.dims(), [32, 64]);
    // Act-order: g_idx is a component; every component is the stored tensor's bytes.
    let ConstData::Components(parts) = w.const_data("w.l0.attn.q", ck.store()).unwrap() else {
        panic!("components")
    };
    let roles: Vec<&str> = parts.iter().map(|(r, _)| *r).collect();
    assert_eq!(roles, ["qweight", "qzeros", "scales", "g_idx"]);
    for (role, bytes) in &parts {
        let stored = ck.store().tensor(&format!("layer.q_proj.{role}")).unwrap();
        assert_eq!(
            bytes.as_ptr(),
            stored.bytes().as_ptr(),
            "{role} is borrowed"
        );
        assert_eq!(bytes.len(), stored.bytes().len());
    }
    // An executor sees one buffer per component, each the stored bytes.
    let names = w.buffer_names();
    assert_eq!(names.len(), 4);
    for (role, bytes) in &parts {
        let name = component_const_name("w.l0.attn.q", role);
        assert!(names.contains(&name), "{name}");
        let ConstData::Bytes(b) = w.buffer_data(&name, ck.store()).unwrap() else {
            panic!("{name}: one buffer")
        };
        assert_eq!(b, &**bytes);
    }
    assert!(w.buffer_data("w.l0.attn.q:nope", ck.store()).is_err());
    // A shape the config does not imply is refused as for a dense tensor.
    let err = WeightMap::new()
        .bind_tensor(&ck, Q, "layer.q_proj.weight", Some(&[64, 64]))
        .unwrap_err();
    assert!(matches!(err, ModelError::TensorShape { .. }), "{err}");
    // Without the quantization config (a bare store), there is no `.weight` to bind.
    let err = WeightMap::new()
        .bind_tensor(ck.store(), Q, "layer.q_proj.weight", None)
        .unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor { .. }), "{err}");
    // An optional role binds the packed linear too; a dense neighbour stays dense.
    let mut w = WeightMap::new();
    const SPELLINGS: &[poot_models::weights::Spelling] = &[
        poot_models::weights::spell(Role::AttnQ, "layer.q_proj.weight", ""),
        poot_models::weights::spell(Role::Head, "lm_head.weight", ""),
    ];
    let table = poot_models::weights::NameTable::new(SPELLINGS);
    let kind = poot_models::config::SourceKind::HuggingFace;
    assert!(w.bind_named_opt(&ck, &table, kind, Q, None).unwrap());
    let head = WeightRole::global(Role::Head);
    assert!(w.bind_named_opt(&ck, &table, kind, head, None).unwrap());
    assert_eq!(w.get(head).unwrap().ty.dtype, DType::BF16);
}

#[test]
fn awq_and_fp8_linears_bind_and_unsupported_layouts_are_refused() {
    let ck = checkpoint("awq");
    let mut w = WeightMap::new();
    w.bind_tensor(&ck, Q, "layer.q_proj.weight", Some(&[32, 64]))
        .unwrap();
    let DType::Components(f) = w.get(Q).unwrap().ty.dtype else {
        panic!()
    };
    assert_eq!(f.name(), "awq_int4");

    let ck = checkpoint("fp8_channel");
    let mut w = WeightMap::new();
    w.bind_tensor(&ck, Q, "layer.q_proj.weight", Some(&[32, 64]))
        .unwrap();
    let DType::Components(f) = w.get(Q).unwrap().ty.dtype else {
        panic!()
    };
    assert_eq!(f.to_string(), "fp8_e4m3{channel,bf16}");

    // 16x16 FP8 scale blocks have no component format: refused by name, never read dense.
    let ck = checkpoint("fp8_block");
    let err = WeightMap::new()
        .bind_tensor(&ck, Q, "layer.q_proj.weight", None)
        .unwrap_err();
    assert!(err.to_string().contains("layer.q_proj"), "{err}");
    assert!(err.to_string().contains("16x16"), "{err}");
}
