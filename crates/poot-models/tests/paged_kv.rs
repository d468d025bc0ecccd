//! The paged KV layout on the CPU oracle, for every decoder fixture family: prefill and decode
//! through a shuffled, non-contiguous block table give the contiguous layout's logits bit for bit,
//! with two sequences of different lengths in the rows of one step, entries of different row
//! counts sharing one pool, chunked and left-padded prefill, and a prompt block reused by a
//! second sequence (a prefix cache hit). Bad tables are typed faults, bad geometry a typed
//! trace error.
//!
//! Why bit for bit: the gathered cache holds, at every position a token sees, the very values
//! the contiguous cache holds there; masked positions get probability exactly zero, and the
//! oracle computes each output element in the same order whatever the step's row or token
//! count.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use poot_eval::{EvalError, EvalOptions, Fault, HostTensor, eval};
use poot_graph_ir::{Slot, TraceLimits};
use poot_models::schema::StepInput;
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::{KvLayout, ModelKind, Program, StepShape, StepSpec, TraceError};

const CAPACITY: usize = 32;
const BLOCK: usize = 4;
const BLOCKS: usize = 24;
/// The reserved block padding tokens write to; never in a table at a visible position.
const SCRATCH: i32 = BLOCKS as i32 - 1;
const PAGED: KvLayout = KvLayout::Paged {
    block_tokens: BLOCK,
    blocks: BLOCKS,
};
const PAD: i32 = 0;

/// One row of a paged step: its tokens (padding included), positions, table and write map.
struct Row {
    tokens: Vec<i32>,
    pos: Vec<i32>,
    table: Vec<i32>,
    write: Vec<i32>,
}

/// `real` tokens at positions `start..`, left-padded to `width` tokens, over `table`.
fn row(real: &[i32], start: usize, width: usize, table: &[i32]) -> Row {
    let pad = width - real.len();
    let mut r = Row {
        tokens: vec![PAD; pad],
        pos: vec![0; pad],
        table: table.to_vec(),
        write: vec![SCRATCH * BLOCK as i32; pad],
    };
    for (i, &t) in real.iter().enumerate() {
        let p = start + i;
        r.tokens.push(t);
        r.pos.push(p as i32);
        r.write
            .push(table[p / BLOCK] * BLOCK as i32 + (p % BLOCK) as i32);
    }
    r
}

/// The paged pool of one model on the oracle, shared by every step shape.
struct Pool<'m> {
    loaded: &'m Loaded,
    states: Vec<(String, HostTensor<'static>)>,
}

