//! The paged KV layout on the wgpu backend (lavapipe in CI), for every decoder fixture family:
//! one-row prefill entries and a two-row decode entry share one pool through shuffled block
//! tables, with a left-padded prompt writing its padding to the scratch block and a third
//! sequence reusing the first one's prompt block (a prefix cache hit). Every step's logits
//! equal the CPU oracle's on the same graphs and inputs within the wgpu fixture tolerance, with
//! the same greedy tokens; a block index outside the pool is a typed kernel fault. A machine
//! without a Vulkan adapter reports a skip.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_executor::{
    Backend, ConstBytes, ConstSource, Device, DeviceError, Engine, EntryId, ExecError,
    ExecutableId, Executor, StepInputs, StepOutputs, fault,
};
use poot_graph_ir::{Graph, Slot, TraceLimits};
use poot_load::{Checkpoint, LoadOptions};
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::weights::ConstData;
use poot_models::{KvLayout, Model, ModelKind, Registry, StepShape, StepSpec};
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

/// Largest |device - oracle| over the largest |oracle| logit (the wgpu fixture tolerance): the
/// device sums in another order.
const TOLERANCE: f32 = 1e-4;
const CAPACITY: usize = 32;
const BLOCK: usize = 4;
const BLOCKS: usize = 24;
const SCRATCH_SLOT: i32 = (BLOCKS as i32 - 1) * BLOCK as i32;
const PAGED: KvLayout = KvLayout::Paged {
    block_tokens: BLOCK,
    blocks: BLOCKS,
};
const PROMPT_WIDTH: usize = 6;
const DECODE: usize = 4;
const TABLE_A: [i32; 8] = [13, 2, 9, 20, 4, 17, 6, 11];
const TABLE_B: [i32; 8] = [8, 21, 0, 15, 3, 19, 1, 10];
/// C shares A's first block (its first four prompt tokens) and owns the rest.
const TABLE_C: [i32; 8] = [13, 5, 14, 7, 12, 16, 18, 22];

fn engine() -> Option<Engine<WgpuDevice>> {
    match WgpuDevice::open(WgpuOptions::default()) {
        Ok(device) => {
            let target = device.limits().target(Backend::Wgpu);
            Some(Engine::new(device, target))
        }
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            None
        }
    }
}

struct Fixture {
    checkpoint: Checkpoint,
    model: Box<dyn Model>,
}

impl Fixture {
    fn const_data(&self, name: &str) -> Option<ConstData<'_>> {
        self.model
            .weights()
            .const_data(name, self.checkpoint.store())
            .ok()
    }
}

/// The fixture's constants as the executor reads them, as stored.
struct Weights(Arc<Fixture>);

impl ConstSource for Weights {
    fn names(&self) -> Vec<String> {
        self.0
            .model
            .weights()
            .iter()
            .map(|e| e.role.const_name())
            .collect()
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        Some(match self.0.const_data(name)? {
            ConstData::Bytes(b) => ConstBytes::Stored(b.into()),
            ConstData::Gathered(b) => ConstBytes::Stored(b.into()),
            ConstData::F32(v) => ConstBytes::F32(v.into()),
            // The fixture's weights are dense: no component buffers to serve.
            ConstData::Components(_) => return None,
        })
    }
}

/// One row of a paged step: tokens (left padding included), positions, table, write map.
struct Row {
    tokens: Vec<i32>,
    pos: Vec<i32>,
    table: Vec<i32>,
    write: Vec<i32>,
}

