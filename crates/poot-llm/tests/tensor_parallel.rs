//! Tensor parallelism and the layer pipeline through the driver, on lavapipe: a Coordinator of
//! wgpu devices whose collectives are emulated on the host (a test device only: each collective
//! waits for the rank's work and reads its operand back; an all-reduce adds every rank's in rank
//! order, a broadcast takes the root's words, and the result is written back; no backend ships
//! it). Everything but NCCL is the real path: the rank graphs, their
//! plans with collectives among the dispatches, the recordings, chained decode replays, the
//! Coordinator's lockstep and its poisoning. Greedy tokens must equal the single device's.
//!
//! Also the capacity planner: weights and KV per device for each placement, and its refusals.

#![allow(clippy::unwrap_used)]

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use poot_executor::{
    Command, ConstSource, Coordinator, Device, DeviceError, DeviceLimits, Engine, ExecError,
    GroupAbort, Launch, RankExecutor,
};
use poot_graph_plan::Backend;
use poot_kernel::Kernel;
use poot_llm::capacity::{CapacityError, Planner};
use poot_llm::{
    Driver, DriverError, DriverOptions, GenerateRequest, HandleWeights, Layout, LoadOptions,
    ModelHandle, Placement, Sampler,
};
use poot_models::weights::Role;
use poot_models::{KvType, Registry, Stage, TraceError};
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

use common::python::generator_python;

/// What an emulated collective makes of the ranks' parts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Combine {
    /// The f32 sum in rank order.
    Sum,
    /// Rank `root`'s words.
    From(usize),
}

/// The host-side meeting point of an emulated group: each round every rank deposits its part,
/// and each takes the result (the sum in rank order, or the root's part) once all have. An abort wakes every waiter with an
/// error; a rank that waits longer than the timeout fails too, so a broken test cannot hang.
struct Bus {
    ranks: usize,
    state: Mutex<BusState>,
    turned: Condvar,
}

#[derive(Default)]
struct BusState {
    round: u64,
    parts: Vec<Option<(Combine, Vec<u32>)>>,
    taken: usize,
    result: Vec<u32>,
    aborted: Option<String>,
}

const BUS_TIMEOUT: Duration = Duration::from_secs(60);

impl Bus {
    fn new(ranks: usize) -> Arc<Bus> {
        Arc::new(Bus {
            ranks,
            state: Mutex::new(BusState {
                parts: vec![None; ranks],
                ..BusState::default()
            }),
            turned: Condvar::new(),
        })
    }

    fn exchange(
        &self,
        rank: usize,
        combine: Combine,
        part: Vec<u32>,
    ) -> Result<Vec<u32>, DeviceError> {
        let failed = |why: String| DeviceError::Collective { reason: why };
        let mut s = self.state.lock().unwrap();
        // Wait for the previous round to be taken by everyone.
        while s.parts[rank].is_some() || s.taken > 0 {
            if let Some(a) = &s.aborted {
                return Err(failed(a.clone()));
            }
            let (g, t) = self.turned.wait_timeout(s, BUS_TIMEOUT).unwrap();
            s = g;
            if t.timed_out() {
                return Err(failed("emulated collective timed out".into()));
            }
        }
        let round = s.round;
        s.parts[rank] = Some((combine, part));
        if s.parts.iter().all(Option::is_some) {
            let parts: Vec<&(Combine, Vec<u32>)> = s.parts.iter().flatten().collect();
            // Ranks that did not meet at the same collective are a bug the test must show.
            let result = if parts.iter().any(|(c, _)| *c != combine) {
                Err(format!(
                    "ranks met at different collectives: {:?}",
                    parts.iter().map(|(c, _)| *c).collect::<Vec<_>>()
                ))
            } else {
                match combine {
                    Combine::Sum => {
                        let mut sum: Vec<f32> =
                            parts[0].1.iter().map(|w| f32::from_bits(*w)).collect();
                        for (_, p) in &parts[1..] {
                            for (a, x) in sum.iter_mut().zip(p) {
                                *a += f32::from_bits(*x);
                            }
                        }
                        Ok(sum.iter().map(|x| x.to_bits()).collect())
                    }
                    Combine::From(root) => Ok(parts[root].1.clone()),
                }
            };
            match result {
                Ok(r) => s.result = r,
                Err(e) => s.aborted = Some(e),
            }
            s.round += 1;
            self.turned.notify_all();
        }
        while s.round == round {
            if let Some(a) = &s.aborted {
                return Err(failed(a.clone()));
            }
            let (g, t) = self.turned.wait_timeout(s, BUS_TIMEOUT).unwrap();
            s = g;
            if t.timed_out() {
                return Err(failed("emulated collective timed out".into()));
            }
        }
        if let Some(a) = &s.aborted {
            return Err(failed(a.clone()));
        }
        let result = s.result.clone();
        s.taken += 1;
        if s.taken == self.ranks {
            s.taken = 0;
            s.parts.iter_mut().for_each(|p| *p = None);
            self.turned.notify_all();
        }
        Ok(result)
    }
}

