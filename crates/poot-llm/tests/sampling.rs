//! The sampling suffix's heads over fixed logits, on the CPU oracle and on the wgpu backend
//! (lavapipe in CI), against a host reference written here in f64: logit bias and the
//! repetition, presence and frequency penalties move the arg-max exactly as the host computes,
//! draws under them follow the host's distribution, log-probabilities match the host's
//! log-softmax, the token history follows the tokens each step feeds (prompt or output, row by
//! row) until a reset, and non-finite logits still raise the flag.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_executor::{
    ConstBytes, ConstSource, EntryId, ExecutableId, Executor, StepInputs, StepOutputs,
};
use poot_graph_ir::{Builder, DType, Graph, Outputs, Slot, Storage, TensorType, TraceLimits};
use poot_llm::sampling::{
    Head, MAX_TOP_LOGPROBS, Pick, RowSampling, append_head, bind_slots, read_picks,
};
use poot_llm::{BackendChoice, Penalties, Sampler, open_executor};

/// Where a suffix runs.
enum Backend {
    /// The CPU oracle: every machine.
    Oracle,
    /// A device executor and its name.
    Device(Box<dyn Executor>, &'static str),
}

/// The oracle, then the wgpu and PTX devices (or a SKIP line for each that does not open; PTX
/// opens on a GPU machine, where this test's binary is carried).
fn backends() -> Vec<Backend> {
    let mut all = vec![Backend::Oracle];
    for (choice, name) in [(BackendChoice::Wgpu, "wgpu"), (BackendChoice::Ptx, "ptx")] {
        match open_executor(choice) {
            Ok(o) => all.push(Backend::Device(o.executor, name)),
            Err(e) => eprintln!("SKIP ({name}): {e}"),
        }
    }
    all
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Oracle => "oracle",
            Backend::Device(_, name) => name,
        }
    }

    /// `head`'s suffix over fixed `[rows, vocab]` logits, for steps that feed `tokens` tokens
    /// per row, with an empty history.
    fn suffix(&mut self, logits: &[f32], rows: usize, tokens: usize, head: Head) -> Suffix<'_> {
        let vocab = logits.len() / rows;
        let limits = TraceLimits::standard(16);
        let b = Builder::new(limits);
        let l = b
            .constant("logits", TensorType::new(DType::F32, vec![rows, vocab]))
            .unwrap();
        // The token slot sets how many history tokens a row adds per step.
        b.slot(Slot::Token, TensorType::new(DType::I32, vec![rows, tokens]))
            .unwrap();
        let out = b
            .add(
                l,
                b.broadcast(b.lit_f32(0.0).unwrap(), [rows, vocab]).unwrap(),
            )
            .unwrap();
        let graph = append_head(b.finish(Outputs::new(out)).unwrap(), head, limits, rows).unwrap();
        let run = match self {
            Backend::Oracle => Runner::Oracle {
                state: zero_states(&graph),
                graph,
                logits: logits.to_vec(),
            },
            Backend::Device(exec, _) => {
                let exe = exec
                    .load_weights(Box::new(Logits(logits.to_vec())))
                    .unwrap();
                let entry = exec.add_entry(exe, &graph, "sampling suffix").unwrap();
                exec.reset_state(entry).unwrap();
                Runner::Device {
                    exec: exec.as_mut(),
                    exe,
                    entry,
                }
            }
        };
        Suffix {
            run,
            head,
            rows,
            vocab,
            tokens,
        }
    }
}

/// Runs `f` on the oracle, then on the wgpu device when there is one.
fn on_every_backend(f: impl Fn(&mut Backend)) {
    for mut backend in backends() {
        f(&mut backend);
    }
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

enum Runner<'b> {
    Device {
        exec: &'b mut dyn Executor,
        exe: ExecutableId,
        entry: EntryId,
    },
    /// The graph evaluated step by step, its carried state kept here.
    Oracle {
        graph: Graph,
        logits: Vec<f32>,
        state: Vec<(String, HostTensor<'static>)>,
    },
}

/// Every state input of `graph`, zeroed (what `reset_state` does on a device).
fn zero_states(graph: &Graph) -> Vec<(String, HostTensor<'static>)> {
    graph
        .values()
        .iter()
        .filter_map(|v| match &v.storage {
            Storage::State(name) => {
                let bytes = vec![0u8; v.ty.size_bytes().unwrap() as usize];
                Some((
                    name.clone(),
                    HostTensor::from_le_bytes(v.ty.clone(), bytes).unwrap(),
                ))
            }
            _ => None,
        })
        .collect()
}

/// A suffix over fixed logits on one backend.
struct Suffix<'b> {
    run: Runner<'b>,
    head: Head,
    rows: usize,
    vocab: usize,
    tokens: usize,
}