impl<'m> Pool<'m> {
    fn new(loaded: &'m Loaded) -> Pool<'m> {
        Pool {
            loaded,
            states: Vec::new(),
        }
    }

    /// Runs one paged step over `rows`; returns each row's last-token logits.
    fn step(&mut self, rows: &[Row]) -> Result<Vec<Vec<f32>>, EvalError> {
        let (n, t) = (rows.len(), rows[0].tokens.len());
        let shape = StepShape::new(n, t, CAPACITY).with_kv(PAGED);
        let graph = self
            .loaded
            .model
            .trace(&StepSpec::step(shape), TraceLimits::standard(4096))
            .unwrap();
        let mut inputs = bind_weights(&graph, self.loaded);
        let flat = |f: &dyn Fn(&Row) -> &Vec<i32>| -> Vec<i32> {
            rows.iter().flat_map(|r| f(r).iter().copied()).collect()
        };
        let nb = CAPACITY / BLOCK;
        inputs.set_slot(
            Slot::Token,
            HostTensor::i32([n, t], flat(&|r| &r.tokens)).unwrap(),
        );
        inputs.set_slot(
            Slot::Pos,
            HostTensor::i32([n, t], flat(&|r| &r.pos)).unwrap(),
        );
        inputs.set_slot(
            Slot::SlotMap,
            HostTensor::i32([n, nb], flat(&|r| &r.table)).unwrap(),
        );
        inputs.set_slot(
            Slot::WriteMap,
            HostTensor::i32([n, t], flat(&|r| &r.write)).unwrap(),
        );
        // A failed step leaves the pool empty (the fault tests use a fresh pool).
        let prev = std::mem::take(&mut self.states);
        for (_, name, ty) in graph.states() {
            let value = match prev.iter().find(|(s, _)| s == name) {
                Some((_, v)) => v.view(),
                None => zeros(ty),
            };
            inputs.set_state(name, value);
        }
        let out = eval(&graph, &inputs, EvalOptions::default())?;
        self.states = out.state.clone();
        let logits = out.outputs[0].to_f32_vec().unwrap();
        let vocab = logits.len() / n;
        Ok(logits.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// The pool's slots `slots` of every state, to check a block was left untouched.
    fn snapshot(&self, slots: std::ops::Range<usize>) -> Vec<Vec<f32>> {
        self.states
            .iter()
            .map(|(_, v)| {
                let all = v.to_f32_vec().unwrap();
                let per_slot = all.len() / (BLOCKS * BLOCK);
                all[slots.start * per_slot..slots.end * per_slot].to_vec()
            })
            .collect()
    }
}

/// A sequence's contiguous-layout run: the last-token logits after its prefill and after each of
/// `decode` greedy steps, and the tokens it fed.
struct Reference {
    logits: Vec<Vec<f32>>,
    fed: Vec<i32>,
}

fn contiguous(loaded: &Loaded, prompt: &[i32], decode: usize) -> Reference {
    let mut s = OracleSession::new(loaded, 1, CAPACITY);
    let (l, _) = s.step(
        &[prompt.to_vec()],
        &[0],
        StepShape::new(1, prompt.len(), CAPACITY),
    );
    let mut logits = vec![l];
    let mut fed = Vec::new();
    for i in 0..decode {
        let next = argmax(logits.last().unwrap()) as i32;
        fed.push(next);
        let (l, _) = s.step(
            &[vec![next]],
            &[prompt.len() + i],
            StepShape::new(1, 1, CAPACITY),
        );
        logits.push(l);
    }
    Reference { logits, fed }
}

fn same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got.iter().zip(want).filter(|(g, w)| g != w).count();
    assert_eq!(
        diff,
        0,
        "{what}: {diff} logits differ from the contiguous layout (max |d| {})",
        got.iter()
            .zip(want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max)
    );
}

fn decoders() -> Vec<(&'static str, Loaded)> {
    FIXTURES
        .iter()
        .map(|f| (f.family, load(&f.path())))
        .filter(|(_, l)| l.model.config().kind == ModelKind::Decoder)
        .collect()
}

const PROMPT_A: [i32; 6] = [5, 17, 99, 3, 42, 7];
const PROMPT_B: [i32; 3] = [11, 64, 2];
const DECODE: usize = 4;
/// Shuffled, non-contiguous tables of the two sequences (8 blocks cover the capacity; the
/// entries past a sequence's length are never visible).
const TABLE_A: [i32; 8] = [13, 2, 9, 20, 4, 17, 6, 11];
const TABLE_B: [i32; 8] = [8, 21, 0, 15, 3, 19, 1, 10];

/// Decodes both sequences together in a two-row decode entry from their prefilled pool state,
/// comparing each row's logits with its contiguous reference.
fn decode_two_rows(pool: &mut Pool, a: &Reference, b: &Reference, family: &str, how: &str) {
    for i in 0..DECODE {
        let rows = [
            row(&[a.fed[i]], PROMPT_A.len() + i, 1, &TABLE_A),
            row(&[b.fed[i]], PROMPT_B.len() + i, 1, &TABLE_B),
        ];
        let got = pool.step(&rows).unwrap();
        same(
            &got[0],
            &a.logits[i + 1],
            &format!("{family} {how}: A decode {i}"),
        );
        same(
            &got[1],
            &b.logits[i + 1],
            &format!("{family} {how}: B decode {i}"),
        );
    }
}

#[test]
fn paged_steps_equal_the_contiguous_layout_bit_for_bit() {
    for (family, loaded) in decoders() {
        let a = contiguous(&loaded, &PROMPT_A, DECODE);
        let b = contiguous(&loaded, &PROMPT_B, DECODE);

        // One-row prefill entries (A in one step, B in a chunk of 2 then a left-padded
        // chunk), then a two-row decode entry, all over one pool.
        let mut pool = Pool::new(&loaded);
        let got = pool.step(&[row(&PROMPT_A, 0, 6, &TABLE_A)]).unwrap();
        same(
            &got[0],
            &a.logits[0],
            &format!("{family}: A one-row prefill"),
        );
        pool.step(&[row(&PROMPT_B[..2], 0, 2, &TABLE_B)]).unwrap();
        let got = pool.step(&[row(&PROMPT_B[2..], 2, 2, &TABLE_B)]).unwrap();
        same(
            &got[0],
            &b.logits[0],
            &format!("{family}: B chunked prefill"),
        );
        decode_two_rows(&mut pool, &a, &b, family, "one-row prefills");

        // Both prompts in the rows of one prefill step (B left-padded to A's length), then the
        // same two-row decode.
        let mut pool = Pool::new(&loaded);
        let got = pool
            .step(&[
                row(&PROMPT_A, 0, 6, &TABLE_A),
                row(&PROMPT_B, 0, 6, &TABLE_B),
            ])
            .unwrap();
        same(
            &got[0],
            &a.logits[0],
            &format!("{family}: A in a two-row prefill"),
        );
        same(
            &got[1],
            &b.logits[0],
            &format!("{family}: B in a two-row prefill"),
        );
        decode_two_rows(&mut pool, &a, &b, family, "two-row prefill");

        // Chunks that cross block boundaries, each chunk left-padded to 4 tokens.
        let mut pool = Pool::new(&loaded);
        pool.step(&[row(&PROMPT_A[..3], 0, 4, &TABLE_A)]).unwrap();
        let got = pool.step(&[row(&PROMPT_A[3..], 3, 4, &TABLE_A)]).unwrap();
        same(&got[0], &a.logits[0], &format!("{family}: A padded chunks"));
        for i in 0..DECODE {
            let got = pool
                .step(&[row(&[a.fed[i]], PROMPT_A.len() + i, 1, &TABLE_A)])
                .unwrap();
            same(
                &got[0],
                &a.logits[i + 1],
                &format!("{family}: A decode {i} after chunks"),
            );
        }
    }
}

/// Sequence C shares A's first two blocks (8 prompt tokens): it writes only its own tail and
/// reads A's blocks through its table. Its logits equal a run that wrote every block itself, A's
/// shared blocks are untouched, and A decodes on unchanged.
#[test]
fn a_shared_prefix_block_is_read_not_rewritten() {
    let prefix = [5, 17, 99, 3, 42, 7, 8, 30];
    let prompt_a: Vec<i32> = prefix.iter().copied().chain([61, 12]).collect();
    let prompt_c: Vec<i32> = prefix.iter().copied().chain([40, 2, 77]).collect();
    let table_c = [TABLE_A[0], TABLE_A[1], 5, 14, 7, 12, 16, 18];
    let own_c = [22, 5, 14, 7, 12, 16, 18, 1];
    for (family, loaded) in decoders() {
        let a = contiguous(&loaded, &prompt_a, DECODE);
        let c = contiguous(&loaded, &prompt_c, DECODE);

        // C alone, writing every block of its own.
        let mut alone = Pool::new(&loaded);
        let mut want = alone
            .step(&[row(&prompt_c, 0, prompt_c.len(), &own_c)])
            .unwrap();
        same(
            &want[0],
            &c.logits[0],
            &format!("{family}: C alone prefill"),
        );
        let mut want_decode = Vec::new();
        for i in 0..DECODE {
            want = alone
                .step(&[row(&[c.fed[i]], prompt_c.len() + i, 1, &own_c)])
                .unwrap();
            want_decode.push(want[0].clone());
        }

        // A writes the prefix; C reuses its two blocks and prefills only its tail.
        let mut pool = Pool::new(&loaded);
        pool.step(&[row(&prompt_a, 0, prompt_a.len(), &TABLE_A)])
            .unwrap();
        let shared: Vec<_> = TABLE_A[..2]
            .iter()
            .map(|&blk| pool.snapshot(blk as usize * BLOCK..(blk as usize + 1) * BLOCK))
            .collect();
        let tail = &prompt_c[prefix.len()..];
        let got = pool
            .step(&[row(tail, prefix.len(), tail.len(), &table_c)])
            .unwrap();
        same(
            &got[0],
            &c.logits[0],
            &format!("{family}: C prefill over A's blocks"),
        );
        for (i, own) in want_decode.iter().enumerate() {
            let got = pool
                .step(&[
                    row(&[a.fed[i]], prompt_a.len() + i, 1, &TABLE_A),
                    row(&[c.fed[i]], prompt_c.len() + i, 1, &table_c),
                ])
                .unwrap();
            same(
                &got[0],
                &a.logits[i + 1],
                &format!("{family}: A decode {i} beside C"),
            );
            same(
                &got[1],
                own,
                &format!("{family}: C decode {i} (shared vs own)"),
            );
            same(
                &got[1],
                &c.logits[i + 1],
                &format!("{family}: C decode {i} (contiguous)"),
            );
        }
        for (k, &blk) in TABLE_A[..2].iter().enumerate() {
            assert_eq!(
                pool.snapshot(blk as usize * BLOCK..(blk as usize + 1) * BLOCK),
                shared[k],
                "{family}: shared block {blk} changed"
            );
        }
    }
}

#[test]
fn out_of_range_tables_and_write_maps_are_typed_faults() {
    let (family, loaded) = decoders().into_iter().next().unwrap();
    let mut bad_table = TABLE_A;
    bad_table[7] = BLOCKS as i32;
    let mut r = row(&PROMPT_A, 0, 6, &TABLE_A);
    r.table = bad_table.to_vec();
    let err = Pool::new(&loaded).step(&[r]).unwrap_err();
    let EvalError::Fault { op, fault, .. } = &err else {
        panic!("{family}: {err}")
    };
    assert_eq!(*op, "gather", "{family}: {err}");
    assert!(
        matches!(**fault, Fault::IndexOutOfRange { index, bound, .. } if index == BLOCKS as i64 && bound == BLOCKS),
        "{family}: {err}"
    );

    let mut r = row(&PROMPT_A, 0, 6, &TABLE_A);
    r.write[2] = -1;
    let err = Pool::new(&loaded).step(&[r]).unwrap_err();
    let EvalError::Fault { op, fault, .. } = &err else {
        panic!("{family}: {err}")
    };
    assert_eq!(*op, "scatter_update", "{family}: {err}");
    assert!(
        matches!(**fault, Fault::IndexOutOfRange { index: -1, .. }),
        "{family}: {err}"
    );
}

#[test]
fn paged_geometry_is_checked_and_the_schema_describes_the_pool() {
    let (family, loaded) = decoders().into_iter().next().unwrap();
    for (block_tokens, blocks, capacity) in [(5, 8, 32), (0, 8, 32), (4, 0, 32)] {
        let shape = StepShape::new(1, 1, capacity).with_kv(KvLayout::Paged {
            block_tokens,
            blocks,
        });
        let err = loaded
            .model
            .trace(&StepSpec::step(shape), TraceLimits::standard(64))
            .unwrap_err();
        assert!(
            matches!(err, TraceError::PagedGeometry { .. }),
            "{family}: {err}"
        );
    }
    let shape = StepShape::new(3, 2, CAPACITY).with_kv(PAGED);
    let graph = loaded
        .model
        .trace(&StepSpec::step(shape), TraceLimits::standard(64))
        .unwrap();
    let decl = loaded.model.schema().program(Program::Step).unwrap();
    for (_, name, ty) in graph.states() {
        let d = decl.states.iter().find(|d| d.name == name).unwrap();
        assert_eq!(ty.dims(), [BLOCKS * BLOCK, d.heads, d.head_dim]);
        assert_eq!(ty.dims(), d.dims(&shape).as_slice());
    }
    let mut slots: Vec<(String, Vec<usize>)> = graph
        .slots()
        .map(|(_, s, ty)| (s.name().to_string(), ty.dims().to_vec()))
        .collect();
    slots.sort();
    let mut want: Vec<(String, Vec<usize>)> = decl
        .step_inputs_for(PAGED)
        .into_iter()
        .map(|i| {
            let dims = match i {
                StepInput::BlockTable => vec![3, CAPACITY / BLOCK],
                _ => vec![3, 2],
            };
            (i.slot_name().to_string(), dims)
        })
        .collect();
    want.sort();
    assert_eq!(slots, want, "{family}: the paged step's slots");
}