struct BusAbort(Arc<Bus>);

impl GroupAbort for BusAbort {
    fn abort(&self, reason: &str) {
        self.0.state.lock().unwrap().aborted = Some(reason.to_string());
        self.0.turned.notify_all();
    }
}

/// A wgpu device as one rank of an emulated group.
struct Emulated {
    inner: WgpuDevice,
    limits: DeviceLimits,
    rank: usize,
    bus: Arc<Bus>,
    /// Fail the replay with this (1-based) number, to test poisoning.
    fail_replay: Option<u64>,
    replays: u64,
}

enum Segment {
    Kernels(<WgpuDevice as Device>::Recording),
    Collective {
        combine: Combine,
        src: <WgpuDevice as Device>::Buffer,
        dst: <WgpuDevice as Device>::Buffer,
        n_elems: u64,
    },
}

impl Emulated {
    fn collective(
        &mut self,
        combine: Combine,
        src: &<WgpuDevice as Device>::Buffer,
        dst: &<WgpuDevice as Device>::Buffer,
        n_elems: u64,
    ) -> Result<(), DeviceError> {
        self.inner.synchronize()?;
        let mut bytes = vec![0u8; n_elems as usize * 4];
        self.inner.read(src, 0, &mut bytes)?;
        let part: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let result = self.bus.exchange(self.rank, combine, part)?;
        let out: Vec<u8> = result.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.inner.write(dst, 0, &out)
    }
}