/// `real` tokens at positions `start..`, left-padded to `width`; padding writes the scratch
/// block.
fn row(real: &[i32], start: usize, width: usize, table: &[i32]) -> Row {
    let pad = width - real.len();
    let mut r = Row {
        tokens: vec![0; pad],
        pos: vec![0; pad],
        table: table.to_vec(),
        write: vec![SCRATCH_SLOT; pad],
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

fn flat(rows: &[Row], f: impl Fn(&Row) -> &Vec<i32>) -> Vec<i32> {
    rows.iter().flat_map(|r| f(r).iter().copied()).collect()
}

/// The oracle's side: the same graphs over a carried pool.
struct Oracle<'f> {
    fixture: &'f Fixture,
    states: Vec<(String, HostTensor<'static>)>,
    /// The largest relative error seen so far.
    worst: f32,
}

impl Oracle<'_> {
    fn step(&mut self, graph: &Graph, rows: &[Row]) -> Vec<f32> {
        let (n, t) = (rows.len(), rows[0].tokens.len());
        let mut inputs = Inputs::new();
        for (_, name, ty) in graph.consts() {
            let v = match self.fixture.const_data(name).unwrap() {
                ConstData::Bytes(b) => HostTensor::from_le_bytes(ty.clone(), b).unwrap(),
                ConstData::Gathered(b) => HostTensor::from_le_bytes(ty.clone(), &b)
                    .unwrap()
                    .into_owned(),
                ConstData::F32(v) => HostTensor::f32(ty.shape.clone(), v).unwrap(),
                ConstData::Components(parts) => {
                    let poot_graph_ir::DType::Components(format) = ty.dtype else {
                        panic!("components bound to a {} constant", ty.dtype)
                    };
                    let parts = parts
                        .into_iter()
                        .map(|(role, b)| (role.to_string(), b))
                        .collect();
                    HostTensor::components(format, ty.shape.clone(), parts).unwrap()
                }
            };
            inputs.set_const(name, v);
        }
        let nb = CAPACITY / BLOCK;
        let i32s = |dims: [usize; 2], v| HostTensor::i32(dims, v).unwrap();
        inputs.set_slot(Slot::Token, i32s([n, t], flat(rows, |r| &r.tokens)));
        inputs.set_slot(Slot::Pos, i32s([n, t], flat(rows, |r| &r.pos)));
        inputs.set_slot(Slot::SlotMap, i32s([n, nb], flat(rows, |r| &r.table)));
        inputs.set_slot(Slot::WriteMap, i32s([n, t], flat(rows, |r| &r.write)));
        let prev = std::mem::take(&mut self.states);
        for (_, name, ty) in graph.states() {
            let value = match prev.iter().find(|(s, _)| s == name) {
                Some((_, v)) => v.view(),
                None => {
                    let n = ty.shape.n_elems().unwrap();
                    HostTensor::f32(ty.shape.clone(), vec![0f32; n]).unwrap()
                }
            };
            inputs.set_state(name, value);
        }
        let out = eval(graph, &inputs, EvalOptions::default()).unwrap();
        self.states = out.state.clone();
        out.outputs[0].to_f32_vec().unwrap()
    }
}

fn device_step(
    exec: &mut dyn Executor,
    entry: EntryId,
    rows: &[Row],
) -> Result<Vec<f32>, ExecError> {
    let mut inputs = StepInputs::new();
    inputs.set_i32(Slot::Token, &flat(rows, |r| &r.tokens));
    inputs.set_i32(Slot::Pos, &flat(rows, |r| &r.pos));
    inputs.set_i32(Slot::SlotMap, &flat(rows, |r| &r.table));
    inputs.set_i32(Slot::WriteMap, &flat(rows, |r| &r.write));
    let mut out = StepOutputs::default();
    exec.step(entry, &inputs, &mut out)?;
    Ok(out.f32(0).unwrap())
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_finite() || !w.is_finite() {
                (g - w).abs() / scale
            } else {
                f32::INFINITY
            }
        })
        .fold(0f32, f32::max)
}

fn decoders() -> Vec<(&'static str, Arc<Fixture>)> {
    let registry = Registry::builtin().unwrap();
    FIXTURES
        .iter()
        .filter_map(|f| {
            let checkpoint = poot_load::load(&f.path(), &LoadOptions::default()).unwrap();
            let model = (registry.resolve(checkpoint.config()).unwrap().build)(
                checkpoint.config(),
                checkpoint.store(),
            )
            .unwrap()
            .model;
            (model.config().kind == ModelKind::Decoder)
                .then(|| (f.family, Arc::new(Fixture { checkpoint, model })))
        })
        .collect()
}

fn graph(fixture: &Fixture, rows: usize, tokens: usize) -> Graph {
    let shape = StepShape::new(rows, tokens, CAPACITY).with_kv(PAGED);
    fixture
        .model
        .trace(&StepSpec::step(shape), TraceLimits::standard(256))
        .unwrap()
}

/// Runs one step on the device and the oracle; checks the logits row by row and returns each
/// row's greedy token (asserted equal on both sides).
fn check(
    exec: &mut dyn Executor,
    oracle: &mut Oracle,
    (entry, graph): (EntryId, &Graph),
    rows: &[Row],
    what: &str,
) -> Vec<i32> {
    let got = device_step(exec, entry, rows).unwrap();
    let want = oracle.step(graph, rows);
    let vocab = want.len() / rows.len();
    let mut picks = Vec::new();
    for (r, (g, w)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
        let err = rel_err(g, w);
        assert!(err <= TOLERANCE, "{what}: row {r}: relative error {err}");
        oracle.worst = oracle.worst.max(err);
        assert_eq!(argmax(g), argmax(w), "{what}: row {r}: greedy token");
        picks.push(argmax(g) as i32);
    }
    picks
}

