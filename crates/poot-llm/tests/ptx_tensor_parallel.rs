//! Tensor parallelism and the layer pipeline on real GPUs: the driver on one PTX device against
//! the same driver placed over a group of PTX devices with NCCL (as many as the machine has, up
//! to 4; one GPU is a group of one, which still opens NCCL and runs the Coordinator and the
//! primary-context path). Greedy tokens must be equal, for the serving fixture and for SmolLM2,
//! whose three key/value heads two ranks share as one and two, and whose 30 layers two stages
//! hold as 15 and 15. Without CUDA each test prints SKIP.

#![allow(clippy::unwrap_used)]

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use poot_llm::{
    BackendChoice, Driver, DriverOptions, GenerateRequest, Layout, LoadOptions, ModelHandle,
    OpenedExecutor, Placement, Sampler, open_executor, open_group_executor,
};
use poot_models::Registry;

/// The largest group (up to `most` ranks) that opens here, or `None` after a SKIP line.
fn group(most: usize) -> Option<(usize, OpenedExecutor)> {
    let mut last = String::new();
    for ranks in (1..=most).rev() {
        match open_group_executor(BackendChoice::Ptx, ranks) {
            Ok(o) => return Some((ranks, o)),
            Err(e) => last = e.to_string(),
        }
    }
    println!("SKIP: no PTX group ({last})");
    None
}

fn greedy(driver: &mut Driver, prompt: &[u32], max_new: usize) -> Vec<u32> {
    let mut req = GenerateRequest::new(prompt.to_vec(), max_new, Sampler::greedy());
    req.ignore_eos = true;
    driver
        .generate(req, &mut |_| ControlFlow::Continue(()))
        .unwrap()
        .tokens
}

/// Greedy tokens of `handle` for `prompt` on one device and on a group of up to `most`, placed
/// as `placement` says for the group's size.
fn compare(
    handle: Arc<ModelHandle>,
    prompt: &[u32],
    max_new: usize,
    most: usize,
    placement: fn(usize) -> Placement,
) {
    let options = DriverOptions::new(256, 16);
    let single = match open_executor(BackendChoice::Ptx) {
        Ok(o) => o.executor,
        Err(e) => {
            println!("SKIP: no PTX device ({e})");
            return;
        }
    };
    let mut one = Driver::new(Arc::clone(&handle), single, options)
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let want = greedy(&mut one, prompt, max_new);
    drop(one);
    let Some((ranks, opened)) = group(most) else {
        return;
    };
    let placement = placement(ranks);
    println!(
        "{}: {placement} on {}",
        handle.config().family,
        opened.device_name
    );
    let mut placed = Driver::placed(Arc::clone(&handle), opened.executor, placement, options)
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let got = greedy(&mut placed, prompt, max_new);
    println!("one device {want:?}\n{placement}: {got:?}");
    assert_eq!(got, want);
}

fn tensor_parallel(ranks: usize) -> Placement {
    Placement::TensorParallel { ranks }
}

fn pipeline(stages: usize) -> Placement {
    Placement::Pipeline { stages }
}

fn tiny_chat() -> Arc<ModelHandle> {
    // The build's checkout, or the repository root this binary runs in (a copy on the GPU
    // machine).
    let built =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let dir = if built.exists() {
        built
    } else {
        PathBuf::from("crates/poot-serve/tests/fixtures/tiny-chat")
    };
    let registry = Registry::builtin().unwrap();
    Arc::new(ModelHandle::load(&dir, &registry, &LoadOptions::default()).unwrap())
}

#[test]
fn the_serving_fixture_on_a_group_generates_the_single_devices_tokens() {
    // Two key/value heads: at most two ranks.
    compare(
        tiny_chat(),
        &[5, 60, 300, 11, 2, 90, 17],
        24,
        2,
        tensor_parallel,
    );
}

#[test]
fn the_serving_fixture_on_a_pipeline_generates_the_single_devices_tokens() {
    // Two layers: at most two stages.
    compare(tiny_chat(), &[5, 60, 300, 11, 2, 90, 17], 24, 2, pipeline);
}

/// SmolLM2 and its prompt, or `None` after a SKIP line.
fn smollm2() -> Option<(Arc<ModelHandle>, Vec<u32>)> {
    let path = common::models::cached_model("smollm2-135m-instruct-q4_1.gguf")?;
    let registry = Registry::builtin().unwrap();
    let handle = Arc::new(ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap());
    let prompt = handle
        .text()
        .unwrap()
        .encode("The capital of France is")
        .unwrap();
    Some((handle, prompt))
}

#[test]
fn smollm2_on_a_group_generates_the_single_devices_tokens() {
    let Some((handle, prompt)) = smollm2() else {
        return;
    };
    // Three key/value heads: at most three ranks.
    compare(handle, &prompt, 32, 3, tensor_parallel);
}

#[test]
fn smollm2_on_a_pipeline_generates_the_single_devices_tokens() {
    let Some((handle, prompt)) = smollm2() else {
        return;
    };
    compare(handle, &prompt, 32, 4, pipeline);
}
