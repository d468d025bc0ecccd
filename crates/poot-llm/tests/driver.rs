//! The driver on the wgpu backend (lavapipe in CI): greedy generation equals the transformers
//! reference with only token ids crossing the bus; log-probabilities match transformers' and
//! move with the penalties as the output history says; seeded sampling is reproducible; the
//! sampling suffix's draws follow the host's distribution for each rule.

#![allow(clippy::unwrap_used)]

mod common;

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use common::models::cached_model;
use poot_executor::{ConstBytes, ConstSource, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits};
use poot_llm::sampling::{Head, SAMPLER_SLOT, SEED_SLOT, append_head};
use poot_llm::{
    BackendChoice, Driver, DriverError, DriverOptions, FinishReason, GenerateRequest, Layout,
    LoadOptions, MAX_TOP_LOGPROBS, ModelHandle, Penalties, Sampler, SeqId, TokenLogprob,
    open_executor,
};
use poot_models::{KvType, Registry};

fn executor() -> Option<Box<dyn Executor>> {
    match open_executor(BackendChoice::Wgpu) {
        Ok(o) => Some(o.executor),
        Err(e) => {
            eprintln!("SKIP: {e}");
            None
        }
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
            GenerateRequest::new(prompt, 4, Sampler::greedy()),
            &mut |t| {
                streamed.push_str(t.text);
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
    // After the prefill picked the first token, the other three were chained on the device and
    // read back once: a token id and the non-finite flag per step, 8 bytes each, not the logits.
    assert_eq!(driver.executor().stats().last_read_bytes, 3 * 8);
}

#[test]
fn the_serving_surface_admits_one_contiguous_sequence_at_a_time() {
    let Some(exec) = executor() else { return };
    let (handle, reference) = tiny_chat();
    let case = &reference["greedy"][0];
    let ids = |k: &str| -> Vec<u32> {
        case[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let mut driver = Driver::new(Arc::clone(&handle), exec, DriverOptions::new(64, 4))
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let req = GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(ids("prompt_ids"), 2, Sampler::greedy())
    };
    let a = driver.open(req.clone()).unwrap();
    assert!(matches!(
        driver.open(req.clone()),
        Err(DriverError::NoRoom {
            open: 1,
            rows: 1,
            ..
        })
    ));
    let mut tokens = Vec::new();
    let mut finish = None;
    while finish.is_none() {
        let picks = driver.step().unwrap();
        for event in driver.commit(picks).unwrap() {
            assert_eq!(event.id, a);
            tokens.extend(event.tokens.iter().map(|t| t.id));
            finish = event.finish;
        }
    }
    assert_eq!(tokens, ids("ids")[..2]);
    assert_eq!(finish, Some(FinishReason::Length));
    driver.release(a);
    let b = driver.open(req).unwrap();
    assert_ne!(a, b);
    driver.release(b);
    assert_eq!(driver.open_count(), 0);
}

/// The tiny random chat model with a trained tokenizer that poot-serve's tests use, and its
/// greedy references from transformers.
fn tiny_chat() -> (Arc<ModelHandle>, serde_json::Value) {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let handle = Arc::new(
        ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default()).unwrap(),
    );
    let reference =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    (handle, reference)
}

/// The (prompt ids, greedy ids) pairs of a fixture's transformers reference.
fn greedy_cases(reference: &serde_json::Value) -> Vec<(Vec<u32>, Vec<u32>)> {
    let ids = |c: &serde_json::Value, k: &str| -> Vec<u32> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    reference["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(c, "prompt_ids"), ids(c, "ids")))
        .collect()
}

/// Steps `driver` until every sequence of `ids` finishes: each one's tokens and the prompt
/// tokens it found in the prefix cache.
fn run_all(driver: &mut Driver, ids: &[SeqId]) -> Vec<(Vec<u32>, usize)> {
    let mut out: Vec<(Vec<u32>, usize)> = vec![(Vec::new(), 0); ids.len()];
    let mut done = 0;
    while done < ids.len() {
        let picks = driver.step().unwrap();
        for event in driver.commit(picks).unwrap() {
            let i = ids.iter().position(|&id| id == event.id).unwrap();
            out[i].0.extend(event.tokens.iter().map(|t| t.id));
            out[i].1 = event.cached_tokens;
            done += usize::from(event.finish.is_some());
        }
    }
    out
}

#[test]
fn paged_rows_batch_and_reuse_a_prompt_prefix_with_the_tokens_of_one_contiguous_row() {
    let Some(exec) = executor() else { return };
    let (handle, reference) = tiny_chat();
    let cases = greedy_cases(&reference);
    let options = DriverOptions::new(64, 4).with_rows(2);
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 40,
    };
    let mut driver = Driver::new(Arc::clone(&handle), exec, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    let request = |(prompt, want): &(Vec<u32>, Vec<u32>)| GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(prompt.clone(), want.len(), Sampler::greedy())
    };
    let (first, second) = (&cases[0], &cases[1]);
    let a = driver.open(request(first)).unwrap();
    let b = driver.open(request(second)).unwrap();
    assert!(matches!(
        driver.open(request(first)),
        Err(DriverError::NoRoom { .. })
    ));
    // Two rows of different lengths batched (prefill chunks, tails and chained decode).
    let out = run_all(&mut driver, &[a, b]);
    assert_eq!(out[0], (first.1.clone(), 0), "transformers' greedy tokens");
    assert_eq!(out[1], (second.1.clone(), 0), "transformers' greedy tokens");
    driver.release(a);
    driver.release(b);
    // Their full prompt blocks are cached now: a repeat reuses them and agrees.
    let c = driver.open(request(second)).unwrap();
    let again = run_all(&mut driver, &[c]);
    let full_blocks = (second.0.len() - 1) / 4 * 4;
    assert_eq!(again[0], (second.1.clone(), full_blocks));
    assert!(full_blocks > 0);
    driver.release(c);
}

/// A prompt whose last chunk reaches back into blocks the prefix cache shares with a running
/// sequence: the sharer keeps transformers' tokens, and the new prompt gets the tokens a
/// contiguous cache (fed chunk by chunk, never reaching back) gives it.
#[test]
fn a_last_chunk_reaching_into_shared_blocks_keeps_every_sequences_tokens() {
    let Some(exec) = executor() else { return };
    let (handle, reference) = tiny_chat();
    let cases = greedy_cases(&reference);
    let shared = &cases[3];
    // The shared prompt's first 32 tokens (8 blocks of 4) and 3 of another prompt's.
    let mut prompt = shared.0[..32].to_vec();
    prompt.extend_from_slice(&cases[1].0[..3]);
    let request = |prompt: &[u32], n: usize| GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(prompt.to_vec(), n, Sampler::greedy())
    };
    let mut contiguous = Driver::new(Arc::clone(&handle), exec, DriverOptions::new(64, 8))
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let id = contiguous.open(request(&prompt, 8)).unwrap();
    let want = run_all(&mut contiguous, &[id]).remove(0).0;
    drop(contiguous);

    let Some(exec) = executor() else { return };
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 60,
    };
    let mut driver = Driver::new(handle, exec, DriverOptions::new(64, 8).with_rows(2))
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    let first = driver.open(request(&shared.0, shared.1.len())).unwrap();
    let out = run_all(&mut driver, &[first]);
    assert_eq!(out[0].0, shared.1, "transformers' greedy tokens");
    driver.release(first);
    // Both open together: the shared prompt again, and the new one, whose 3 uncached tokens
    // run as a chunk of 4 reaching back into the eighth shared block.
    let again = driver.open(request(&shared.0, shared.1.len())).unwrap();
    let new = driver.open(request(&prompt, 8)).unwrap();
    let before = driver.runs().clone();
    let out = run_all(&mut driver, &[again, new]);
    let chunks_of_4 = driver.runs().get(&(1, 4)).copied().unwrap_or(0)
        - before.get(&(1, 4)).copied().unwrap_or(0);
    assert_eq!(out[0], (shared.1.clone(), 36), "the sharer's tokens");
    assert_eq!(out[1], (want, 32), "the contiguous cache's tokens");
    assert_eq!(
        chunks_of_4, 1,
        "the new prompt's last 3 tokens in one chunk of 4"
    );
}