impl Device for Emulated {
    type Buffer = <WgpuDevice as Device>::Buffer;
    type Kernel = <WgpuDevice as Device>::Kernel;
    type Recording = Vec<Segment>;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    fn alloc(&mut self, bytes: u64) -> Result<Self::Buffer, DeviceError> {
        self.inner.alloc(bytes)
    }
    fn write(&mut self, dst: &Self::Buffer, offset: u64, src: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(dst, offset, src)
    }
    fn read(&mut self, src: &Self::Buffer, offset: u64, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(src, offset, dst)
    }
    fn compile(&mut self, kernel: &Kernel) -> Result<Self::Kernel, DeviceError> {
        self.inner.compile(kernel)
    }
    fn launch(&mut self, l: &Launch<'_, Self>) -> Result<(), DeviceError> {
        self.inner.launch(&Launch {
            kernel: l.kernel,
            grid: l.grid,
            args: l.args,
        })
    }
    fn record(&mut self, launches: &[Launch<'_, Self>]) -> Result<Self::Recording, DeviceError> {
        let commands: Vec<Command<'_, Self>> = launches
            .iter()
            .map(|l| {
                Command::Launch(Launch {
                    kernel: l.kernel,
                    grid: l.grid,
                    args: l.args,
                })
            })
            .collect();
        self.record_commands(&commands)
    }
    fn record_commands(
        &mut self,
        commands: &[Command<'_, Self>],
    ) -> Result<Self::Recording, DeviceError> {
        let mut segments = Vec::new();
        let mut run: Vec<Launch<'_, WgpuDevice>> = Vec::new();
        for c in commands {
            match c {
                Command::Launch(l) => run.push(Launch {
                    kernel: l.kernel,
                    grid: l.grid,
                    args: l.args,
                }),
                Command::AllReduceSum { src, dst, n_elems }
                | Command::Broadcast {
                    src, dst, n_elems, ..
                } => {
                    if !run.is_empty() {
                        segments.push(Segment::Kernels(self.inner.record(&run)?));
                        run.clear();
                    }
                    let combine = match c {
                        Command::Broadcast { root, .. } => Combine::From(*root),
                        _ => Combine::Sum,
                    };
                    segments.push(Segment::Collective {
                        combine,
                        src: (*src).clone(),
                        dst: (*dst).clone(),
                        n_elems: *n_elems,
                    });
                }
                Command::Contract(_) => {
                    return Err(DeviceError::NoLibrary {
                        device: self.limits().name.clone(),
                    });
                }
            }
        }
        if !run.is_empty() {
            segments.push(Segment::Kernels(self.inner.record(&run)?));
        }
        Ok(segments)
    }
    fn all_reduce_sum(
        &mut self,
        src: &Self::Buffer,
        dst: &Self::Buffer,
        n_elems: u64,
    ) -> Result<(), DeviceError> {
        self.collective(Combine::Sum, src, dst, n_elems)
    }
    fn broadcast(
        &mut self,
        src: &Self::Buffer,
        dst: &Self::Buffer,
        n_elems: u64,
        root: usize,
    ) -> Result<(), DeviceError> {
        self.collective(Combine::From(root), src, dst, n_elems)
    }
    fn replay(&mut self, recording: &Self::Recording) -> Result<(), DeviceError> {
        self.replays += 1;
        if self.fail_replay == Some(self.replays) {
            return Err(DeviceError::Lost {
                reason: format!("injected failure on rank {}", self.rank),
            });
        }
        for s in recording {
            match s {
                Segment::Kernels(r) => self.inner.replay(r)?,
                Segment::Collective {
                    combine,
                    src,
                    dst,
                    n_elems,
                } => self.collective(*combine, src, dst, *n_elems)?,
            }
        }
        Ok(())
    }
    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn copy(
        &mut self,
        src: &Self::Buffer,
        dst: &Self::Buffer,
        bytes: u64,
    ) -> Result<(), DeviceError> {
        self.inner.copy(src, dst, bytes)
    }
}

/// A Coordinator of `ranks` emulated lavapipe ranks, rank 1 failing its `fail_replay`th replay
/// when given; `None` (after a SKIP line) without a Vulkan device.
fn emulated_group(ranks: usize, fail_replay: Option<u64>) -> Option<Coordinator> {
    let bus = Bus::new(ranks);
    let mut execs: Vec<RankExecutor> = Vec::new();
    for rank in 0..ranks {
        let inner = match WgpuDevice::open(WgpuOptions::default()) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("SKIP: {e}");
                return None;
            }
        };
        let mut limits = inner.limits().clone();
        limits.group_ranks = ranks;
        let target = limits.target(Backend::Wgpu);
        let device = Emulated {
            inner,
            limits,
            rank,
            bus: Arc::clone(&bus),
            fail_replay: fail_replay.filter(|_| rank == 1),
            replays: 0,
        };
        execs.push(Box::new(Engine::new(device, target)));
    }
    Some(Coordinator::new(execs, Some(Arc::new(BusAbort(bus)))).unwrap())
}

fn tiny_chat() -> Arc<ModelHandle> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let registry = Registry::builtin().unwrap();
    Arc::new(ModelHandle::load(&dir, &registry, &LoadOptions::default()).unwrap())
}

fn greedy(driver: &mut Driver, prompt: &[u32], max_new: usize) -> Result<Vec<u32>, DriverError> {
    let mut req = GenerateRequest::new(prompt.to_vec(), max_new, Sampler::greedy());
    req.ignore_eos = true;
    Ok(driver
        .generate(req, &mut |_| ControlFlow::Continue(()))?
        .tokens)
}

const PROMPT: &[u32] = &[5, 60, 300, 11, 2, 90, 17];

/// `handle` on one lavapipe device, serving contiguous rows; `None` (with a SKIP line) where no
/// Vulkan device opens.
fn single(handle: &Arc<ModelHandle>, options: DriverOptions) -> Option<Driver> {
    let executor = match poot_llm::open_executor(poot_llm::BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return None;
        }
    };
    let driver = Driver::new(Arc::clone(handle), executor, options).unwrap();
    Some(driver.serve(Layout::Contiguous).map_err(|r| r.1).unwrap())
}

/// `handle` placed over an emulated group of lavapipe devices, serving `layout`.
fn placed(
    handle: &Arc<ModelHandle>,
    placement: Placement,
    options: DriverOptions,
    layout: Layout,
) -> Option<Driver> {
    let group = emulated_group(placement.devices(), None)?;
    let driver = Driver::placed(Arc::clone(handle), Box::new(group), placement, options).unwrap();
    Some(driver.serve(layout).map_err(|r| r.1).unwrap())
}

