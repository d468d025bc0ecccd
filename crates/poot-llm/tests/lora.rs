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
//! - A GPTQ base, its projections uploaded packed, with an adapter: logits within 1e-4 of
//!   transformers + peft on the dequantized weights.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use poot_executor::{ConstBytes, ConstSource, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{DType, Slot, TraceLimits};
use poot_llm::{
    BackendChoice, Driver, DriverError, DriverOptions, GenerateRequest, HandleWeights, Layout,
    LoadOptions, ModelHandle, Sampler, SeqId, entry_label, open_executor,
};
use poot_models::lora::LORA_INDEX_SLOT;
use poot_models::weights::Role;
use poot_models::{LoraAdapter, LoraShape, LoraTables, Registry, StepShape, StepSpec, WeightRole};

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

/// Runs `check` with an executor of each backend that opens here: the CPU backend, wgpu
/// (lavapipe in CI) and PTX (a GPU machine this test's binary is carried to); a SKIP line for
/// each that does not.
fn on_each_backend(mut check: impl FnMut(Box<dyn Executor>, &str)) {
    for (choice, name) in [
        (BackendChoice::Cpu, "cpu"),
        (BackendChoice::Wgpu, "wgpu"),
        (BackendChoice::Ptx, "ptx"),
    ] {
        match open_executor(choice) {
            Ok(o) => check(o.executor, name),
            Err(e) => eprintln!("SKIP ({name}): {e}"),
        }
    }
}

#[test]
fn adapters_decode_as_transformers_peft_on_each_backend() {
    on_each_backend(check_backend);
}

