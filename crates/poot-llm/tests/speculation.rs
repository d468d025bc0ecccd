//! Speculative decoding through the driver, on the CPU oracle (an executor evaluating every
//! entry with `poot_eval`, any machine) and on the wgpu backend (lavapipe in CI):
//!
//! - greedy output with prompt lookup, with a draft model (the same checkpoint, and a perturbed
//!   copy that disagrees at some positions) and with both is token for token the output without
//!   speculation, on one contiguous row and on paged rows batched together;
//! - the verification head over fixed logits keeps the greedy tokens, and its sampled tokens
//!   follow the target's distribution (a chi-square bound, stated at each test);
//! - sampled generation with a draft model draws its second token from the target's conditional
//!   distribution, computed on the oracle;
//! - a draft model with another vocabulary is a typed refusal, and a request may opt out.

#![allow(clippy::unwrap_used)]

mod common;

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::oracle_executor::OracleExecutor;
use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_executor::{ConstBytes, ConstSource, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Builder, DType, Graph, Outputs, Storage, TensorType, TraceLimits};
use poot_llm::sampling::verify::{Verdict, VerifyRow, bind_slots, read_verdicts};
use poot_llm::sampling::{Head, append_head};
use poot_llm::{
    BackendChoice, Driver, DriverError, DriverOptions, GenerateRequest, Layout, LoadOptions,
    ModelHandle, PromptLookup, Sampler, SeqId, Speculation, open_executor,
};
use poot_models::Registry;

/// Opens a fresh executor of one backend.
type Opener = Box<dyn Fn() -> Box<dyn Executor>>;

/// The oracle, then the wgpu and PTX devices where they open (PTX on a GPU machine, where this
/// test's binary is carried).
fn executors() -> Vec<(&'static str, Opener)> {
    let mut all: Vec<(&'static str, Opener)> = vec![("oracle", Box::new(OracleExecutor::boxed))];
    for (name, choice) in [("wgpu", BackendChoice::Wgpu), ("ptx", BackendChoice::Ptx)] {
        match open_executor(choice) {
            Ok(_) => all.push((
                name,
                Box::new(move || open_executor(choice).unwrap().executor),
            )),
            Err(e) => eprintln!("SKIP ({name}): {e}"),
        }
    }
    all
}

fn tiny_chat_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat")
}

fn load(dir: &Path) -> Arc<ModelHandle> {
    Arc::new(
        ModelHandle::load(dir, &Registry::builtin().unwrap(), &LoadOptions::default()).unwrap(),
    )
}