#[test]
fn a_group_of_two_on_lavapipe_generates_the_single_devices_tokens() {
    let handle = tiny_chat();
    let options = DriverOptions::new(64, 4);
    let Some(mut one) = single(&handle, options) else {
        return;
    };
    let want = greedy(&mut one, PROMPT, 12).unwrap();
    let Some(mut two) = placed(
        &handle,
        Placement::TensorParallel { ranks: 2 },
        options,
        Layout::Contiguous,
    ) else {
        return;
    };
    assert_eq!(two.placement(), Placement::TensorParallel { ranks: 2 });
    // Prefill in chunks, then decode chained on the device (collectives inside each replay).
    let got = greedy(&mut two, PROMPT, 12).unwrap();
    eprintln!("one device: {want:?}; two ranks: {got:?}");
    assert_eq!(got, want);
    second_generation_agrees(&mut two, &mut one);
    drop(two);
    // Each rank holds its heads' share of every block.
    paged_rows_agree(
        &handle,
        Placement::TensorParallel { ranks: 2 },
        options,
        &want,
    );
}

#[test]
fn a_pipeline_of_two_on_lavapipe_generates_the_single_devices_tokens() {
    let handle = tiny_chat();
    let options = DriverOptions::new(64, 4);
    let Some(mut one) = single(&handle, options) else {
        return;
    };
    let want = greedy(&mut one, PROMPT, 12).unwrap();
    let Some(mut two) = placed(
        &handle,
        Placement::Pipeline { stages: 2 },
        options,
        Layout::Contiguous,
    ) else {
        return;
    };
    assert_eq!(two.placement(), Placement::Pipeline { stages: 2 });
    // Each stage uploads one layer: the first with the embedding, the second with the final
    // norm and the head (untied), both with the rotary tables.
    let (d, v) = (64u64, 512u64);
    let rope = 2 * 512 * 8 * 4;
    let layer = ((64 * d + 2 * 32 * d + d * 64 + 3 * 128 * d) + 2 * d) * 4;
    assert_eq!(
        two.executor().stats().weight_bytes,
        v * d * 4 + d * 4 + rope + layer,
        "the larger stage's weights (the last)"
    );
    // Prefill in chunks, then decode chained on the device (the hand-over and the picks'
    // broadcast inside each replay).
    let got = greedy(&mut two, PROMPT, 12).unwrap();
    eprintln!("one device: {want:?}; two stages: {got:?}");
    assert_eq!(got, want);
    second_generation_agrees(&mut two, &mut one);
    // Sampling heads run too.
    let sampled = |d: &mut Driver| {
        let mut req = GenerateRequest::new(PROMPT.to_vec(), 8, Sampler::new(0.8, 20, 0.9, 7));
        req.ignore_eos = true;
        req.top_logprobs = Some(3);
        let g = d.generate(req, &mut |_| ControlFlow::Continue(())).unwrap();
        (g.tokens, g.logprobs)
    };
    let (want_tokens, want_logprobs) = sampled(&mut one);
    let (got_tokens, got_logprobs) = sampled(&mut two);
    assert_eq!(got_tokens, want_tokens);
    for (a, b) in got_logprobs.iter().zip(&want_logprobs) {
        assert!((a.logprob - b.logprob).abs() <= 1e-5, "{a:?} vs {b:?}");
        let ids = |t: &poot_llm::TokenLogprob| t.top.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(a), ids(b));
    }
    drop(two);
    // Each stage holds its layer's blocks.
    paged_rows_agree(&handle, Placement::Pipeline { stages: 2 }, options, &want);
}

/// A second generation on `placed` reuses its entries and cache and gives `one`'s tokens.
fn second_generation_agrees(placed: &mut Driver, one: &mut Driver) {
    assert_eq!(
        greedy(placed, &PROMPT[..3], 6).unwrap(),
        greedy(one, &PROMPT[..3], 6).unwrap()
    );
}

/// Two rows over a paged pool under `placement` generate `want` (after a SKIP line, nothing,
/// without a Vulkan device).
fn paged_rows_agree(
    handle: &Arc<ModelHandle>,
    placement: Placement,
    options: DriverOptions,
    want: &[u32],
) {
    let paged = Layout::Paged {
        block_tokens: 16,
        blocks: 9,
    };
    let Some(mut driver) = placed(handle, placement, options.with_rows(2), paged) else {
        return;
    };
    assert_eq!(greedy(&mut driver, PROMPT, 12).unwrap(), want);
}

