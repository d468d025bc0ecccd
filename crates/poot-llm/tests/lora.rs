//! LoRA adapters through the driver on the CPU backend (and on wgpu when an adapter opens,
//! lavapipe in CI): poot-serve's tiny chat model with two random PEFT adapters (written with
//! their references by `scripts/ref/models/gen_lora_fixtures.py`), loaded at run time into a
//! driver whose entries were already recorded.
//!
//! - Each adapter's greedy tokens equal transformers + peft's (float32; the smallest top-two
//!   logit gap over the cases is 0.026, far above the backends' f32 summation differences).
//! - Three rows in one step, each with its own adapter (x, y, none), give each row's lone
//!   tokens; the base row's prompt is the x row's, so a prefix shared across adapters would
//!   show.
//! - Unknown names, taken names and slots, and unloading an adapter in use are typed
//!   refusals; an unloaded adapter loaded again decodes as before.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use poot_executor::Executor;
use poot_llm::{
    BackendChoice, Driver, DriverError, DriverOptions, GenerateRequest, Layout, LoadOptions,
    ModelHandle, Sampler, SeqId, open_executor,
};
use poot_models::{LoraAdapter, LoraShape, Registry};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures")
}

/// (prompt ids, greedy ids) of a reference.json.
fn cases(path: PathBuf) -> Vec<(Vec<u32>, Vec<u32>)> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |c: &serde_json::Value, k: &str| -> Vec<u32> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    v["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(c, "prompt_ids"), ids(c, "ids")))
        .collect()
}

fn adapter(name: &str) -> LoraAdapter {
    LoraAdapter::read(&fixtures().join("tiny-chat-lora").join(name)).unwrap()
}

fn request(prompt: &[u32], n: usize, lora: Option<&str>) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        lora: lora.map(str::to_string),
        ..GenerateRequest::new(prompt.to_vec(), n, Sampler::greedy())
    }
}

/// Steps until every sequence finishes; each one's tokens.
fn run_all(driver: &mut Driver, ids: &[SeqId]) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); ids.len()];
    let mut done = 0;
    while done < ids.len() {
        let picks = driver.step().unwrap();
        for event in driver.commit(picks).unwrap() {
            let i = ids.iter().position(|&id| id == event.id).unwrap();
            out[i].extend(event.tokens.iter().map(|t| t.id));
            if event.finish.is_some() {
                done += 1;
            }
        }
    }
    for &id in ids {
        driver.release(id);
    }
    out
}

fn alone(driver: &mut Driver, prompt: &[u32], n: usize, lora: Option<&str>) -> Vec<u32> {
    let id = driver.open(request(prompt, n, lora)).unwrap();
    run_all(driver, &[id]).remove(0)
}

fn check_backend(exec: Box<dyn Executor>, backend: &str) {
    let handle = Arc::new(
        ModelHandle::load(
            &fixtures().join("tiny-chat"),
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let options = DriverOptions::new(64, 4)
        .with_rows(3)
        .with_lora(Some(LoraShape::new(2, 8)));
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 60,
    };
    let mut driver = Driver::new(Arc::clone(&handle), exec, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    // Loaded after every entry was recorded: written into the tables in place.
    assert_eq!(driver.load_lora("x", &adapter("x")).unwrap(), 1);
    assert_eq!(driver.load_lora("y", &adapter("y")).unwrap(), 2);
    assert_eq!(
        driver.loras(),
        vec![(1, "x".to_string()), (2, "y".to_string())]
    );
    let x = cases(fixtures().join("tiny-chat-lora/x/reference.json"));
    let y = cases(fixtures().join("tiny-chat-lora/y/reference.json"));
    let base = cases(fixtures().join("tiny-chat/reference.json"));
    let n = x[0].1.len();
    // Lone runs against transformers + peft; the base after x on the same prompt.
    let mut lone = Vec::new();
    for (name, refs) in [("x", &x), ("y", &y)] {
        for (prompt, want) in refs.iter() {
            let got = alone(&mut driver, prompt, n, Some(name));
            assert_eq!(&got, want, "{backend}: adapter {name}, prompt {prompt:?}");
            lone.push(got);
        }
    }
    let base_alone = alone(&mut driver, &x[0].0, n, None);
    assert_eq!(
        base_alone,
        base[0].1[..n],
        "{backend}: the base model after x"
    );
    // Three rows with different adapters in one step.
    let ids = [
        driver.open(request(&x[0].0, n, Some("x"))).unwrap(),
        driver.open(request(&y[1].0, n, Some("y"))).unwrap(),
        driver.open(request(&x[0].0, n, None)).unwrap(),
    ];
    let together = run_all(&mut driver, &ids);
    assert_eq!(together[0], lone[0], "{backend}: row x");
    assert_eq!(together[1], lone[3], "{backend}: row y");
    assert_eq!(together[2], base_alone, "{backend}: base row");
    // Refusals.
    assert!(matches!(
        driver.open(request(&x[0].0, n, Some("z"))),
        Err(DriverError::UnknownLora { .. })
    ));
    assert!(matches!(
        driver.load_lora("x", &adapter("y")),
        Err(DriverError::LoraExists { .. })
    ));
    assert!(matches!(
        driver.load_lora("z", &adapter("y")),
        Err(DriverError::LoraFull { max_loras: 2 })
    ));
    let id = driver.open(request(&y[0].0, n, Some("y"))).unwrap();
    assert!(matches!(
        driver.unload_lora("y"),
        Err(DriverError::LoraInUse { open: 1, .. })
    ));
    driver.release(id);
    driver.unload_lora("y").unwrap();
    assert!(matches!(
        driver.open(request(&y[0].0, n, Some("y"))),
        Err(DriverError::UnknownLora { .. })
    ));
    assert!(matches!(
        driver.unload_lora("y"),
        Err(DriverError::UnknownLora { .. })
    ));
    // Loaded again (as another name, into the freed index): the same tokens.
    assert_eq!(driver.load_lora("y2", &adapter("y")).unwrap(), 2);
    assert_eq!(alone(&mut driver, &y[0].0, n, Some("y2")), y[0].1);
}

#[test]
fn adapters_decode_as_transformers_peft_on_the_cpu_backend() {
    match open_executor(BackendChoice::Cpu) {
        Ok(o) => check_backend(o.executor, "cpu"),
        Err(e) => eprintln!("SKIP: {e}"),
    }
}

#[test]
fn adapters_decode_as_transformers_peft_on_wgpu() {
    match open_executor(BackendChoice::Wgpu) {
        Ok(o) => check_backend(o.executor, "wgpu"),
        Err(e) => eprintln!("SKIP: {e}"),
    }
}

#[test]
fn a_driver_without_tables_refuses_adapters() {
    let Ok(o) = open_executor(BackendChoice::Cpu) else {
        eprintln!("SKIP: no CPU executor");
        return;
    };
    let handle = Arc::new(
        ModelHandle::load(
            &fixtures().join("tiny-chat"),
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let mut driver = Driver::new(handle, o.executor, DriverOptions::new(32, 4)).unwrap();
    assert!(matches!(
        driver.load_lora("x", &adapter("x")),
        Err(DriverError::LoraOff)
    ));
    let mut driver = driver.serve(Layout::Contiguous).map_err(|r| r.1).unwrap();
    assert!(matches!(
        driver.open(request(&[1, 2], 2, Some("x"))),
        Err(DriverError::UnknownLora { .. })
    ));
}