/// A copy of tiny-chat in a fresh directory, with `edit` applied to its safetensors (name, f32
/// values) and to its tokenizer.json text.
fn tiny_chat_copy(
    tag: &str,
    edit_weights: impl Fn(&str, &mut [f32]),
    edit_tokenizer: impl Fn(String) -> String,
) -> PathBuf {
    let from = tiny_chat_dir();
    let to = std::env::temp_dir().join(format!("poot-spec-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&to).unwrap();
    for f in ["config.json", "tokenizer_config.json"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    let tokenizer = std::fs::read_to_string(from.join("tokenizer.json")).unwrap();
    std::fs::write(to.join("tokenizer.json"), edit_tokenizer(tokenizer)).unwrap();
    // safetensors: an 8-byte header length, the JSON header, then the data.
    let bytes = std::fs::read(from.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut data = bytes[8 + n..].to_vec();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" || info["dtype"] != "F32" {
            continue;
        }
        let at = &info["data_offsets"];
        let (a, b) = (
            at[0].as_u64().unwrap() as usize,
            at[1].as_u64().unwrap() as usize,
        );
        let mut values: Vec<f32> = data[a..b]
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        edit_weights(name, &mut values);
        for (i, v) in values.iter().enumerate() {
            data[a + 4 * i..a + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let mut out = bytes[..8 + n].to_vec();
    out.extend(data);
    std::fs::write(to.join("model.safetensors"), out).unwrap();
    to
}

/// tiny-chat with its last layer's feed-forward output scaled: a draft that agrees with the
/// target at most positions and not at all.
fn perturbed_draft() -> PathBuf {
    tiny_chat_copy(
        "perturbed",
        |name, w| {
            if name.contains("layers.1.mlp.down_proj") {
                w.iter_mut().for_each(|x| *x *= 0.6);
            }
        },
        |t| t,
    )
}

fn serve(
    handle: &Arc<ModelHandle>,
    exec: Box<dyn Executor>,
    options: DriverOptions,
    layout: Layout,
) -> Driver {
    Driver::new(Arc::clone(handle), exec, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap()
}

const PAGED: Layout = Layout::Paged {
    block_tokens: 4,
    blocks: 80,
};

/// Prompts whose greedy continuations repeat themselves, so lookup finds drafts, and others.
fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![418, 14, 451, 3],
        vec![5, 6, 7, 8, 5, 6, 7, 8, 5, 6],
        vec![100, 200, 300, 100, 200, 300, 100],
        vec![33, 44, 55, 66, 77],
    ]
}

/// Every prompt's greedy tokens, all rows opened at once and run to the end.
fn run_all(driver: &mut Driver, prompts: &[Vec<u32>], max_new: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); prompts.len()];
    for chunk in (0..prompts.len()).collect::<Vec<_>>().chunks(driver.rows()) {
        let ids: Vec<SeqId> = chunk
            .iter()
            .map(|&i| {
                let req = GenerateRequest {
                    ignore_eos: true,
                    ..GenerateRequest::new(prompts[i].clone(), max_new, Sampler::greedy())
                };
                driver.open(req).unwrap()
            })
            .collect();
        let mut done = 0;
        while done < ids.len() {
            let picks = driver.step().unwrap();
            for event in driver.commit(picks).unwrap() {
                let i = chunk[ids.iter().position(|&id| id == event.id).unwrap()];
                out[i].extend(event.tokens.iter().map(|t| t.id));
                if event.finish.is_some() {
                    done += 1;
                }
            }
        }
        for id in ids {
            driver.release(id);
        }
    }
    out
}

const MAX_NEW: usize = 24;

/// The reference: each prompt alone, no speculation, on the same backend.
fn plain(exec: Box<dyn Executor>, handle: &Arc<ModelHandle>) -> Vec<Vec<u32>> {
    let mut driver = serve(handle, exec, DriverOptions::new(64, 4), Layout::Contiguous);
    run_all(&mut driver, &prompts(), MAX_NEW)
}

#[test]
fn greedy_prompt_lookup_is_token_for_token_the_plain_output() {
    let handle = load(&tiny_chat_dir());
    for (name, open) in executors() {
        let want = plain(open(), &handle);
        for (k, rows, layout) in [(3, 1, Layout::Contiguous), (4, 4, PAGED), (2, 2, PAGED)] {
            let options = DriverOptions::new(64, 4)
                .with_rows(rows)
                .with_speculation(Speculation::prompt_lookup(k));
            let mut driver = serve(&handle, open(), options, layout);
            let got = run_all(&mut driver, &prompts(), MAX_NEW);
            assert_eq!(got, want, "{name}: k {k}, {rows} rows");
            let stats = driver.spec_stats();
            assert!(stats.verify_steps > 0, "{name}: {stats:?}");
            assert!(stats.accepted_tokens > 0, "{name}: {stats:?}");
            assert!(
                stats.accepted_tokens < stats.drafted_tokens,
                "{name}: some drafts are rejected: {stats:?}"
            );
            // Verification steps ran at k + 1 positions a row.
            assert!(driver.runs().keys().any(|&(_, t)| t == k + 1), "{name}");
        }
    }
}

#[test]
fn greedy_with_a_draft_model_is_token_for_token_the_plain_output() {
    let handle = load(&tiny_chat_dir());
    let perturbed = load(&perturbed_draft());
    for (name, open) in executors() {
        let want = plain(open(), &handle);
        for (draft, full, lookup) in [
            (&handle, true, false),
            (&perturbed, false, false),
            (&perturbed, false, true),
        ] {
            for (rows, layout) in [(1, Layout::Contiguous), (4, PAGED)] {
                let speculation = Speculation {
                    tokens: 3,
                    lookup: lookup.then(PromptLookup::default),
                };
                let options = DriverOptions::new(64, 4)
                    .with_rows(rows)
                    .with_speculation(speculation);
                let mut driver = serve(&handle, open(), options, layout);
                let draft_options = DriverOptions::new(64, 4).with_rows(rows);
                driver
                    .attach_draft(serve(draft, open(), draft_options, layout))
                    .unwrap();
                let got = run_all(&mut driver, &prompts(), MAX_NEW);
                let case = format!("{name}: self-draft {full}, lookup {lookup}, {rows} rows");
                assert_eq!(got, want, "{case}");
                let stats = driver.spec_stats();
                assert!(stats.model_drafted_tokens > 0, "{case}: {stats:?}");
                if full {
                    // The same model drafting greedily is always right.
                    assert_eq!(stats.accepted_tokens, stats.drafted_tokens, "{case}");
                } else {
                    assert!(stats.accepted_tokens > 0, "{case}: {stats:?}");
                    assert!(
                        stats.accepted_tokens < stats.drafted_tokens,
                        "{case}: {stats:?}"
                    );
                }
                // Released with their targets.
                assert_eq!(driver.draft_model().unwrap().open_count(), 0, "{case}");
            }
        }
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let handle = load(&tiny_chat_dir());
    // Two vocabulary entries swapped: the same size, another spelling for two ids.
    let dir = tiny_chat_copy(
        "vocab",
        |_, _| {},
        |t| {
            let mut json: serde_json::Value = serde_json::from_str(&t).unwrap();
            let vocab = json["model"]["vocab"].as_object_mut().unwrap();
            let (a, b) = ("Hello", "hello");
            let (ia, ib) = (vocab[a].clone(), vocab[b].clone());
            vocab.insert(a.to_string(), ib);
            vocab.insert(b.to_string(), ia);
            json.to_string()
        },
    );
    let other = load(&dir);
    let options = DriverOptions::new(64, 4).with_speculation(Speculation {
        tokens: 3,
        lookup: None,
    });
    let mut driver = serve(
        &handle,
        OracleExecutor::boxed(),
        options,
        Layout::Contiguous,
    );
    let draft = serve(
        &other,
        OracleExecutor::boxed(),
        DriverOptions::new(64, 4),
        Layout::Contiguous,
    );
    let err = driver.attach_draft(draft).unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::DraftVocabulary {
                target_vocab: 512,
                draft_vocab: 512,
                first_difference: Some(_),
            }
        ),
        "{err}"
    );
}

#[test]
fn a_request_that_opts_out_decodes_one_token_a_step() {
    let handle = load(&tiny_chat_dir());
    let options = DriverOptions::new(64, 4).with_speculation(Speculation::prompt_lookup(3));
    let mut driver = serve(
        &handle,
        OracleExecutor::boxed(),
        options,
        Layout::Contiguous,
    );
    let req = GenerateRequest {
        ignore_eos: true,
        speculate: false,
        ..GenerateRequest::new(prompts()[1].clone(), 12, Sampler::greedy())
    };
    let out = driver
        .generate(req, &mut |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(out.tokens.len(), 12);
    assert_eq!(driver.spec_stats().verify_steps, 0);
}

// The verification head over fixed logits.

/// A verification suffix over fixed `[rows, positions, vocab]` logits.
struct Fixed {
    graph: Graph,
    logits: Vec<f32>,
    rows: usize,
    positions: usize,
    vocab: usize,
    device: Option<(Box<dyn Executor>, poot_executor::EntryId)>,
}

struct Table(Vec<f32>);

impl ConstSource for Table {
    fn names(&self) -> Vec<String> {
        vec!["logits".to_string()]
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        (name == "logits").then(|| ConstBytes::F32(Cow::Borrowed(&self.0)))
    }
}

impl Fixed {
    fn new(
        logits: Vec<f32>,
        rows: usize,
        positions: usize,
        head: Head,
        device: Option<Box<dyn Executor>>,
    ) -> Fixed {
        let vocab = logits.len() / rows / positions;
        let limits = TraceLimits::standard(64);
        let b = Builder::new(limits);
        let ty = TensorType::new(DType::F32, vec![rows, positions, vocab]);
        let l = b.constant("logits", ty).unwrap();
        let out = b
            .add(
                l,
                b.broadcast(b.lit_f32(0.0).unwrap(), [rows, positions, vocab])
                    .unwrap(),
            )
            .unwrap();
        let graph = append_head(b.finish(Outputs::new(out)).unwrap(), head, limits, rows).unwrap();
        let device = device.map(|mut exec| {
            let exe = exec.load_weights(Box::new(Table(logits.clone()))).unwrap();
            let entry = exec.add_entry(exe, &graph, "verify suffix").unwrap();
            (exec, entry)
        });
        Fixed {
            graph,
            logits,
            rows,
            positions,
            vocab,
            device,
        }
    }

    fn step(&mut self, rows: &[VerifyRow<'_>], sampled: bool) -> Vec<Verdict> {
        let mut inputs = StepInputs::new();
        bind_slots(&mut inputs, sampled, rows, self.positions);
        let out = match &mut self.device {
            Some((exec, entry)) => {
                let mut out = StepOutputs::default();
                exec.step(*entry, &inputs, &mut out).unwrap();
                out
            }
            None => {
                let ty = TensorType::new(DType::F32, vec![self.rows, self.positions, self.vocab]);
                let mut bound = Inputs::new().with_const(
                    "logits",
                    HostTensor::f32(ty.shape.clone(), self.logits.clone()).unwrap(),
                );
                for v in self.graph.values() {
                    if let Storage::Slot(slot) = &v.storage {
                        let bytes = inputs.slot(slot).unwrap().to_vec();
                        bound.set_slot(
                            slot.clone(),
                            HostTensor::from_le_bytes(v.ty.clone(), bytes).unwrap(),
                        );
                    }
                }
                let done = eval(&self.graph, &bound, EvalOptions::default()).unwrap();
                StepOutputs {
                    values: done.outputs.iter().map(HostTensor::to_le_bytes).collect(),
                }
            }
        };
        read_verdicts(&out, self.rows, self.positions).unwrap()
    }
}

/// The oracle (`None`), then the wgpu and PTX devices where they open.
fn suffix_backends() -> Vec<Option<Box<dyn Executor>>> {
    let mut all = vec![None];
    for choice in [BackendChoice::Wgpu, BackendChoice::Ptx] {
        match open_executor(choice) {
            Ok(o) => all.push(Some(o.executor)),
            Err(e) => eprintln!("SKIP ({choice:?}): {e}"),
        }
    }
    all
}

/// Deterministic logits in [-3, 3).
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b })
}