#[test]
fn a_failing_rank_poisons_the_group() {
    let handle = tiny_chat();
    // Rank 1 fails its third replay (inside the first generation's prefill); rank 0 is then
    // waiting in a collective and must be released by the abort, not by a timeout.
    let Some(group) = emulated_group(2, Some(3)) else {
        return;
    };
    let mut driver = Driver::placed(
        Arc::clone(&handle),
        Box::new(group),
        Placement::TensorParallel { ranks: 2 },
        DriverOptions::new(64, 2),
    )
    .unwrap()
    .serve(Layout::Contiguous)
    .map_err(|r| r.1)
    .unwrap();
    let started = std::time::Instant::now();
    let failed = greedy(&mut driver, PROMPT, 4).unwrap_err();
    eprintln!("{failed}");
    match failed {
        // The rank that failed first is named, with its own error.
        DriverError::Exec(ExecError::Rank { rank, source }) => {
            assert_eq!(rank, 1);
            assert!(source.to_string().contains("injected failure"), "{source}");
        }
        e => panic!("unexpected: {e}"),
    }
    assert!(
        started.elapsed() < BUS_TIMEOUT / 2,
        "the group waited out its timeout"
    );
    match greedy(&mut driver, PROMPT, 4).unwrap_err() {
        DriverError::Exec(ExecError::Poisoned { first }) => {
            assert!(first.contains("injected failure on rank 1"), "{first}")
        }
        e => panic!("unexpected: {e}"),
    }
}

#[test]
fn placements_the_driver_cannot_run_are_refused() {
    let handle = tiny_chat();
    let options = DriverOptions::new(64, 4);
    let Some(group) = emulated_group(2, None) else {
        return;
    };
    match Driver::placed(
        Arc::clone(&handle),
        Box::new(group),
        Placement::TensorParallel { ranks: 4 },
        options,
    ) {
        Err(DriverError::Placement { needed, ranks, .. }) => assert_eq!((needed, ranks), (4, 2)),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("a group of 2 ran a placement over 4"),
    }
    // Three stages over the fixture's two layers: one would hold none.
    let Some(group) = emulated_group(3, None) else {
        return;
    };
    match Driver::placed(
        Arc::clone(&handle),
        Box::new(group),
        Placement::Pipeline { stages: 3 },
        options,
    ) {
        Err(DriverError::Trace(e)) => assert!(
            matches!(
                *e,
                TraceError::TooManyStages {
                    stages: 3,
                    layers: 2
                }
            ),
            "{e}"
        ),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("three stages held two layers"),
    }
    let Some(group) = emulated_group(2, None) else {
        return;
    };
    match Driver::placed(
        Arc::clone(&handle),
        Box::new(group),
        Placement::Pipeline { stages: 3 },
        options,
    ) {
        Err(DriverError::Placement { needed, ranks, .. }) => assert_eq!((needed, ranks), (3, 2)),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("a group of 2 ran a pipeline of 3"),
    }
    // Four ranks do not divide the fixture's two key/value heads.
    let Some(group) = emulated_group(4, None) else {
        return;
    };
    match Driver::placed(
        handle,
        Box::new(group),
        Placement::TensorParallel { ranks: 4 },
        options,
    ) {
        Err(DriverError::Trace(e)) => assert!(
            matches!(
                *e,
                TraceError::TooFewParts {
                    what: "key/value heads",
                    count: 2,
                    ranks: 4
                }
            ),
            "{e}"
        ),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("four ranks split two heads"),
    }
}

fn with_memory(memory_bytes: u64, n: usize) -> Vec<poot_graph_plan::Target> {
    let mut t = poot_graph_plan::Target::ptx_preset();
    t.limits.memory_bytes = Some(memory_bytes);
    vec![t; n]
}

