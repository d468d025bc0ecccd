//! What the tensor-parallel and pipeline plan tests share: the random fixtures as models, and
//! which buffers a dispatch touches.

#![allow(clippy::unwrap_used, dead_code)]

use poot_graph_plan::{BufferId, Plan};
use poot_kernel::ir::Access;
use poot_load::LoadOptions;
use poot_models::{Model, Registry};

/// The random fixture `name` of poot-models' tests, built.
pub fn fixture(name: &str) -> Box<dyn Model> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-models/tests/fixtures/random")
        .join(name);
    let ck = poot_load::load(&dir, &LoadOptions::default()).unwrap();
    let registry = Registry::builtin().unwrap();
    (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
        .unwrap()
        .model
}

/// Whether dispatch `d` of `plan` reads (`write == false`) or writes buffer `b`.
pub fn touches(plan: &Plan, d: usize, b: BufferId, write: bool) -> bool {
    let disp = &plan.dispatches[d];
    let params = &plan.kernels[disp.kernel].params;
    disp.args
        .iter()
        .zip(params)
        .any(|(a, p)| *a == b && (!write || p.access == Access::ReadWrite))
}