#[test]
fn greedy_verification_keeps_the_drafts_that_equal_the_argmax_then_the_argmax() {
    let (rows, positions, vocab) = (4, 4, 40);
    let table = logits(rows * positions * vocab, 3);
    let best = |r: usize, i: usize| {
        let at = (r * positions + i) * vocab;
        argmax(&table[at..at + vocab]) as u32
    };
    let wrong = |t: u32| (t + 1) % vocab as u32;
    // Row 0 drafts all three right, row 1 the first only, row 2 none, row 3 two of two.
    let drafts: Vec<Vec<u32>> = vec![
        vec![best(0, 0), best(0, 1), best(0, 2)],
        vec![best(1, 0), wrong(best(1, 1)), best(1, 2)],
        vec![wrong(best(2, 0)), best(2, 1), best(2, 2)],
        vec![best(3, 0), best(3, 1)],
    ];
    let want = [(3, 4), (1, 2), (0, 1), (2, 3)];
    for device in suffix_backends() {
        let mut fixed = Fixed::new(table.clone(), rows, positions, Head::Verify, device);
        let greedy = Sampler::greedy();
        let bound: Vec<VerifyRow<'_>> = drafts
            .iter()
            .map(|d| VerifyRow {
                sampler: &greedy,
                draw: 0,
                drafts: d,
            })
            .collect();
        let verdicts = fixed.step(&bound, false);
        for (r, (v, &(accepted, kept))) in verdicts.iter().zip(&want).enumerate() {
            assert_eq!(v.accepted, accepted, "row {r}");
            assert_eq!(v.tokens.len(), kept);
            let expect: Vec<i32> = (0..kept).map(|i| best(r, i) as i32).collect();
            assert_eq!(
                v.tokens, expect,
                "row {r}: the target's arg-max at each kept position"
            );
            assert!(!v.non_finite);
        }
    }
}