#[test]
fn the_planner_fits_each_device_against_its_own_memory() {
    let handle = tiny_chat();
    // tiny-chat: hidden 64, 2 layers, 4 heads and 2 key/value heads of 16, ffn 128, vocab 512,
    // f32, untied head; rotary tables of 512 positions x 8.
    let (d, ff, v, layers) = (64u64, 128u64, 512u64, 2u64);
    let per_layer_split = (64 * d + 2 * 32 * d + d * 64 + 3 * ff * d) * 4;
    let replicated = (2 * v * d + d + layers * 2 * d) * 4 + 2 * 512 * 8 * 4;
    let single = Planner::new(
        &handle,
        &with_memory(1 << 30, 1),
        Placement::Single,
        KvType::F32,
    )
    .unwrap();
    assert_eq!(
        single.devices()[0].weight_bytes,
        replicated + layers * per_layer_split
    );
    // Keys and values of 2 heads of 16 f32 in each of 2 layers; half that in f16.
    assert_eq!(
        single.devices()[0].kv_bytes_per_position,
        2 * 2 * 2 * 16 * 4
    );
    let half = Planner::new(
        &handle,
        &with_memory(1 << 30, 1),
        Placement::Single,
        KvType::F16,
    )
    .unwrap();
    assert_eq!(half.devices()[0].kv_bytes_per_position, 2 * 2 * 2 * 16 * 2);
    let tp = Planner::new(
        &handle,
        &with_memory(1 << 30, 2),
        Placement::TensorParallel { ranks: 2 },
        KvType::F32,
    )
    .unwrap();
    for d in tp.devices() {
        assert_eq!(d.weight_bytes, replicated + layers * per_layer_split / 2);
        assert_eq!(d.kv_bytes_per_position, 2 * 2 * 16 * 4);
    }
    let pp = Planner::new(
        &handle,
        &with_memory(1 << 30, 2),
        Placement::Pipeline { stages: 2 },
        KvType::F32,
    )
    .unwrap();
    assert_eq!(pp.devices()[0].layers, 0..1);
    assert_eq!(pp.devices()[1].layers, 1..2);
    let rope = 2 * 512 * 8 * 4;
    let layer = per_layer_split + 2 * d * 4;
    assert_eq!(pp.devices()[0].weight_bytes, v * d * 4 + rope + layer);
    assert_eq!(pp.devices()[1].weight_bytes, (v * d + d) * 4 + rope + layer);
    // Memory for the weights and 1000 positions of KV, nothing more.
    let w = tp.devices()[0].weight_bytes;
    let tight = Planner::new(
        &handle,
        &with_memory(w + 1000 * 256, 2),
        Placement::TensorParallel { ranks: 2 },
        KvType::F32,
    )
    .unwrap();
    assert_eq!(tight.max_positions(0), Some(1000));
    tight.check(2, 500, 0).unwrap();
    match tight.check(1, 1001, 0).unwrap_err() {
        CapacityError::Kv {
            index,
            kv_bytes,
            memory_bytes,
            ..
        } => assert_eq!(
            (index, kv_bytes, memory_bytes),
            (0, 1001 * 256, w + 1000 * 256)
        ),
        e => panic!("unexpected: {e}"),
    }
    match Planner::new(
        &handle,
        &with_memory(w - 4, 2),
        Placement::TensorParallel { ranks: 2 },
        KvType::F32,
    )
    .unwrap_err()
    {
        CapacityError::Weights {
            index,
            weight_bytes,
            ..
        } => assert_eq!((index, weight_bytes), (0, w)),
        e => panic!("unexpected: {e}"),
    }
    assert!(matches!(
        Planner::new(
            &handle,
            &with_memory(1 << 30, 3),
            Placement::TensorParallel { ranks: 2 },
            KvType::F32
        ),
        Err(CapacityError::Targets {
            needed: 2,
            given: 3,
            ..
        })
    ));
    assert!(matches!(
        Planner::new(
            &handle,
            &with_memory(1 << 30, 3),
            Placement::Pipeline { stages: 3 },
            KvType::F32
        ),
        Err(CapacityError::Stages {
            stages: 3,
            layers: 2
        })
    ));
}