#[test]
fn several_rows_over_a_contiguous_cache_are_refused_as_incompatible() {
    let Some(exec) = executor() else { return };
    let dir = poot_models::test_support::family_fixtures::fixture("llama")
        .unwrap()
        .path();
    let handle = Arc::new(
        ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default()).unwrap(),
    );
    let options = DriverOptions::new(32, 4).with_rows(2);
    let driver = Driver::new(handle, exec, options).unwrap();
    let Err(refused) = driver.serve(Layout::Contiguous) else {
        panic!("served two contiguous rows");
    };
    let (_, error) = *refused;
    assert!(matches!(error, DriverError::Incompatible(_)), "{error}");
}

#[test]
fn a_top_k_over_the_device_candidates_is_refused() {
    let Some(exec) = executor() else { return };
    let (handle, _) = tiny_chat();
    let mut driver = Driver::new(handle, exec, DriverOptions::new(32, 4))
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let request = |k| GenerateRequest::new(vec![1, 2, 3], 2, Sampler::new(0.9, k, 1.0, 7));
    let err = driver
        .generate(request(33), &mut |_| ControlFlow::Continue(()))
        .err()
        .unwrap();
    assert!(
        matches!(&err, DriverError::Sampling(why) if why.contains("top_k 33 exceeds the 32")),
        "{err}"
    );
    let out = driver
        .generate(request(32), &mut |_| ControlFlow::Continue(()))
        .unwrap();
    assert!(!out.tokens.is_empty());
}