/// Softmax of `x / t` restricted to the `top_k` largest (0: all), in f64.
fn target_distribution(x: &[f32], t: f64, top_k: usize) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[b].partial_cmp(&x[a]).unwrap().then(a.cmp(&b)));
    let kept = if top_k == 0 { x.len() } else { top_k };
    let mut p = vec![0f64; x.len()];
    for &i in &order[..kept] {
        p[i] = (x[i] as f64 / t).exp();
    }
    let z: f64 = p.iter().sum();
    p.iter().map(|v| v / z).collect()
}

/// Pearson's chi-square of `counts` against `p` (cells with p = 0 must be empty).
fn chi_square(counts: &[u64], p: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(p)
        .map(|(&c, &q)| {
            if q == 0.0 {
                assert_eq!(c, 0, "a token outside the target's support");
                0.0
            } else {
                let e = q * n as f64;
                (c as f64 - e).powi(2) / e
            }
        })
        .sum()
}

/// The chi-square critical value at p = 0.001 for `dof` degrees of freedom (Wilson-Hilferty).
fn chi_square_critical(dof: usize) -> f64 {
    let k = dof as f64;
    let z = 3.090_232; // the 0.999 normal quantile
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

#[test]
fn sampled_verification_keeps_tokens_that_follow_the_target_distribution() {
    // One position checked against a draft, then the bonus position. Each row is one trial
    // with its own seed; the first kept token must follow p_0 whatever the draft, and the
    // second, when the draft was accepted, p_1. Bound: Pearson's chi-square below its
    // p = 0.001 critical value (the seeds are fixed, so the test is deterministic).
    let (rows, positions, vocab) = (64, 2, 8);
    let base = logits(positions * vocab, 11);
    let mut table = Vec::new();
    for _ in 0..rows {
        table.extend(&base);
    }
    for (top_k, draft) in [(0usize, 0u32), (0, 5), (4, 1), (3, 7)] {
        let p0 = target_distribution(&base[..vocab], 0.8, top_k);
        let p1 = target_distribution(&base[vocab..], 0.8, top_k);
        for device in suffix_backends() {
            let on = if device.is_some() { "wgpu" } else { "oracle" };
            let mut fixed = Fixed::new(table.clone(), rows, positions, Head::VerifySample, device);
            let (mut first, mut second) = (vec![0u64; vocab], vec![0u64; vocab]);
            let mut accepted = 0u64;
            let trials = 64;
            for trial in 0..trials {
                let samplers: Vec<Sampler> = (0..rows)
                    .map(|r| Sampler::new(0.8, top_k as u32, 1.0, (trial * rows + r) as u64))
                    .collect();
                let bound: Vec<VerifyRow<'_>> = samplers
                    .iter()
                    .map(|s| VerifyRow {
                        sampler: s,
                        draw: 3,
                        drafts: std::slice::from_ref(&draft),
                    })
                    .collect();
                for v in fixed.step(&bound, true) {
                    first[v.tokens[0] as usize] += 1;
                    if v.accepted == 1 {
                        assert_eq!(v.tokens[0], draft as i32);
                        second[v.tokens[1] as usize] += 1;
                        accepted += 1;
                    }
                }
            }
            let n = (trials * rows) as f64;
            let support = p0.iter().filter(|&&q| q > 0.0).count();
            let c0 = chi_square(&first, &p0);
            let case = format!("{on}: top_k {top_k}, draft {draft}");
            assert!(
                c0 < chi_square_critical(support - 1),
                "{case}: first token chi-square {c0}"
            );
            // The acceptance rate is p_0(draft): within 4 standard deviations.
            let pd = p0[draft as usize];
            let sd = (pd * (1.0 - pd) / n).sqrt().max(1.0 / n);
            assert!(
                (accepted as f64 / n - pd).abs() < 4.0 * sd,
                "{case}: accepted {accepted} of {n}, p(draft) {pd}"
            );
            if accepted >= 200 {
                let support = p1.iter().filter(|&&q| q > 0.0).count();
                let c1 = chi_square(&second, &p1);
                assert!(
                    c1 < chi_square_critical(support - 1),
                    "{case}: bonus token chi-square {c1}"
                );
            }
        }
    }
}

// Sampling through the driver.

/// The target's distribution of the next token after `context` at temperature `t` and top-k,
/// from the model's logits on the oracle.
fn next_token_distribution(
    handle: &ModelHandle,
    context: &[u32],
    t: f64,
    top_k: usize,
) -> Vec<f64> {
    let shape = poot_models::StepShape::new(1, context.len(), 64);
    let graph = handle
        .model()
        .trace(
            &poot_models::StepSpec::step(shape),
            TraceLimits::standard(64),
        )
        .unwrap();
    let mut oracle = common::oracle::Oracle::new(handle);
    let ids: Vec<i32> = context.iter().map(|&t| t as i32).collect();
    let logits = oracle.step(&graph, &ids, 0);
    target_distribution(&logits, t, top_k)
}

#[test]
fn sampled_generation_with_a_draft_model_follows_the_target_distribution() {
    // Each request samples two tokens; the second comes from a verification step (the
    // perturbed draft always proposes one). Among requests whose first token is the most
    // common one, the second must follow the target's conditional distribution: Pearson's
    // chi-square below its p = 0.001 critical value over the top-k support.
    let handle = load(&tiny_chat_dir());
    let draft_handle = load(&perturbed_draft());
    let prompt = prompts()[0].clone();
    let (temperature, top_k) = (1.0f32, 4u32);
    let rows = 16;
    let speculation = Speculation {
        tokens: 2,
        lookup: None,
    };
    let options = DriverOptions::new(64, 4)
        .with_rows(rows)
        .with_speculation(speculation);
    let mut driver = serve(&handle, OracleExecutor::boxed(), options, PAGED);
    let draft = serve(
        &draft_handle,
        OracleExecutor::boxed(),
        DriverOptions::new(64, 4).with_rows(rows),
        PAGED,
    );
    driver.attach_draft(draft).unwrap();
    let mut pairs: HashMap<(u32, u32), u64> = HashMap::new();
    let requests = 1200;
    for batch in 0..requests / rows {
        let ids: Vec<SeqId> = (0..rows)
            .map(|r| {
                let seed = (batch * rows + r) as u64;
                let req = GenerateRequest {
                    ignore_eos: true,
                    ..GenerateRequest::new(
                        prompt.clone(),
                        3,
                        Sampler::new(temperature, top_k, 1.0, seed),
                    )
                };
                driver.open(req).unwrap()
            })
            .collect();
        let mut tokens: HashMap<SeqId, Vec<u32>> = HashMap::new();
        let mut done = 0;
        while done < ids.len() {
            let picks = driver.step().unwrap();
            for event in driver.commit(picks).unwrap() {
                tokens
                    .entry(event.id)
                    .or_default()
                    .extend(event.tokens.iter().map(|t| t.id));
                done += usize::from(event.finish.is_some());
            }
        }
        for id in ids {
            let t = &tokens[&id];
            pairs
                .entry((t[0], t[1]))
                .and_modify(|n| *n += 1)
                .or_insert(1);
            driver.release(id);
        }
    }
    let stats = driver.spec_stats();
    assert!(stats.verified_rows >= requests as u64, "{stats:?}");
    let mut by_first: HashMap<u32, u64> = HashMap::new();
    for (&(a, _), &n) in &pairs {
        *by_first.entry(a).or_default() += n;
    }
    let (&mode, &n_mode) = by_first.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(n_mode >= 300, "{n_mode} requests start with {mode}");
    let mut context = prompt.clone();
    context.push(mode);
    let p = next_token_distribution(&handle, &context, temperature as f64, top_k as usize);
    let mut counts = vec![0u64; p.len()];
    for (&(a, b), &n) in &pairs {
        if a == mode {
            counts[b as usize] += n;
        }
    }
    let c = chi_square(&counts, &p);
    assert!(
        c < chi_square_critical(top_k as usize - 1),
        "second-token chi-square {c} over {n_mode} requests"
    );
}