#[test]
fn the_planner_shares_smollm2_unevenly_over_two_ranks_and_refuses_four() {
    let Some(path) = smollm2() else {
        return;
    };
    let registry = Registry::builtin().unwrap();
    let handle = ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap();
    match Planner::new(
        &handle,
        &with_memory(1 << 30, 4),
        Placement::TensorParallel { ranks: 4 },
        KvType::F32,
    ) {
        Err(CapacityError::Trace(e)) => assert_eq!(
            e.to_string(),
            "3 key/value heads cannot be shared by 4 ranks (each needs at least one)"
        ),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("3 key/value heads shared by 4 ranks"),
    }
    let single = Planner::new(
        &handle,
        &with_memory(1 << 30, 1),
        Placement::Single,
        KvType::F32,
    )
    .unwrap();
    let per_head = single.devices()[0].kv_bytes_per_position / 3;
    // Two ranks hold 1 and 2 of the 3 key/value heads; three ranks one each.
    for (ranks, heads) in [(2, vec![1, 2]), (3, vec![1, 1, 1])] {
        let tp = Planner::new(
            &handle,
            &with_memory(1 << 30, ranks),
            Placement::TensorParallel { ranks },
            KvType::F32,
        )
        .unwrap();
        for (d, h) in tp.devices().iter().zip(heads) {
            assert_eq!(d.kv_bytes_per_position, h * per_head);
            assert!(d.weight_bytes < single.devices()[0].weight_bytes);
        }
    }
}

fn smollm2() -> Option<PathBuf> {
    common::models::cached_model("smollm2-135m-instruct-q4_1.gguf")
}

#[test]
fn smollm2_over_two_uneven_ranks_on_lavapipe_generates_transformers_tokens() {
    let Some(path) = smollm2() else {
        return;
    };
    let Some(group) = emulated_group(2, None) else {
        return;
    };
    let registry = Registry::builtin().unwrap();
    let handle = Arc::new(ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap());
    let prompt = handle
        .text()
        .unwrap()
        .encode("The capital of France is")
        .unwrap();
    let mut driver = Driver::placed(
        Arc::clone(&handle),
        Box::new(group),
        Placement::TensorParallel { ranks: 2 },
        DriverOptions::new(32, 8),
    )
    .unwrap()
    .serve(Layout::Contiguous)
    .map_err(|r| r.1)
    .unwrap();
    // transformers' greedy continuation (crates/poot-models/tests/fixtures/real/smollm2.json),
    // as the single-device driver test checks it.
    assert_eq!(
        greedy(&mut driver, &prompt, 4).unwrap(),
        vec![7042, 30, 198, 198]
    );
}

#[test]
fn smollm2_over_two_stages_on_lavapipe_generates_the_single_devices_tokens() {
    let Some(path) = smollm2() else {
        return;
    };
    let registry = Registry::builtin().unwrap();
    let handle = Arc::new(ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap());
    let prompt = handle
        .text()
        .unwrap()
        .encode("The capital of France is")
        .unwrap();
    let options = DriverOptions::new(64, 8);
    let Some(mut one) = single(&handle, options) else {
        return;
    };
    let want = greedy(&mut one, &prompt, 12).unwrap();
    drop(one);
    let Some(mut two) = placed(
        &handle,
        Placement::Pipeline { stages: 2 },
        options,
        Layout::Contiguous,
    ) else {
        return;
    };
    let got = greedy(&mut two, &prompt, 12).unwrap();
    eprintln!("one device: {want:?}; two stages: {got:?}");
    assert_eq!(got, want);
    // transformers' greedy continuation starts it (crates/poot-models/tests/fixtures/real).
    assert_eq!(got[..4], [7042, 30, 198, 198]);
}

/// Bytes `weights` uploads: each buffer in whole words (a stage holds no constant twice).
fn uploaded_bytes(weights: &HandleWeights) -> u64 {
    weights
        .names()
        .iter()
        .map(|n| weights.byte_len(n).unwrap().div_ceil(4) * 4)
        .sum()
}

/// Bytes of the whole model's entries of `roles`, in whole words.
fn role_bytes(handle: &ModelHandle, roles: impl Fn(Role) -> bool) -> u64 {
    handle
        .model()
        .weights()
        .iter()
        .filter(|e| e.role.layer.is_none() && roles(e.role.role))
        .map(|e| e.ty.size_bytes().unwrap().div_ceil(4) * 4)
        .sum()
}