fn run_family(exec: &mut Engine<WgpuDevice>, family: &str, fixture: &Arc<Fixture>) {
    let exe: ExecutableId = exec
        .load_weights(Box::new(Weights(Arc::clone(fixture))))
        .unwrap();
    let (prefill_graph, decode_graph) = (graph(fixture, 1, PROMPT_WIDTH), graph(fixture, 2, 1));
    let prefill = exec
        .add_entry(exe, &prefill_graph, "paged prefill")
        .unwrap();
    let decode = exec.add_entry(exe, &decode_graph, "paged decode").unwrap();
    exec.reset_state(prefill).unwrap();
    let mut oracle = Oracle {
        fixture,
        states: Vec::new(),
        worst: 0.0,
    };
    let prompt_a = [5, 17, 99, 3, 42, 7];
    let prompt_b = [11, 64, 2];
    let prompt_c = [5, 17, 99, 3, 80, 31];
    let p = (prefill, &prefill_graph);
    let d = (decode, &decode_graph);

    // A and B prefill in the one-row entry (B left-padded), then decode together.
    let a0 = check(
        exec,
        &mut oracle,
        p,
        &[row(&prompt_a, 0, PROMPT_WIDTH, &TABLE_A)],
        &format!("{family}: A prefill"),
    )[0];
    let b0 = check(
        exec,
        &mut oracle,
        p,
        &[row(&prompt_b, 0, PROMPT_WIDTH, &TABLE_B)],
        &format!("{family}: B left-padded prefill"),
    )[0];
    let (mut a, mut b) = (a0, b0);
    for i in 0..DECODE {
        let rows = [
            row(&[a], prompt_a.len() + i, 1, &TABLE_A),
            row(&[b], prompt_b.len() + i, 1, &TABLE_B),
        ];
        let picks = check(
            exec,
            &mut oracle,
            d,
            &rows,
            &format!("{family}: A and B decode {i}"),
        );
        (a, b) = (picks[0], picks[1]);
    }

    // C reuses A's first block and prefills only its last two prompt tokens, then decodes
    // beside B.
    let c0 = check(
        exec,
        &mut oracle,
        p,
        &[row(&prompt_c[BLOCK..], BLOCK, PROMPT_WIDTH, &TABLE_C)],
        &format!("{family}: C prefill over A's block"),
    )[0];
    let mut c = c0;
    for i in 0..DECODE {
        let rows = [
            row(&[b], prompt_b.len() + DECODE + i, 1, &TABLE_B),
            row(&[c], prompt_c.len() + i, 1, &TABLE_C),
        ];
        let picks = check(
            exec,
            &mut oracle,
            d,
            &rows,
            &format!("{family}: B and C decode {i}"),
        );
        (b, c) = (picks[0], picks[1]);
    }
    println!(
        "{family}: 11 paged steps, largest relative error {:.2e}",
        oracle.worst
    );
    exec.remove_entry(prefill);
    exec.remove_entry(decode);
    exec.unload(exe);
}

#[test]
fn every_decoder_fixture_pages_like_the_oracle_on_wgpu() {
    let Some(mut exec) = engine() else { return };
    for (family, fixture) in decoders() {
        run_family(&mut exec, family, &fixture);
    }
}

#[test]
fn a_block_outside_the_pool_is_a_typed_kernel_fault() {
    let Some(mut exec) = engine() else { return };
    let (family, fixture) = decoders().into_iter().next().unwrap();
    let exe = exec
        .load_weights(Box::new(Weights(Arc::clone(&fixture))))
        .unwrap();
    let entry = exec
        .add_entry(exe, &graph(&fixture, 2, 1), "paged decode")
        .unwrap();
    exec.reset_state(entry).unwrap();
    let mut bad = row(&[5], 0, 1, &TABLE_A);
    // At a visible position: fused attention never reads the blocks of masked positions.
    bad.table[0] = BLOCKS as i32;
    let err = device_step(&mut exec, entry, &[row(&[9], 0, 1, &TABLE_B), bad]).unwrap_err();
    assert!(
        matches!(
            &err,
            ExecError::Device(DeviceError::KernelFault { code, .. }) if *code == fault::GATHER_INDEX
        ),
        "{family}: {err}"
    );
    // The failed step's state is suspect: stepping again needs a reset, after which the entry
    // runs normally.
    let again = device_step(
        &mut exec,
        entry,
        &[row(&[9], 0, 1, &TABLE_B), row(&[5], 0, 1, &TABLE_A)],
    );
    assert!(
        matches!(again, Err(ExecError::NeedsReset { .. })),
        "{family}: {again:?}"
    );
    exec.reset_state(entry).unwrap();
    let logits = device_step(
        &mut exec,
        entry,
        &[row(&[9], 0, 1, &TABLE_B), row(&[5], 0, 1, &TABLE_A)],
    )
    .unwrap();
    assert!(logits.iter().all(|x| x.is_finite()), "{family}");
}