impl Suffix<'_> {
    /// Clears the token history.
    fn reset(&mut self) {
        match &mut self.run {
            Runner::Device { exec, entry, .. } => exec.reset_state(*entry).unwrap(),
            Runner::Oracle { graph, state, .. } => *state = zero_states(graph),
        }
    }

    fn step(&mut self, rows: &[RowSampling<'_>]) -> Vec<Pick> {
        assert_eq!(rows.len(), self.rows);
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, &vec![0; self.rows * self.tokens]);
        // Row i keeps its history in history row i.
        let rows: Vec<RowSampling<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| RowSampling {
                history_row: i,
                ..*r
            })
            .collect();
        bind_slots(&mut inputs, self.head, &rows, self.tokens, self.vocab);
        let out = match &mut self.run {
            Runner::Device { exec, entry, .. } => {
                let mut out = StepOutputs::default();
                exec.step(*entry, &inputs, &mut out).unwrap();
                out
            }
            Runner::Oracle {
                graph,
                logits,
                state,
            } => {
                let table = HostTensor::f32([self.rows, self.vocab], logits.clone()).unwrap();
                let mut bound = Inputs::new().with_const("logits", table);
                for v in graph.values() {
                    if let Storage::Slot(slot) = &v.storage {
                        let bytes = inputs.slot(slot).unwrap().to_vec();
                        let t = HostTensor::from_le_bytes(v.ty.clone(), bytes).unwrap();
                        bound.set_slot(slot.clone(), t);
                    }
                }
                for (name, t) in state.iter() {
                    bound.set_state(name.clone(), t.clone());
                }
                let done = eval(graph, &bound, EvalOptions::default())
                    .unwrap()
                    .into_owned();
                *state = done.state;
                StepOutputs {
                    values: done.outputs.iter().map(HostTensor::to_le_bytes).collect(),
                }
            }
        };
        read_picks(&out, self.head, self.rows, self.vocab).unwrap()
    }
}

impl Drop for Suffix<'_> {
    fn drop(&mut self) {
        if let Runner::Device { exec, exe, .. } = &mut self.run {
            exec.unload(*exe);
        }
    }
}

/// One row's history as the host keeps it: every token of the sequence, and the output alone.
#[derive(Clone)]
struct History {
    seen: Vec<u32>,
    output: Vec<u32>,
}

impl History {
    fn new(vocab: usize) -> History {
        History {
            seen: vec![0; vocab],
            output: vec![0; vocab],
        }
    }

    fn feed(&mut self, tokens: &[u32], generated: bool) {
        for &t in tokens {
            self.seen[t as usize] += 1;
            if generated {
                self.output[t as usize] += 1;
            }
        }
    }
}

/// The host's adjusted logits: bias, then repetition over the whole history, then presence and
/// frequency over the output.
fn adjusted(logits: &[f32], s: &Sampler, h: &History) -> Vec<f64> {
    let mut l: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    for &(id, bias) in &s.logit_bias {
        l[id as usize] += bias as f64;
    }
    let p = s.penalties;
    for (i, x) in l.iter_mut().enumerate() {
        if h.seen[i] > 0 {
            *x = if *x > 0.0 {
                *x / p.repetition as f64
            } else {
                *x * p.repetition as f64
            };
        }
        let count = h.output[i] as f64;
        *x -= count * p.frequency as f64 + if count > 0.0 { p.presence as f64 } else { 0.0 };
    }
    l
}

/// The first index of the largest value.
fn argmax(x: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Log-softmax of `x / t`, in f64.
fn log_softmax(x: &[f64], t: f64) -> Vec<f64> {
    let z: Vec<f64> = x.iter().map(|v| v / t).collect();
    let m = z.iter().cloned().fold(f64::MIN, f64::max);
    let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    z.iter().map(|v| v - lse).collect()
}

/// Token ids by descending value, ties to the lower id.
fn ranked(x: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[b].partial_cmp(&x[a]).unwrap().then(a.cmp(&b)));
    order
}

/// Deterministic logits in [-4, 4): a linear congruential sequence.
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

/// What one step feeds row 0 and row 1, and whether it is output.
type FedStep<'a> = (&'a [u32], &'a [u32], bool);

fn row<'a>(sampler: &'a Sampler, fed: &'a [u32], generated: bool, draw: u32) -> RowSampling<'a> {
    RowSampling {
        sampler,
        draw,
        fed,
        generated,
        history_row: 0,
        fresh: false,
        mask: None,
    }
}

fn penalties(repetition: f32, presence: f32, frequency: f32) -> Penalties {
    Penalties {
        repetition,
        presence,
        frequency,
    }
}

