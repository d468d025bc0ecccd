//! Any bytes as a GGUF checkpoint, through the whole model load: the file parses, its family
//! resolves and reads its config (every size bounded, every value checked against the
//! tensors), the model narrows to a small capacity and traces a decode step, and its rotary
//! tables are computed at that capacity. Each stage returns a value or a typed error; nothing
//! panics, and no allocation is sized by a declared maximum (libFuzzer's malloc limit).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use poot_graph_ir::TraceLimits;
use poot_load::{LoadOptions, load};
use poot_models::weights::ConstData;
use poot_models::{ModelKind, Registry, StepShape, StepSpec};

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("poot-fuzz-model-{}.gguf", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(path, data).is_err() {
        return;
    }
    let Ok(ck) = load(path, &LoadOptions::default()) else {
        return;
    };
    let Ok(registry) = Registry::builtin() else {
        return;
    };
    let Ok(entry) = registry.resolve(ck.config()) else {
        return;
    };
    let Ok(parts) = (entry.build)(ck.config(), &ck) else {
        return;
    };
    let mut model = parts.model;
    let capacity = model.config().max_positions.min(8);
    if model.narrow_positions(capacity).is_err() {
        return;
    }
    let spec = match model.config().kind {
        ModelKind::Decoder => StepSpec::step(StepShape::new(1, 1, capacity.max(1))),
        ModelKind::Encoder => StepSpec::encode(1, capacity.max(1)),
    };
    let Ok(graph) = model.trace(&spec, TraceLimits::standard(64)) else {
        return;
    };
    for (_, name, ty) in graph.consts() {
        if let Ok(ConstData::F32(v)) = model.weights().const_data(name, ck.store()) {
            assert_eq!(Some(4 * v.len() as u64), ty.size_bytes(), "{name}");
        }
    }
});