#[test]
fn the_planner_fits_each_pipeline_stage_with_its_layers() {
    let Some(path) = smollm2() else {
        return;
    };
    let registry = Registry::builtin().unwrap();
    let handle = Arc::new(ModelHandle::load(&path, &registry, &LoadOptions::default()).unwrap());
    let single = Planner::new(
        &handle,
        &with_memory(1 << 30, 1),
        Placement::Single,
        KvType::F32,
    )
    .unwrap();
    let whole = &single.devices()[0];
    let layers = 30u64;
    let per_layer_kv = whole.kv_bytes_per_position / layers;
    let rope = role_bytes(&handle, |r| {
        matches!(r, Role::RopeCos(_) | Role::RopeSin(_))
    });
    let embed = role_bytes(&handle, |r| r == Role::TokenEmbed);
    for (stages, split) in [
        (2usize, vec![15u64, 15]),
        (3, vec![10, 10, 10]),
        (4, vec![8, 8, 7, 7]),
    ] {
        let pp = Planner::new(
            &handle,
            &with_memory(1 << 30, stages),
            Placement::Pipeline { stages },
            KvType::F32,
        )
        .unwrap();
        let mut start = 0;
        let mut weight_sum = 0;
        for (d, n) in pp.devices().iter().zip(&split) {
            assert_eq!(d.layers, start as usize..(start + n) as usize);
            start += n;
            assert_eq!(d.kv_bytes_per_position, n * per_layer_kv);
            // What the driver uploads to the stage is what the planner counts.
            let stage = Stage::new(d.index, stages).unwrap();
            let uploaded = HandleWeights::for_stage(Arc::clone(&handle), stage).unwrap();
            assert_eq!(
                d.weight_bytes,
                uploaded_bytes(&uploaded),
                "stage {}",
                d.index
            );
            weight_sum += d.weight_bytes;
        }
        assert_eq!(start, layers);
        // The whole model's bytes, plus the rotary tables on every further stage and the tied
        // embedding twice (the first stage's embedding, the last's head; once alone).
        assert_eq!(
            weight_sum,
            whole.weight_bytes + (stages as u64 - 1) * rope + embed,
            "{stages} stages"
        );
    }
    // 31 stages would leave one with none.
    match Planner::new(
        &handle,
        &with_memory(1 << 30, 31),
        Placement::Pipeline { stages: 31 },
        KvType::F32,
    ) {
        Err(CapacityError::Stages { stages, layers }) => assert_eq!((stages, layers), (31, 30)),
        Err(e) => panic!("unexpected: {e}"),
        Ok(_) => panic!("31 stages over 30 layers"),
    }
    assert!(matches!(
        Planner::new(&handle, &[], Placement::Pipeline { stages: 0 }, KvType::F32),
        Err(CapacityError::Stages { stages: 0, .. })
    ));
}

/// A random Llama checkpoint in GPTQ's layout at dimensions a group of two splits on its
/// packing (`scripts/ref/models/gen_quantized_checkpoints.py --tp`), or `None` after a SKIP
/// line when no Python imports what the generator needs.
fn gptq_checkpoint() -> Option<PathBuf> {
    let py = match generator_python() {
        Ok(py) => py,
        Err(why) => {
            eprintln!("SKIP: {why}");
            return None;
        }
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tp-quantized-{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/ref/models/gen_quantized_checkpoints.py");
    let run = std::process::Command::new(py)
        .arg(&script)
        .arg("--tp")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    Some(out.join("gptq"))
}

#[test]
fn a_gptq_model_over_two_ranks_on_lavapipe_generates_the_single_devices_tokens() {
    let Some(dir) = gptq_checkpoint() else {
        return;
    };
    // The driver reads end-of-generation ids from a tokenizer, which the generator does not
    // write: the chat fixture's (its ids cover the model's 256).
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    let registry = Registry::builtin().unwrap();
    let handle = Arc::new(ModelHandle::load(&dir, &registry, &LoadOptions::default()).unwrap());
    let options = DriverOptions::new(32, 4);
    let Some(mut one) = single(&handle, options) else {
        return;
    };
    let prompt = [1, 17, 200, 45, 3, 99, 128, 7, 64];
    let want = greedy(&mut one, &prompt, 6).unwrap();
    drop(one);
    let Some(mut two) = placed(
        &handle,
        Placement::TensorParallel { ranks: 2 },
        options,
        Layout::Contiguous,
    ) else {
        return;
    };
    // Each rank uploads its slices of the components, not the whole model's.
    let rank = HandleWeights::for_rank(Arc::clone(&handle), poot_models::Shard::new(1, 2).unwrap())
        .unwrap();
    let q = ConstSource::bytes(&rank, "w.l0.attn.q:qweight").unwrap();
    assert_eq!(q.len(), 256 / 8 * 128 * 4, "qweight of 128 of 256 outputs");
    let got = greedy(&mut two, &prompt, 6).unwrap();
    eprintln!("one device: {want:?}; two ranks: {got:?}");
    assert_eq!(got, want);
}