#[test]
fn bias_and_penalties_move_the_argmax_as_the_host_computes() {
    on_every_backend(|backend| {
        let on = backend.name();
        let (rows, vocab, tokens) = (2, 40, 3);
        let mut table = logits(rows * vocab, 7);
        // Row 0: a clear leader (token 5), a negative token the repetition penalty pushes further
        // down (token 9); row 1: its own leader (token 30).
        table[5] = 6.0;
        table[9] = -2.0;
        table[vocab + 30] = 5.0;
        let mut suffix = backend.suffix(&table, rows, tokens, Head::Adjusted);
        let (row0, row1) = (&table[..vocab], &table[vocab..]);

        // Each case: row 0's and row 1's samplers, then steps of (row 0 feeds, row 1 feeds,
        // generated), checking both rows' picks after every step.
        let biased = Sampler {
            logit_bias: vec![(12, 9.5), (5, -3.0), (12, 0.5)],
            ..Sampler::greedy()
        };
        let repeat = Sampler {
            penalties: penalties(4.0, 0.0, 0.0),
            ..Sampler::greedy()
        };
        let frequent = Sampler {
            penalties: penalties(1.0, 0.5, 1.5),
            ..Sampler::greedy()
        };
        let everything = Sampler {
            penalties: penalties(1.3, 0.25, 0.75),
            logit_bias: vec![(9, 7.0), (3, 2.0)],
            ..Sampler::greedy()
        };
        let cases: [(&str, &Sampler, &Sampler, &[FedStep]); 3] = [
            (
                "bias; repetition over the prompt",
                &biased,
                &repeat,
                &[(&[1, 2, 5], &[30, 30, 4], false), (&[12], &[30], true)],
            ),
            (
                "frequency and presence over output only; bias with repetition",
                &frequent,
                &everything,
                &[
                    (&[5, 5, 5], &[9, 30, 1], false),
                    (&[5], &[30], true),
                    (&[5], &[30], true),
                    (&[], &[3], true),
                    (&[5], &[], true),
                ],
            ),
            (
                "the same samplers, rows swapped",
                &everything,
                &frequent,
                &[(&[9, 9], &[30, 30, 30], false), (&[9], &[30], true)],
            ),
        ];
        for (name, s0, s1, steps) in cases {
            let name = format!("{on}: {name}");
            suffix.reset();
            let mut h = [History::new(vocab), History::new(vocab)];
            let mut moved = false;
            for (k, &(fed0, fed1, generated)) in steps.iter().enumerate() {
                h[0].feed(fed0, generated);
                h[1].feed(fed1, generated);
                let picks =
                    suffix.step(&[row(s0, fed0, generated, 0), row(s1, fed1, generated, 0)]);
                for (r, (s, logits)) in [(s0, row0), (s1, row1)].into_iter().enumerate() {
                    let want = adjusted(logits, s, &h[r]);
                    let best = argmax(&want);
                    // The margin to the runner-up is far above f32 rounding.
                    let second = ranked(&want)[1];
                    assert!(want[best] - want[second] > 1e-3, "{name}: near tie");
                    assert_eq!(picks[r].token, best as i32, "{name}: step {k}, row {r}");
                    assert!(!picks[r].non_finite, "{name}");
                    assert!(picks[r].logprobs.is_none());
                    let plain = argmax(&logits.iter().map(|&x| x as f64).collect::<Vec<_>>());
                    moved |= best != plain;
                }
            }
            assert!(moved, "{name}: the case never moves the arg-max");
        }
    });
}

#[test]
fn the_history_follows_the_fed_tokens_until_a_reset() {
    on_every_backend(|backend| {
        let on = backend.name();
        let vocab = 16;
        // Tokens 0..4 lead by 1 each: each output occurrence of a token costs it 1.1, so the pick
        // walks down the ranking as the picks are fed back.
        let mut table = vec![-1.0f32; vocab];
        for (i, x) in table.iter_mut().take(4).enumerate() {
            *x = 10.0 - i as f32;
        }
        let s = Sampler {
            penalties: penalties(1.0, 0.0, 1.1),
            ..Sampler::greedy()
        };
        let mut suffix = backend.suffix(&table, 1, 4, Head::Adjusted);
        let mut run = |prompt: &[u32]| -> Vec<i32> {
            suffix.reset();
            // A prefill chunk: prompt tokens never count as output.
            let mut pick = suffix.step(&[row(&s, prompt, false, 0)])[0].token;
            let mut picks = vec![pick];
            for draw in 1..6 {
                let fed = [pick as u32];
                pick = suffix.step(&[row(&s, &fed, true, draw)])[0].token;
                picks.push(pick);
            }
            picks
        };
        // Host: 0, 1, 0, 2, 1, 0. Had the prompt counted as output, token 0 would start at 6.7 and
        // the first pick would be 2.
        let mut h = History::new(vocab);
        h.feed(&[0, 0, 0, 1], false);
        let mut want = Vec::new();
        for _ in 0..6 {
            let pick = argmax(&adjusted(&table, &s, &h));
            want.push(pick as i32);
            h.feed(&[pick as u32], true);
        }
        let first = run(&[0, 0, 0, 1]);
        assert_eq!(first, want, "{on}");
        assert!(first.iter().collect::<std::collections::HashSet<_>>().len() > 2);
        // A reset clears the history: the same run again gives the same picks.
        assert_eq!(run(&[0, 0, 0, 1]), want);
    });
}