#[test]
fn seeded_sampling_reproduces_its_tokens() {
    let Some((handle, mut driver)) = smollm2_driver() else {
        return;
    };
    let prompt = handle.text().unwrap().encode("Once upon a time").unwrap();
    let mut run = |seed| {
        let req = GenerateRequest {
            ignore_eos: true,
            // top_k 32: the most the device draws from (40 was cut to 32; now it is refused).
            ..GenerateRequest::new(prompt.clone(), 3, Sampler::new(0.9, 32, 0.95, seed))
        };
        driver
            .generate(req, &mut |_| ControlFlow::Continue(()))
            .unwrap()
            .tokens
    };
    let first = run(42);
    assert_eq!(first.len(), 3);
    assert_eq!(run(42), first, "one seed, one continuation");
    // Unchained (the host waits after every token), the same seed draws the same tokens: the
    // chain advances the draw counter on the device as the host does.
    let exec = executor().unwrap();
    let options = DriverOptions::new(64, 4).with_chain(1);
    let mut unchained = Driver::new(Arc::clone(&handle), exec, options)
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    let req = GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(prompt.clone(), 3, Sampler::new(0.9, 32, 0.95, 42))
    };
    let tokens = unchained
        .generate(req, &mut |_| ControlFlow::Continue(()))
        .unwrap()
        .tokens;
    assert_eq!(tokens, first);
    assert_eq!(unchained.executor().stats().last_read_bytes, 8);
}

/// transformers' reference for SmolLM2 (crates/poot-models/tests/fixtures/real/smollm2.json):
/// greedy ids after "The capital of France is", each one's log-probability, and the first
/// step's five most likely tokens.
fn smollm2_reference() -> (Vec<u32>, Vec<f32>, Vec<(u32, f32)>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-models/tests/fixtures/real/smollm2.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = &json["cases"][0];
    assert_eq!(case["prompt_text"], "The capital of France is");
    let ids = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
    let greedy = case["greedy_ids"].as_array().unwrap().iter().map(ids);
    let logprobs = case["logprobs"].as_array().unwrap().iter();
    let top5 = case["first_top5"].as_array().unwrap().iter();
    (
        greedy.collect(),
        logprobs.map(|v| v.as_f64().unwrap() as f32).collect(),
        top5.map(|p| (ids(&p[0]), p[1].as_f64().unwrap() as f32))
            .collect(),
    )
}

