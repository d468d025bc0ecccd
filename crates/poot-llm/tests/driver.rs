//! The driver on the wgpu backend (lavapipe in CI): greedy generation equals the transformers
//! reference with only token ids crossing the bus; seeded sampling is reproducible; the
//! sampling suffix's draws follow the host's distribution for each rule.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use poot_executor::{ConstBytes, ConstSource, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits};
use poot_llm::sampling::{Head, SAMPLER_SLOT, SEED_SLOT, append_head};
use poot_llm::{
    BackendChoice, Driver, DriverOptions, FinishReason, GenerateRequest, Layout, LoadOptions,
    ModelHandle, Sampler, open_executor,
};
use poot_models::Registry;

fn executor() -> Option<Box<dyn Executor>> {
    match open_executor(BackendChoice::Wgpu) {
        Ok(o) => Some(o.executor),
        Err(e) => {
            eprintln!("SKIP: {e}");
            None
        }
    }
}

fn real(file: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let p = cache.join("models").join(file);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            p.display()
        );
        None
    }
}

#[test]
fn greedy_generation_matches_transformers_and_reads_back_only_token_ids() {
    let Some((handle, mut driver)) = smollm2_driver() else {
        return;
    };
    let prompt = handle
        .text()
        .unwrap()
        .encode("The capital of France is")
        .unwrap();
    let mut streamed = String::new();
    let generation = driver
        .generate(
            GenerateRequest {
                prompt,
                max_new: 4,
                sampler: Sampler::greedy(),
                stops: Vec::new(),
                ignore_eos: false,
            },
            &mut |_, piece| {
                streamed.push_str(piece);
                ControlFlow::Continue(())
            },
        )
        .unwrap();
    // transformers' greedy continuation (crates/poot-models/tests/fixtures/real/smollm2.json).
    assert_eq!(generation.tokens, vec![7042, 30, 198, 198]);
    assert_eq!(generation.finish, FinishReason::Length);
    assert!(
        generation.text.starts_with(" Paris."),
        "{:?}",
        generation.text
    );
    assert_eq!(streamed, generation.text);
    // The last step read back one token id and the non-finite flag: 8 bytes, not the logits.
    assert_eq!(driver.executor().stats().last_read_bytes, 8);
}

#[test]
fn seeded_sampling_reproduces_its_tokens() {
    let Some((handle, mut driver)) = smollm2_driver() else {
        return;
    };
    let prompt = handle.text().unwrap().encode("Once upon a time").unwrap();
    let mut run = |seed| {
        let req = GenerateRequest {
            prompt: prompt.clone(),
            max_new: 3,
            sampler: Sampler::new(0.9, 40, 0.95, seed),
            stops: Vec::new(),
            ignore_eos: true,
        };
        driver
            .generate(req, &mut |_, _| ControlFlow::Continue(()))
            .unwrap()
            .tokens
    };
    let first = run(42);
    assert_eq!(first.len(), 3);
    assert_eq!(run(42), first, "one seed, one continuation");
}