/// Counts `n` draws of `s` after the history `fed` (as prompt), one seed per draw.
fn draws(backend: &mut Backend, logits: &[f32], s: &Sampler, fed: &[u32], n: u32) -> Vec<usize> {
    let mut suffix = backend.suffix(logits, 1, fed.len().max(1), Head::Adjusted);
    suffix.step(&[row(s, fed, false, 0)]);
    let mut counts = vec![0; logits.len()];
    for k in 0..n {
        let seeded = Sampler {
            seed: k as u64 * 7919 + 1,
            ..s.clone()
        };
        // Nothing fed: the history stays as the first step left it.
        let pick = &suffix.step(&[row(&seeded, &[], false, 1)])[0];
        assert!(!pick.non_finite);
        counts[pick.token as usize] += 1;
    }
    counts
}

/// The host's distribution for `s` over adjusted logits `x` (top-k, top-p and min-p as the
/// suffix documents them).
fn distribution(x: &[f64], s: &Sampler) -> Vec<f64> {
    let lp = log_softmax(x, s.temperature as f64);
    let p: Vec<f64> = lp.iter().map(|v| v.exp()).collect();
    let order = ranked(&p);
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
fn draws_under_penalties_follow_the_host_distribution() {
    on_every_backend(|backend| {
        let on = backend.name();
        let table = [2.0f32, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0];
        let fed = [0u32, 0, 3];
        let n = 600;
        let cases = [
            (
                "repetition 2 and bias, temperature 1",
                Sampler {
                    temperature: 1.0,
                    penalties: penalties(2.0, 0.0, 0.0),
                    logit_bias: vec![(7, 3.0)],
                    ..Sampler::greedy()
                },
            ),
            (
                "repetition 1.5, temperature 0.7, top-k 4",
                Sampler {
                    temperature: 0.7,
                    top_k: 4,
                    penalties: penalties(1.5, 0.0, 0.0),
                    ..Sampler::greedy()
                },
            ),
            (
                "bias, top-p 0.8",
                Sampler {
                    temperature: 1.0,
                    top_p: 0.8,
                    penalties: penalties(1.2, 0.0, 0.0),
                    logit_bias: vec![(5, 2.0), (1, -1.0)],
                    ..Sampler::greedy()
                },
            ),
        ];
        let mut h = History::new(table.len());
        h.feed(&fed, false);
        for (name, s) in cases {
            let name = format!("{on}: {name}");
            let counts = draws(backend, &table, &s, &fed, n);
            let want = distribution(&adjusted(&table, &s, &h), &s);
            for (i, (&c, &p)) in counts.iter().zip(&want).enumerate() {
                let f = c as f64 / n as f64;
                if p == 0.0 {
                    assert_eq!(c, 0, "{name}: token {i} drawn {c} times but excluded");
                } else {
                    // Within 5 standard errors of the host's probability.
                    let se = (p * (1.0 - p) / n as f64).sqrt();
                    assert!(
                        (f - p).abs() <= 5.0 * se + 1e-9,
                        "{name}: token {i}: frequency {f:.3}, expected {p:.3}"
                    );
                }
            }
        }
    });
}

/// Asserts one row's log-probability record against the host's log-softmax of `x` at `t`.
fn assert_logprobs(name: &str, pick: &Pick, x: &[f64], t: f64) {
    const TOLERANCE: f64 = 1e-4;
    let lp = log_softmax(x, t);
    let (chosen, top) = pick.logprobs.as_ref().unwrap();
    let token = pick.token as usize;
    assert!(
        (*chosen as f64 - lp[token]).abs() <= TOLERANCE,
        "{name}: chosen {token}: {chosen} against {}",
        lp[token]
    );
    let want = ranked(&lp);
    assert_eq!(top.len(), MAX_TOP_LOGPROBS.min(x.len()), "{name}");
    for (k, (&(id, v), &w)) in top.iter().zip(&want).enumerate() {
        assert_eq!(id, w as i32, "{name}: rank {k}");
        assert!(
            (v as f64 - lp[w]).abs() <= TOLERANCE,
            "{name}: rank {k}: {v} against {}",
            lp[w]
        );
    }
}

#[test]
fn logprobs_are_the_host_log_softmax_of_the_adjusted_logits() {
    on_every_backend(|backend| {
        let on = backend.name();
        let (rows, vocab) = (2, 300);
        let mut table = logits(rows * vocab, 11);
        // Exact ties among the leaders: the record lists the lower id first.
        for i in [17, 40, 41, 250] {
            table[i] = 4.5;
        }
        table[vocab + 100] = 4.25;
        table[vocab + 7] = 4.25;
        let mut suffix = backend.suffix(&table, rows, 2, Head::Logprobs);
        let greedy = Sampler::greedy();
        let hot = Sampler {
            temperature: 0.7,
            top_k: 5,
            seed: 3,
            penalties: penalties(1.4, 0.3, 0.6),
            logit_bias: vec![(299, 6.0), (17, -0.5)],
            ..Sampler::greedy()
        };
        let mut h = [History::new(vocab), History::new(vocab)];
        let steps: [FedStep; 3] = [
            (&[40, 3], &[100, 100], false),
            (&[41], &[7], true),
            (&[41], &[100], true),
        ];
        for (k, (fed0, fed1, generated)) in steps.into_iter().enumerate() {
            h[0].feed(fed0, generated);
            h[1].feed(fed1, generated);
            // Row 0 greedy (log-probabilities at temperature 1), row 1 sampled at 0.7.
            let picks = suffix.step(&[
                row(&greedy, fed0, generated, k as u32),
                row(&hot, fed1, generated, k as u32),
            ]);
            let x0 = adjusted(&table[..vocab], &greedy, &h[0]);
            assert_eq!(picks[0].token, argmax(&x0) as i32);
            assert_logprobs(&format!("{on}: greedy row, step {k}"), &picks[0], &x0, 1.0);
            let x1 = adjusted(&table[vocab..], &hot, &h[1]);
            assert!(ranked(&x1)[..5].contains(&(picks[1].token as usize)));
            assert_logprobs(&format!("{on}: sampled row, step {k}"), &picks[1], &x1, 0.7);
        }
        drop(suffix);

        // A vocabulary smaller than the record: every token, ranked. Repetition halves token 2's
        // positive logit and doubles token 1's negative one, so token 3 leads.
        let small = [0.5f32, -1.0, 2.0, 1.5, 0.0];
        let mut suffix = backend.suffix(&small, 1, 2, Head::Logprobs);
        let repeat = Sampler {
            penalties: penalties(2.0, 0.0, 0.0),
            ..Sampler::greedy()
        };
        let picks = suffix.step(&[row(&repeat, &[1, 2], false, 0)]);
        let mut h = History::new(small.len());
        h.feed(&[1, 2], false);
        let x = adjusted(&small, &repeat, &h);
        assert_eq!(x, [0.5, -2.0, 1.0, 1.5, 0.0]);
        assert_eq!(picks[0].token, 3);
        assert_logprobs(&format!("{on}: five tokens"), &picks[0], &x, 1.0);
    });
}

#[test]
fn non_finite_logits_raise_the_flag_on_every_head() {
    on_every_backend(|backend| {
        let on = backend.name();
        let vocab = 8;
        let mut table = logits(3 * vocab, 5);
        table[vocab + 2] = f32::NAN;
        table[2 * vocab + 6] = f32::INFINITY;
        let s = Sampler {
            temperature: 0.8,
            penalties: penalties(1.1, 0.1, 0.1),
            logit_bias: vec![(2, 1.0)],
            ..Sampler::greedy()
        };
        for head in [Head::Greedy, Head::Sample, Head::Adjusted, Head::Logprobs] {
            let mut suffix = backend.suffix(&table, 3, 1, head);
            let r = row(&s, &[2], false, 0);
            let picks = suffix.step(&[r, r, r]);
            let flags: Vec<bool> = picks.iter().map(|p| p.non_finite).collect();
            // Rows are flagged alone: a finite row next to non-finite ones is not.
            assert_eq!(flags, [false, true, true], "{on}: {head:?}");
        }
    });
}

#[test]
fn every_head_over_a_long_vocabulary_picks_as_the_oracle() {
    // 40000 logits a row, long enough for the planner to split the reductions over each row
    // across workgroups (and not a whole number of its partitions). Row 0's leader is tied in
    // three places far apart, its runners-up in two; row 1 holds a NaN.
    let (rows, vocab) = (2, 40000);
    let mut table = logits(rows * vocab, 13);
    for i in [333, 20001, 39999] {
        table[i] = 4.5;
    }
    for i in [100, 30000] {
        table[i] = 4.25;
    }
    table[vocab + 1234] = f32::NAN;
    let greedy = Sampler::greedy();
    let top_k = Sampler::new(0.8, 20, 1.0, 5);
    let full = Sampler::new(0.9, 0, 1.0, 6);
    let biased = Sampler {
        penalties: penalties(1.5, 0.2, 0.3),
        logit_bias: vec![(7, 9.0)],
        ..Sampler::greedy()
    };
    let heads: [(Head, &Sampler); 4] = [
        (Head::Greedy, &greedy),
        (Head::Sample, &top_k),
        (Head::Sample, &full),
        (Head::Adjusted, &biased),
    ];
    let mut picks: Vec<(&str, Vec<Vec<Pick>>)> = Vec::new();
    for mut backend in backends() {
        let mut by_head = Vec::new();
        for &(head, s) in &heads {
            let mut suffix = backend.suffix(&table, rows, 1, head);
            by_head.push(suffix.step(&[row(s, &[2], false, 3), row(s, &[2], false, 3)]));
        }
        let mut suffix = backend.suffix(&table, rows, 1, Head::Logprobs);
        by_head.push(suffix.step(&[row(&greedy, &[], false, 0), row(&top_k, &[], false, 0)]));
        drop(suffix);
        picks.push((backend.name(), by_head));
    }
    let x0: Vec<f64> = table[..vocab].iter().map(|&x| x as f64).collect();
    let (_, oracle) = &picks[0];
    for (on, got) in &picks {
        // Greedy: the first of the tied leaders; on the NaN row the NaN, flagged.
        assert_eq!(got[0][0].token, 333, "{on}");
        assert_eq!(got[0][1].token, 1234, "{on}");
        assert_eq!(
            got.iter()
                .map(|p| (p[0].non_finite, p[1].non_finite))
                .collect::<Vec<_>>(),
            vec![(false, true); heads.len() + 1],
            "{on}"
        );
        // Top-k 20: one of the row's 20 most likely, the oracle's draw.
        assert!(
            ranked(&x0)[..20].contains(&(got[1][0].token as usize)),
            "{on}"
        );
        for (h, (g, o)) in got.iter().zip(oracle).enumerate() {
            assert_eq!(g[0].token, o[0].token, "{on}: head {h}, row 0");
        }
        assert_logprobs(&format!("{on}: long greedy row"), &got[4][0], &x0, 1.0);
    }
}

/// The kinds of kernel `head`'s suffix launches over `[rows, vocab]` logits, planned for the PTX
/// preset.
fn suffix_kinds(head: Head, rows: usize, vocab: usize) -> Vec<String> {
    let limits = TraceLimits::standard(16);
    let b = Builder::new(limits);
    let l = b
        .constant("logits", TensorType::new(DType::F32, vec![rows, vocab]))
        .unwrap();
    b.slot(Slot::Token, TensorType::new(DType::I32, vec![rows, 1]))
        .unwrap();
    let graph = append_head(b.finish(Outputs::new(l)).unwrap(), head, limits, rows).unwrap();
    let plan = poot_graph_plan::compile(&graph, &poot_graph_plan::Target::ptx_preset()).unwrap();
    plan.dispatches
        .iter()
        .map(|d| plan.kernels[d.kernel].kind().to_string())
        .collect()
}

#[test]
fn the_heads_reduce_a_long_vocabulary_with_many_workgroups() {
    // SmolLM2's vocabulary. The greedy head: the arg-max and the non-finite flag share one
    // split reduction (many workgroups, then one per row to combine), then the record (3
    // launches, as many as when the arg-max was one workgroup and the flag another).
    let greedy = suffix_kinds(Head::Greedy, 1, 49152);
    println!("greedy: {}", greedy.join(" "));
    assert_eq!(greedy, ["reduce_split", "reduce_combine", "map"]);
    // The sampling heads: the flag, the greedy and the unrestricted arg-max and the maximum
    // under the softmax share one split reduction, the softmax's sum another (it reads the
    // maximum), the 32 candidates a split top-k. Sample launches two kernels more than with
    // one workgroup per reduction (whose softmax sum ran inside its reader). Adjusted and
    // Logprobs launch 27 and 28: their history's one-hot counts (a sum over the step's few
    // tokens) are summed where the penalties read them, not by a kernel of their own, and
    // their independent history scatters share a kernel.
    for (head, total) in [
        (Head::Sample, 17),
        (Head::Adjusted, 27),
        (Head::Logprobs, 28),
    ] {
        let kinds = suffix_kinds(head, 1, 49152);
        println!("{head:?}: {} launches: {}", kinds.len(), kinds.join(" "));
        let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
        assert_eq!(count("reduce_split"), 2, "{head:?}");
        assert_eq!(count("top_k_split"), 1, "{head:?}");
        // One-workgroup reductions remain only over the 32 candidates.
        assert_eq!(count("argmax") + count("top_k"), 1, "{head:?}");
        assert_eq!(kinds.len(), total, "{head:?}");
    }
}

/// Row `r`'s mask allowing exactly `allowed` of a vocabulary of `vocab`.
fn mask_of(vocab: usize, allowed: &[u32]) -> Vec<u32> {
    let mut words = vec![0u32; poot_llm::sampling::mask_words(vocab)];
    for &t in allowed {
        words[t as usize / 32] |= 1 << (t % 32);
    }
    words
}

#[test]
fn a_masked_row_never_picks_a_disallowed_token() {
    // The oracle, wgpu when it opens, and the CPU device (kernels compiled by `cc`).
    let mut all = backends();
    match open_executor(BackendChoice::Cpu) {
        Ok(o) => all.push(Backend::Device(o.executor, "cpu")),
        Err(e) => eprintln!("SKIP (cpu): {e}"),
    }
    // Two rows over 100 tokens (four mask words, the last partly used): row 0 allows a few
    // unlikely tokens in several words, row 1 is unconstrained (no mask: all ones).
    let (rows, vocab) = (2, 100);
    let mut table = logits(rows * vocab, 21);
    // Row 0's most likely tokens are all disallowed; a bias on a disallowed one does not help.
    for t in [3usize, 40, 64] {
        table[t] = 30.0;
    }
    let allowed = [1u32, 33, 70, 97, 99];
    let mask = mask_of(vocab, &allowed);
    let samplers = [
        ("greedy", Sampler::greedy()),
        ("temperature 1.5", Sampler::new(1.5, 0, 1.0, 3)),
        ("top-k 8", Sampler::new(1.0, 8, 1.0, 4)),
        ("top-k 32, top-p 1", Sampler::new(2.0, 32, 1.0, 5)),
        ("top-p 0.9", Sampler::new(1.0, 0, 0.9, 6)),
        ("min-p 0.05", {
            let mut s = Sampler::new(0.7, 0, 1.0, 7);
            s.min_p = 0.05;
            s
        }),
        ("bias on a disallowed token", {
            let mut s = Sampler::new(1.0, 0, 1.0, 8);
            s.logit_bias = vec![(5, 50.0), (33, 0.5)];
            s
        }),
    ];
    for mut backend in all {
        let on = backend.name();
        for head in [Head::Adjusted, Head::Logprobs] {
            let mut suffix = backend.suffix(&table, rows, 1, head);
            for (name, s) in &samplers {
                let mut seen = std::collections::BTreeSet::new();
                for draw in 0..40 {
                    let seeded = Sampler {
                        seed: s.seed.wrapping_mul(1000) + draw as u64,
                        ..s.clone()
                    };
                    let masked = RowSampling {
                        mask: Some(&mask),
                        ..row(&seeded, &[], false, draw)
                    };
                    let free = row(&seeded, &[], false, draw);
                    let picks = suffix.step(&[masked, free]);
                    assert!(!picks[0].non_finite && !picks[1].non_finite, "{on} {name}");
                    let t = picks[0].token as u32;
                    assert!(allowed.contains(&t), "{on} {head:?} {name}: picked {t}");
                    seen.insert(t);
                    // The unconstrained row still takes its leaders (no mask reached it).
                    if s.temperature == 0.0 {
                        let best = (0..vocab)
                            .max_by(|&a, &b| {
                                table[vocab + a]
                                    .total_cmp(&table[vocab + b])
                                    .then(b.cmp(&a))
                            })
                            .unwrap();
                        assert_eq!(picks[1].token as usize, best, "{on} {name}");
                    }
                    if let Some((lp, top)) = &picks[0].logprobs {
                        // The chosen token's log-probability is over the allowed tokens only.
                        assert!(*lp <= 0.0 && *lp > -60.0, "{on} {name}: logprob {lp}");
                        for &(id, lp) in top.iter().take(allowed.len()) {
                            assert!(allowed.contains(&(id as u32)), "{on} {name}: top {id}");
                            assert!(lp > -60.0, "{on} {name}: top {id} at {lp}");
                        }
                    }
                }
                if s.temperature == 0.0 {
                    // Greedy: the allowed token with the highest logit.
                    let best = *allowed
                        .iter()
                        .max_by(|&&a, &&b| table[a as usize].total_cmp(&table[b as usize]))
                        .unwrap();
                    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [best], "{on} {name}");
                } else if s.top_k == 0 && s.top_p >= 1.0 && s.min_p == 0.0 {
                    // An unrestricted draw at a high temperature reaches more than one.
                    assert!(seen.len() > 1, "{on} {head:?} {name}: {seen:?}");
                }
            }
        }
    }
}