#[test]
fn logprobs_match_transformers_and_penalties_shift_them_by_the_output_history() {
    // transformers keeps its cache in f32: so does this driver, so the log-probabilities are
    // held to the oracle's own tolerance (the f16 cache's are checked below).
    let Some((handle, mut driver)) = smollm2_driver() else {
        return;
    };
    let prompt = handle
        .text()
        .unwrap()
        .encode("The capital of France is")
        .unwrap();
    let (greedy, want_logprobs, want_top5) = smollm2_reference();
    let n = 6;
    let run = |driver: &mut Driver, sampler: Sampler, top: usize| {
        let req = GenerateRequest {
            top_logprobs: Some(top),
            ..GenerateRequest::new(prompt.clone(), n, sampler)
        };
        let mut streamed = Vec::new();
        let generation = driver
            .generate(req, &mut |t| {
                streamed.push(t.logprob.cloned());
                ControlFlow::Continue(())
            })
            .unwrap();
        // The sink saw each token's record as the generation reports it.
        let streamed: Vec<TokenLogprob> = streamed.into_iter().map(Option::unwrap).collect();
        assert_eq!(streamed, generation.logprobs);
        generation
    };

    // Greedy with log-probabilities: the plain greedy tokens, transformers' log-probabilities
    // (within 1e-3, the oracle's tolerance against the same reference), the chosen token first.
    let plain = run(&mut driver, Sampler::greedy(), 5);
    assert_eq!(plain.tokens, greedy[..n]);
    assert_eq!(plain.logprobs.len(), n);
    let mut worst = 0f32;
    for (k, (record, &want)) in plain.logprobs.iter().zip(&want_logprobs).enumerate() {
        worst = worst.max((record.logprob - want).abs());
        assert!(
            (record.logprob - want).abs() <= 1e-3,
            "step {k}: {} against {want}",
            record.logprob
        );
        assert_eq!(record.top.len(), 5);
        assert_eq!(record.top[0], (plain.tokens[k], record.logprob));
        assert!(record.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
    for (&(id, lp), &(want_id, want)) in plain.logprobs[0].top.iter().zip(&want_top5) {
        assert_eq!(id, want_id);
        worst = worst.max((lp - want).abs());
        assert!(
            (lp - want).abs() <= 1e-3,
            "first step, token {id}: {lp} against {want}"
        );
    }
    eprintln!("log-probabilities against transformers: largest difference {worst:.2e}");
    // With an f16 cache (each key and value within 2^-11 of itself) the greedy tokens are
    // transformers' and the log-probabilities move by under 1e-2 (2.9e-3 measured).
    let (_, mut half_driver) = smollm2_driver_with(KvType::F16).unwrap();
    let half = run(&mut half_driver, Sampler::greedy(), 5);
    assert_eq!(half.tokens, greedy[..n]);
    let mut half_worst = 0f32;
    for (record, &want) in half.logprobs.iter().zip(&want_logprobs) {
        half_worst = half_worst.max((record.logprob - want).abs());
    }
    for (&(id, lp), &(want_id, want)) in half.logprobs[0].top.iter().zip(&want_top5) {
        assert_eq!(id, want_id);
        half_worst = half_worst.max((lp - want).abs());
    }
    eprintln!("with the f16 cache: largest difference {half_worst:.2e}");
    assert!(half_worst <= 1e-2, "f16 cache: {half_worst}");
    // A step read back the token, the flag, 20 ids and 21 log-probabilities: not the logits.
    assert_eq!(
        driver.executor().stats().last_read_bytes,
        4 * (2 + MAX_TOP_LOGPROBS + 1 + MAX_TOP_LOGPROBS) as u64
    );

    // Presence, frequency and bias: while the picks agree the raw logits do too, so between two
    // listed tokens the log-probabilities differ from the plain run's by exactly the difference
    // of their penalties, counted over the output so far (the prompt never counts).
    let reference = run(&mut driver, Sampler::greedy(), MAX_TOP_LOGPROBS);
    let bias = (260u32, 1.0f32);
    let penalized = Sampler {
        penalties: Penalties {
            repetition: 1.0,
            presence: 0.7,
            frequency: 0.4,
        },
        logit_bias: vec![bias],
        ..Sampler::greedy()
    };
    let adjusted = run(&mut driver, penalized, MAX_TOP_LOGPROBS);
    let penalty = |token: u32, output: &[u32]| {
        let count = output.iter().filter(|&&t| t == token).count() as f32;
        let presence = if count > 0.0 { 0.7 } else { 0.0 };
        count * 0.4 + presence - if token == bias.0 { bias.1 } else { 0.0 }
    };
    let mut compared = 0;
    let mut penalized_pairs = 0;
    for k in 0..n {
        if adjusted.tokens[..k] != reference.tokens[..k] {
            break;
        }
        let output = &reference.tokens[..k];
        let (a, b) = (&reference.logprobs[k].top, &adjusted.logprobs[k].top);
        let both: Vec<(u32, f32, f32)> = a
            .iter()
            .filter_map(|&(t, la)| b.iter().find(|p| p.0 == t).map(|&(_, lb)| (t, la, lb)))
            .collect();
        let (t0, a0, b0) = both[0];
        for &(t, la, lb) in &both[1..] {
            let want = (la - a0) - (penalty(t, output) - penalty(t0, output));
            assert!(
                (lb - b0 - want).abs() <= 1e-4,
                "step {k}: tokens {t0} and {t}: {} against {want}",
                lb - b0
            );
            compared += 1;
            if penalty(t, output) != penalty(t0, output) {
                penalized_pairs += 1;
            }
        }
    }
    assert!(
        compared > 20 && penalized_pairs > 3,
        "{compared} {penalized_pairs}"
    );
}

/// SmolLM2 served on wgpu, or `None` (with a SKIP line) without the checkpoint or an adapter.
fn smollm2_driver() -> Option<(Arc<ModelHandle>, Driver)> {
    smollm2_driver_with(KvType::default())
}

/// SmolLM2 served on wgpu with its cache in `kv_type`.
fn smollm2_driver_with(kv_type: KvType) -> Option<(Arc<ModelHandle>, Driver)> {
    let path = cached_model("smollm2-135m-instruct-q4_1.gguf")?;
    let exec = executor()?;
    let handle = Arc::new(
        ModelHandle::load(
            &path,
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let options = DriverOptions::new(64, 4).with_kv_type(kv_type);
    let driver = Driver::new(Arc::clone(&handle), exec, options)
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
    // The decode step over every row is prepared first; prompt chunks wait for first use.
    assert_eq!(entry, "step (rows 1, tokens 1, capacity 32, greedy head)");
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
        1,
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
            ..sampler.clone()
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
                ..Sampler::greedy()
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
                ..Sampler::greedy()
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
                ..Sampler::greedy()
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
                ..Sampler::greedy()
            },
        ),
    ];
    for (name, s) in cases {
        let counts = draws(exec.as_mut(), &logits, s.clone(), n);
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

/// A step is sized to its work: a lone sequence on a 4-row driver decodes in the 1-row step, a
/// prompt's last piece runs as one chunk, and a prompt arriving while others decode
/// rides along under the token budget; every sequence still gets transformers' tokens.
#[test]
fn steps_are_sized_to_the_rows_in_use_and_a_prompt_ends_in_one_chunk() {
    let Some(exec) = executor() else { return };
    let (handle, reference) = tiny_chat();
    let cases = greedy_cases(&reference);
    let options = DriverOptions::new(64, 16)
        .with_rows(4)
        .with_max_batched_tokens(20);
    assert_eq!(options.row_buckets(), vec![1, 2, 4]);
    assert_eq!(options.chunk_buckets(), vec![2, 4, 8, 16]);
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 80,
    };
    let mut driver = Driver::new(Arc::clone(&handle), exec, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    let request = |(prompt, want): &(Vec<u32>, Vec<u32>)| GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(prompt.clone(), want.len(), Sampler::greedy())
    };
    // A lone sequence: its prompt in chunks, its decode in the 1-row step.
    let (first, second) = (&cases[3], &cases[1]);
    assert_eq!(first.0.len(), 37, "the fixture's longest prompt");
    let a = driver.open(request(first)).unwrap();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(), Vec::new()];
    let mut done = [false, false];
    let mut b = None;
    let mut steps = 0;
    while !(done[0] && done[1]) {
        let picks = driver.step().unwrap();
        steps += 1;
        for event in driver.commit(picks).unwrap() {
            let i = if event.id == a { 0 } else { 1 };
            tokens[i].extend(event.tokens.iter().map(|t| t.id));
            done[i] |= event.finish.is_some();
        }
        // The second sequence arrives once the first decodes.
        if b.is_none() && !tokens[0].is_empty() {
            let lone = driver.runs().clone();
            assert!(
                lone.keys().all(|&(rows, _)| rows == 1),
                "a lone sequence runs 1-row steps: {lone:?}"
            );
            // Whole 16-token chunks, then the rest in one run: a chunk reaching back over
            // positions already written, or for a lone last token the 1-row decode step (37
            // tokens: 16, 16 and 8 reaching back 3, not 16, 16, 4 and a decode step).
            let n = first.0.len();
            let expected = (n / 16 + usize::from(n % 16 > 0)) as u64;
            assert_eq!(
                lone.values().sum::<u64>(),
                expected,
                "{n}-token prompt: {lone:?}"
            );
            b = Some(driver.open(request(second)).unwrap());
        }
        assert!(steps < 500, "the sequences did not finish");
    }
    assert_eq!(tokens[0], first.1, "transformers' greedy tokens");
    assert_eq!(tokens[1], second.1, "transformers' greedy tokens");
    let runs = driver.runs();
    assert!(
        runs.contains_key(&(2, 1)),
        "two decoding rows ran in the 2-row step: {runs:?}"
    );
    assert!(
        !runs.contains_key(&(4, 1)),
        "the 4-row step never ran: {runs:?}"
    );
}

/// A pool too small for every row at once: sequences take blocks step by step, the youngest is
/// preempted when the pool runs out and recomputes its prompt and output later, and every
/// sequence still gets transformers' tokens; none is lost.
#[test]
fn a_small_pool_preempts_and_recomputes_without_changing_a_token() {
    let Some(exec) = executor() else { return };
    let (handle, reference) = tiny_chat();
    let cases = greedy_cases(&reference);
    let options = DriverOptions::new(56, 8).with_rows(4).with_chain(4);
    // 14 usable blocks of 4 positions: the longest request (37 + 16) fits alone, not beside
    // the others.
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 15,
    };
    let mut driver = Driver::new(Arc::clone(&handle), exec, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    let mut ids: Vec<Option<SeqId>> = vec![None; cases.len()];
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); cases.len()];
    let mut done = vec![false; cases.len()];
    let mut steps = 0;
    while done.iter().any(|d| !d) {
        // Admit what waits as soon as there is room.
        for (i, (prompt, want)) in cases.iter().enumerate() {
            if ids[i].is_some() || done[i] {
                continue;
            }
            let request = GenerateRequest {
                ignore_eos: true,
                ..GenerateRequest::new(prompt.clone(), want.len(), Sampler::greedy())
            };
            match driver.open(request) {
                Ok(id) => ids[i] = Some(id),
                Err(DriverError::NoRoom { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let picks = driver.step().unwrap();
        for event in driver.commit(picks).unwrap() {
            let i = ids.iter().position(|&id| id == Some(event.id)).unwrap();
            out[i].extend(event.tokens.iter().map(|t| t.id));
            if event.finish.is_some() {
                done[i] = true;
                driver.release(event.id);
            }
        }
        steps += 1;
        assert!(steps < 2000, "no progress: {out:?}");
    }
    for (i, (_, want)) in cases.iter().enumerate() {
        assert_eq!(&out[i], want, "case {i}: transformers' greedy tokens");
    }
    assert!(driver.preemptions() > 0, "the pool never ran out");
    assert_eq!(driver.free_blocks(), 14, "every block is back");
}