/// SmolLM2 served on wgpu, or `None` (with a SKIP line) without the checkpoint or an adapter.
fn smollm2_driver() -> Option<(Arc<ModelHandle>, Driver)> {
    let path = real("smollm2-135m-instruct-q4_1.gguf")?;
    let exec = executor()?;
    let handle = Arc::new(
        ModelHandle::load(
            &path,
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let driver = Driver::new(Arc::clone(&handle), exec, DriverOptions::new(64, 4))
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    Some((handle, driver))
}

/// A refusal while preparing the driver's entries names the entry: its program, step shape and
/// head. The llama fixture on a device whose buffers hold 128 bytes: its rows of 64 f32 cannot be
/// split small enough.
#[test]
fn a_refused_entry_names_its_step() {
    let device = match poot_wgpu_device::WgpuDevice::open(Default::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            return;
        }
    };
    let mut target = poot_executor::Device::limits(&device).target(poot_graph_plan::Backend::Wgpu);
    target.limits.max_buffer_bytes = 128;
    let exec = Box::new(poot_executor::Engine::new(device, target));
    let fixture = poot_models::test_support::family_fixtures::fixture("llama").unwrap();
    let handle = Arc::new(
        ModelHandle::load(
            &fixture.path(),
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let refused = match Driver::new(handle, exec, DriverOptions::new(32, 4))
        .unwrap()
        .serve(Layout::Contiguous)
    {
        Ok(_) => panic!("a 128-byte buffer limit was not refused"),
        Err(r) => r.1,
    };
    let message = refused.to_string();
    println!("{message}");
    let poot_llm::DriverError::Exec(poot_executor::ExecError::Plan(
        poot_graph_plan::PlanError::InEntry { entry, source },
    )) = &refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!(entry, "step (rows 1, tokens 4, capacity 32, greedy head)");
    assert!(
        matches!(
            source.root(),
            poot_graph_plan::PlanError::ConstantRowTooLarge {
                limit_bytes: 128,
                ..
            } | poot_graph_plan::PlanError::ConstantNotRowSplittable {
                limit_bytes: 128,
                ..
            }
        ),
        "{message}"
    );
    assert!(message.starts_with(entry.as_str()) && message.contains("128"));
}

/// A weight source holding one logits table.
struct Logits(Vec<f32>);

impl ConstSource for Logits {
    fn names(&self) -> Vec<String> {
        vec!["logits".to_string()]
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        (name == "logits").then(|| ConstBytes::F32(Cow::Borrowed(&self.0)))
    }
}

/// Draws `n` tokens from the sampling suffix over fixed logits, one seed each.
fn draws(exec: &mut dyn Executor, logits: &[f32], sampler: Sampler, n: u32) -> Vec<usize> {
    let v = logits.len();
    let b = Builder::new(TraceLimits::standard(16));
    let l = b
        .constant("logits", TensorType::new(DType::F32, vec![1, v]))
        .unwrap();
    let out = b
        .add(l, b.broadcast(b.lit_f32(0.0).unwrap(), [1, v]).unwrap())
        .unwrap();
    let graph = append_head(
        b.finish(Outputs::new(out)).unwrap(),
        Head::Sample,
        TraceLimits::standard(16),
    )
    .unwrap();
    let exe = exec
        .load_weights(Box::new(Logits(logits.to_vec())))
        .unwrap();
    let entry = exec.add_entry(exe, &graph, "sampling head").unwrap();
    let mut counts = vec![0usize; v];
    for seed in 0..n {
        let s = Sampler {
            seed: seed as u64 * 7919 + 1,
            ..sampler
        };
        let mut inputs = StepInputs::new();
        inputs.set(
            Slot::Named(SAMPLER_SLOT.into()),
            s.slot_values()
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        );
        inputs.set(
            Slot::Named(SEED_SLOT.into()),
            s.seed_values(0)
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        );
        let mut out = StepOutputs::default();
        exec.step(entry, &inputs, &mut out).unwrap();
        let words = out.i32(0).unwrap();
        assert_eq!(words[1], 0, "finite logits flagged non-finite");
        counts[words[0] as usize] += 1;
    }
    exec.unload(exe);
    counts
}

/// The host's distribution for one sampler over `logits`.
fn expected(logits: &[f32], s: Sampler) -> Vec<f64> {
    let t = s.temperature as f64;
    let z: Vec<f64> = logits.iter().map(|&x| x as f64 / t).collect();
    let m = z.iter().cloned().fold(f64::MIN, f64::max);
    let sum: f64 = z.iter().map(|x| (x - m).exp()).sum();
    let p: Vec<f64> = z.iter().map(|x| (x - m).exp() / sum).collect();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap().then(a.cmp(&b)));
    let mut keep = vec![false; p.len()];
    let mut cum = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let k_ok = s.top_k == 0 || (rank as u32) < s.top_k;
        let p_ok = cum < s.top_p as f64;
        let min_ok = p[i] >= s.min_p as f64 * p[order[0]];
        keep[i] = k_ok && p_ok && min_ok;
        cum += p[i];
    }
    let total: f64 = (0..p.len()).filter(|&i| keep[i]).map(|i| p[i]).sum();
    (0..p.len())
        .map(|i| if keep[i] { p[i] / total } else { 0.0 })
        .collect()
}

#[test]
fn sampling_rules_follow_the_host_distribution() {
    let Some(mut exec) = executor() else { return };
    let logits = [2.0f32, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0];
    let n = 600;
    let cases = [
        (
            "temperature 1",
            Sampler {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: 0,
            },
        ),
        (
            "temperature 0.5, top-k 3",
            Sampler {
                temperature: 0.5,
                top_k: 3,
                top_p: 1.0,
                min_p: 0.0,
                seed: 0,
            },
        ),
        (
            "top-p 0.7",
            Sampler {
                temperature: 1.0,
                top_k: 0,
                top_p: 0.7,
                min_p: 0.0,
                seed: 0,
            },
        ),
        (
            "min-p 0.2",
            Sampler {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.2,
                seed: 0,
            },
        ),
    ];
    for (name, s) in cases {
        let counts = draws(exec.as_mut(), &logits, s, n);
        let want = expected(&logits, s);
        // Excluded tokens are never drawn; each kept token's frequency is within 5 standard errors.
        for (i, (&c, &p)) in counts.iter().zip(&want).enumerate() {
            let f = c as f64 / n as f64;
            if p == 0.0 {
                assert_eq!(c, 0, "{name}: token {i} drawn {c} times but excluded");
            } else {
                let se = (p * (1.0 - p) / n as f64).sqrt();
                assert!(
                    (f - p).abs() <= 5.0 * se + 1e-9,
                    "{name}: token {i}: frequency {f:.3}, expected {p:.3}"
                );
            }
        }
    }
    // Greedy through the same suffix: temperature 0 always picks the arg-max.
    let counts = draws(exec.as_mut(), &logits, Sampler::greedy(), 20);
    assert_eq!(counts[0], 20);
    // One seed reproduces its draw.
    let a = draws(exec.as_mut(), &logits, Sampler::new(1.0, 0, 1.0, 0), 30);
    let b = draws(exec.as_mut(), &logits, Sampler::new(1.0, 0, 1.0, 0), 30);
    assert_eq!(a, b);
}