/// The suffix's counter hash of (seed column, draw, token index, salt), as the host computes
/// it, and its inverse in the seed: the seed whose hash at (`draw`, `index`, `salt`) is
/// `want`.
mod draw_hash {
    const INDEX: u32 = 0x9E37_79B1;
    const STEP: u32 = 0x85EB_CA77;
    const MIX1: u32 = 0x85EB_CA6B;
    const MIX2: u32 = 0xC2B2_AE35;

    pub fn hash(seed: u32, draw: u32, index: u32, salt: u32) -> u32 {
        let mut x = index.wrapping_mul(INDEX) ^ seed;
        x ^= draw.wrapping_add(salt).wrapping_mul(STEP);
        x = (x ^ (x >> 16)).wrapping_mul(MIX1);
        x = (x ^ (x >> 13)).wrapping_mul(MIX2);
        x ^ (x >> 16)
    }

    /// The inverse of an odd multiplier modulo 2^32 (Newton's iteration).
    fn inverse(a: u32) -> u32 {
        let mut x = a;
        for _ in 0..5 {
            x = x.wrapping_mul(2u32.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    }

    /// The inverse of `x ^= x >> shift`.
    fn unshift(y: u32, shift: u32) -> u32 {
        let mut x = y;
        for _ in 0..32 / shift {
            x = y ^ (x >> shift);
        }
        x
    }

    pub fn seed_for(want: u32, draw: u32, index: u32, salt: u32) -> u32 {
        let mut x = unshift(want, 16);
        x = unshift(x.wrapping_mul(inverse(MIX2)), 13);
        x = unshift(x.wrapping_mul(inverse(MIX1)), 16);
        let seed = x ^ index.wrapping_mul(INDEX) ^ draw.wrapping_add(salt).wrapping_mul(STEP);
        assert_eq!(hash(seed, draw, index, salt), want);
        seed
    }
}

#[test]
fn a_draw_at_the_top_of_the_uniform_range_keeps_to_the_distribution_and_the_mask() {
    // A hash of all ones is the largest uniform a draw can get. Its Gumbel noise must stay
    // finite: were it +inf, its token would win whatever its logit, and through any mask.
    let mut all = backends();
    match open_executor(BackendChoice::Cpu) {
        Ok(o) => all.push(Backend::Device(o.executor, "cpu")),
        Err(e) => eprintln!("SKIP (cpu): {e}"),
    }
    let (rows, vocab, draw) = (2, 100, 3);
    let lowly = 7u32;
    let mut table = logits(rows * vocab, 5);
    // Row 1 holds token 7 far below the rest: an honest draw never reaches it.
    table[vocab + lowly as usize] = -60.0;
    let allowed = [1u32, 33, 70, 97, 99];
    let mask = mask_of(vocab, &allowed);
    // Unrestricted draws read salt 0 at the token's index; restricted ones salt 0x5EED at the
    // candidate's rank (row 0's disallowed tokens rank after its five allowed ones).
    let full_seed = draw_hash::seed_for(u32::MAX, draw, lowly, 0);
    let rank_seed = draw_hash::seed_for(u32::MAX, draw, allowed.len() as u32 + 2, 0x5EED);
    let samplers = [
        (
            "unrestricted",
            Sampler::new(1.0, 0, 1.0, u64::from(full_seed)),
        ),
        ("top-k 32", Sampler::new(1.0, 32, 1.0, u64::from(rank_seed))),
    ];
    for mut backend in all {
        let on = backend.name();
        for head in [Head::Adjusted, Head::Logprobs] {
            let mut suffix = backend.suffix(&table, rows, 1, head);
            for (name, s) in &samplers {
                let masked = RowSampling {
                    mask: Some(&mask),
                    ..row(s, &[], false, draw)
                };
                let picks = suffix.step(&[masked, row(s, &[], false, draw)]);
                assert!(!picks[0].non_finite && !picks[1].non_finite, "{on} {name}");
                let t = picks[0].token as u32;
                assert!(allowed.contains(&t), "{on} {head:?} {name}: picked {t}");
                if s.top_k == 0 {
                    assert_ne!(picks[1].token as u32, lowly, "{on} {head:?} {name}");
                }
            }
        }
    }
}