#[test]
fn an_adapter_on_a_gptq_base_matches_transformers_peft_on_each_backend() {
    on_each_backend(check_gptq);
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

/// The model's weights and the adapter tables as one executable's constants.
struct WithTables {
    base: HandleWeights,
    tables: LoraTables,
}

impl ConstSource for WithTables {
    fn names(&self) -> Vec<String> {
        let mut names = self.base.names();
        names.extend(self.tables.iter().map(|(n, _)| n.to_string()));
        names
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        match self.tables.table(name) {
            Some(t) => Some(ConstBytes::F32(Cow::Borrowed(&t.data))),
            None => self.base.bytes(name),
        }
    }
}

#[derive(serde::Deserialize)]
struct DecodeStep {
    input_id: i32,
    position: usize,
    logits: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Logits {
    prompt_ids: Vec<i32>,
    prefill_logits: Vec<Vec<f32>>,
    decode: Vec<DecodeStep>,
}

/// Largest |a - b| over the reference's largest magnitude.
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0f32, |m, (g, w)| {
        assert!(g.is_finite(), "non-finite logit");
        m.max((g - w).abs() / scale)
    })
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// A GPTQ base (its projections uploaded as their stored packed components) with a rank-4
/// adapter on all seven projections, stepped on a device: the prefill's last logits and four
/// decode steps within 1e-4 of transformers + peft on the dequantized weights (relative to the
/// largest logit; the device sums in another order than both), the same greedy tokens.
fn check_gptq(mut exec: Box<dyn Executor>, backend: &str) {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures/lora/gptq");
    let handle = Arc::new(
        ModelHandle::load(
            &dir.join("base"),
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let q = handle
        .model()
        .weights()
        .get(WeightRole::layer(0, Role::AttnQ))
        .unwrap();
    assert!(matches!(q.ty.dtype, DType::Components(_)), "{}", q.ty);
    let r: Logits =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter/reference.json")).unwrap())
            .unwrap();
    let shape = LoraShape::new(2, 4);
    let weights = handle.model().weights();
    let mut tables = LoraTables::new(weights, handle.config().n_layers, shape).unwrap();
    tables
        .write(
            2,
            &LoraAdapter::read(&dir.join("adapter")).unwrap(),
            weights,
        )
        .unwrap();
    let exe = exec
        .load_weights(Box::new(WithTables {
            base: HandleWeights::new(Arc::clone(&handle)),
            tables,
        }))
        .unwrap();
    // Writes the executor refuses: a constant it does not hold, and bytes past a table's end
    // (q's A table: [3, 4, 128] f32).
    let refused = |r: Result<(), poot_executor::ExecError>| {
        assert!(
            matches!(r, Err(poot_executor::ExecError::ConstWrite { .. })),
            "{backend}: {r:?}"
        );
    };
    refused(exec.write_const(exe, "lora.l9.attn.q.a", 0, &[0; 4]));
    let a0 = poot_models::lora::table_name(
        0,
        poot_models::LoraTarget::Q,
        poot_models::lora::LoraHalf::A,
    );
    let a0_bytes = 4 * 3 * 4 * 128;
    refused(exec.write_const(exe, &a0, a0_bytes - 4, &[0; 8]));
    let cap = 32;
    let entry = |exec: &mut Box<dyn Executor>, t: usize| {
        let spec = StepSpec::step(StepShape::new(1, t, cap).with_lora(Some(shape)));
        let graph = handle
            .model()
            .trace(&spec, TraceLimits::standard(256))
            .unwrap();
        exec.add_entry(exe, &graph, &entry_label(&spec, None))
            .unwrap()
    };
    let n = r.prompt_ids.len();
    let (prefill, decode) = (entry(&mut exec, n), entry(&mut exec, 1));
    exec.reset_state(decode).unwrap();
    let step = |exec: &mut Box<dyn Executor>, e, tokens: &[i32], start: usize| {
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, tokens);
        let pos: Vec<i32> = (start..start + tokens.len()).map(|p| p as i32).collect();
        inputs.set_i32(Slot::Pos, &pos);
        inputs.set_i32(Slot::Named(LORA_INDEX_SLOT.to_string()), &[2]);
        let mut out = StepOutputs::default();
        exec.step(e, &inputs, &mut out).unwrap();
        out.f32(0).unwrap()
    };
    let got = step(&mut exec, prefill, &r.prompt_ids, 0);
    let want = r.prefill_logits.last().unwrap();
    let err = rel_err(&got, want);
    assert!(err <= 1e-4, "{backend}: prefill: {err}");
    assert_eq!(argmax(&got), argmax(want), "{backend}: prefill pick");
    for (i, d) in r.decode.iter().enumerate() {
        let got = step(&mut exec, decode, &[d.input_id], d.position);
        let err = rel_err(&got, &d.logits);
        assert!(err <= 1e-4, "{backend}: decode {i}: {err}");
        assert_eq!(
            argmax(&got),
            argmax(&d.logits),
            "{backend}: decode {i} pick"
        );
    }
}

/// Adapters on several devices are one refused pair of the compatibility table (the driver
/// checks it before uploading anything).
#[test]
fn adapters_over_several_devices_are_refused_by_the_compatibility_table() {
    use poot_llm::Feature;
    use poot_llm::driver::check_compatible;
    assert!(check_compatible(Feature::Lora, Feature::Devices(1)).is_ok());
    let e = check_compatible(Feature::Devices(2), Feature::Lora).unwrap_err();
    assert!(e.to_string().contains("LoRA adapters"), "{e}");
}

/// A byte-level BPE tokenizer of exactly the 256 byte tokens (GPT-2's byte-to-character table,
/// no merges): what a 256-row random checkpoint needs for the driver to detokenize.
fn byte_tokenizer_json() -> String {
    let mut bytes: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars = bytes.clone();
    let mut next = 256;
    for b in 0..256 {
        if !bytes.contains(&b) {
            bytes.push(b);
            chars.push(next);
            next += 1;
        }
    }
    let vocab: serde_json::Map<String, serde_json::Value> = bytes
        .iter()
        .zip(&chars)
        .map(|(&b, &c)| (char::from_u32(c).unwrap().to_string(), b.into()))
        .collect();
    serde_json::json!({
        "version": "1.0",
        "added_tokens": [],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                          "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                    "use_regex": true},
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    })
    .to_string()
}

/// The random qwen3 checkpoint (qk-norm) with its random PEFT adapter, through the driver on
/// each backend that opens: the greedy tokens transformers + peft decoded after the prompt
/// (poot-models' fixture; the oracle's logits are checked against it in poot-models).
#[test]
fn a_qwen3_adapter_decodes_as_transformers_peft_on_each_backend() {
    let models = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures");
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(models.join("lora/qwen3/reference.json")).unwrap(),
    )
    .unwrap();
    let ids = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
    let prompt: Vec<u32> = reference["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let want: Vec<u32> = reference["decode"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| ids(&d["input_id"]))
        .collect();
    let adapter = LoraAdapter::read(&models.join("lora/qwen3")).unwrap();
    // The checkpoint has no tokenizer, which the driver needs to detokenize what it commits.
    let dir = std::env::temp_dir().join(format!("poot-lora-qwen3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["config.json", "model.safetensors"] {
        std::fs::copy(models.join("random/qwen3").join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("tokenizer.json"), byte_tokenizer_json()).unwrap();
    let handle = Arc::new(
        ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default()).unwrap(),
    );
    on_each_backend(|exec, backend| {
        let options = DriverOptions::new(32, 4).with_lora(Some(LoraShape::new(1, 4)));
        let mut driver = Driver::new(Arc::clone(&handle), exec, options)
            .unwrap()
            .serve(Layout::Contiguous)
            .map_err(|r| r.1)
            .unwrap();
        driver.load_lora("q", &adapter).unwrap();
        let got = alone(&mut driver, &prompt, want.len(), Some("q"));
        assert_eq!(got, want, "{backend}: qwen3 with its adapter");
    });
    let _ = std::fs::remove_dir_all(&dir);
}
