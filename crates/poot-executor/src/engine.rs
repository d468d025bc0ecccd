//! The one generic engine: plans each entry for the device's target, uploads weights once per
//! executable, shares carried state between an executable's entries, records each entry once
//! and replays it per step with fresh slot contents.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use poot_graph_ir::{Graph, Slot};
use poot_graph_plan::{BufferRole, Plan, Target, compile_entry};

use crate::chain::{ChainFeed, feed_grid, layout};
use crate::device::{Command, Device, Launch};
use crate::error::ExecError;
use crate::executor::{
    ChainId, ConstBytes, ConstSource, CopyBandwidth, EntryId, ExecStats, ExecutableId, Executor,
    KernelTime, StepInputs, StepOutputs,
};

/// Copies queued per timed round of the bandwidth probe: enough that one wait's latency is
/// small against the round.
const PROBE_COPIES_PER_ROUND: u32 = 8;
/// The host pattern written over the probe's source buffer, piece by piece.
const PROBE_PATTERN_BYTES: usize = 4 << 20;

/// Where an entry's plan buffer lives.
enum Home {
    /// The entry's own allocation (slots, scratch, tables).
    Own(usize),
    /// An executable weight buffer (a whole constant or a row chunk), by index.
    Weight(usize),
    /// An executable state, by state name.
    State(String),
}

struct Entry<D: Device> {
    executable: ExecutableId,
    plan: Plan,
    own: Vec<D::Buffer>,
    /// Bytes of `own`.
    own_bytes: u64,
    homes: Vec<Home>,
    recording: D::Recording,
    kernels: Vec<D::Kernel>,
    /// The step recorded again as two parts, for [`Executor::step_overlapped`]: made at its
    /// first use.
    split: Option<Split<D>>,
    /// Set when a step failed after replaying: state may be half-written.
    needs_reset: bool,
}

/// An entry's dispatches recorded as two parts, split before dispatch `at` (the first that
/// reads a late slot).
struct Split<D: Device> {
    at: usize,
    first: D::Recording,
    rest: D::Recording,
}

struct Executable<D: Device> {
    /// Each constant uploaded whole, by name: an index into `buffers`.
    weights: HashMap<String, usize>,
    /// Row chunks of constants too large for one buffer, uploaded when an entry first binds
    /// them: (name, offset, length) to an index into `buffers`.
    parts: HashMap<(String, u64, u64), usize>,
    /// Uploaded bytes by identity (address and length of borrowed stored bytes): constants that
    /// borrow the same bytes (a tied embedding and head, and their chunks) share one buffer.
    by_bytes: HashMap<(usize, usize), usize>,
    buffers: Vec<D::Buffer>,
    states: HashMap<String, (D::Buffer, u64)>,
    /// Bytes of `buffers` and `states`.
    held_bytes: u64,
    source: Box<dyn ConstSource>,
}

/// A chained decode prepared on an entry.
struct Chain<D: Device> {
    entry: EntryId,
    kernel: D::Kernel,
    plan_buffers: Vec<usize>,
    base: D::Buffer,
    record: D::Buffer,
    rows: usize,
    width: usize,
    max_steps: usize,
    base_slot: Slot,
}

/// An [`Executor`] over any [`Device`].
pub struct Engine<D: Device> {
    device: D,
    target: Target,
    executables: Vec<Option<Executable<D>>>,
    entries: Vec<Option<Entry<D>>>,
    chains: Vec<Option<Chain<D>>>,
    stats: ExecStats,
    poisoned: Option<String>,
}

impl<D: Device> Engine<D> {
    /// An engine planning for `target` (the device's backend with its reported limits).
    pub fn new(device: D, target: Target) -> Engine<D> {
        Engine {
            device,
            target,
            executables: Vec::new(),
            entries: Vec::new(),
            chains: Vec::new(),
            stats: ExecStats::default(),
            poisoned: None,
        }
    }

    pub fn device(&mut self) -> &mut D {
        &mut self.device
    }

    fn check_poison(&self) -> Result<(), ExecError> {
        match &self.poisoned {
            Some(first) => Err(ExecError::Poisoned {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records a device failure, poisoning the engine when the device cannot go on.
    fn fail(&mut self, e: crate::error::DeviceError) -> ExecError {
        if e.poisons() && self.poisoned.is_none() {
            self.poisoned = Some(e.to_string());
        }
        ExecError::Device(e)
    }

    fn executable(&self, id: ExecutableId) -> Result<&Executable<D>, ExecError> {
        self.executables
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable { id: id.0 })
    }

    fn buffer<'a>(
        entry: &'a Entry<D>,
        exe: &'a Executable<D>,
        i: usize,
    ) -> Result<&'a D::Buffer, ExecError> {
        resolve(&entry.homes, &entry.own, exe, i)
    }
}

impl<D: Device> Executor for Engine<D> {
    fn target(&self) -> &Target {
        &self.target
    }

    fn load_weights(&mut self, source: Box<dyn ConstSource>) -> Result<ExecutableId, ExecError> {
        self.check_poison()?;
        let mut weights = HashMap::new();
        let mut buffers = Vec::new();
        let mut by_bytes: HashMap<(usize, usize), usize> = HashMap::new();
        let mut held_bytes = 0u64;
        {
            // Constants too large for one buffer wait for an entry to bind their row chunks.
            let limit = self.target.limits.max_buffer_bytes;
            let mut whole = Vec::new();
            let mut needed_bytes = 0u64;
            let mut seen = std::collections::HashSet::new();
            for name in source.names() {
                let data = source
                    .bytes(&name)
                    .ok_or_else(|| ExecError::UnboundConst { name: name.clone() })?;
                let (bytes, borrowed) = const_bytes(&data);
                let size = word_bytes(bytes.len() as u64);
                if size > limit {
                    continue;
                }
                if !borrowed || seen.insert((bytes.as_ptr() as usize, bytes.len())) {
                    needed_bytes = needed_bytes.saturating_add(size);
                }
                whole.push((name, data));
            }
            self.check_memory("weights", needed_bytes)?;
            for (name, data) in whole {
                let (bytes, borrowed) = const_bytes(&data);
                let key = (bytes.as_ptr() as usize, bytes.len());
                if let Some(&i) = by_bytes.get(&key).filter(|_| borrowed) {
                    weights.insert(name, i);
                    continue;
                }
                let (buf, size) = self.upload(bytes)?;
                held_bytes += size;
                buffers.push(buf);
                if borrowed {
                    by_bytes.insert(key, buffers.len() - 1);
                }
                weights.insert(name, buffers.len() - 1);
            }
        }
        self.executables.push(Some(Executable {
            weights,
            parts: HashMap::new(),
            by_bytes,
            buffers,
            states: HashMap::new(),
            held_bytes,
            source,
        }));
        Ok(ExecutableId(self.executables.len() - 1))
    }

    fn add_entry(
        &mut self,
        executable: ExecutableId,
        graph: &Graph,
        label: &str,
    ) -> Result<EntryId, ExecError> {
        self.check_poison()?;
        self.executable(executable)?;
        let plan = compile_entry(graph, &self.target, label)?;
        self.check_memory(label, self.new_bytes(executable, &plan)?)?;
        let mut own = Vec::new();
        let mut own_bytes = 0u64;
        let mut homes = Vec::with_capacity(plan.buffers.len());
        for b in &plan.buffers {
            let home = match &b.role {
                BufferRole::Const { name } => {
                    let exe = self.executable(executable)?;
                    match exe.weights.get(name) {
                        Some(&i) => Home::Weight(i),
                        None => return Err(ExecError::UnboundConst { name: name.clone() }),
                    }
                }
                BufferRole::ConstPart {
                    name,
                    offset_bytes,
                    len_bytes,
                } => Home::Weight(self.upload_part(executable, name, *offset_bytes, *len_bytes)?),
                BufferRole::State { name } => {
                    let exists = self
                        .executable(executable)?
                        .states
                        .get(name)
                        .map(|(_, size)| *size);
                    match exists {
                        Some(size) if size != b.size_bytes => {
                            return Err(ExecError::StateShape {
                                name: name.clone(),
                                existing_bytes: size,
                                requested_bytes: b.size_bytes,
                            });
                        }
                        Some(_) => {}
                        None => {
                            let buf = self.device.alloc(b.size_bytes).map_err(|e| self.fail(e))?;
                            self.stats.state_bytes += b.size_bytes;
                            if let Some(Some(exe)) = self.executables.get_mut(executable.0) {
                                exe.states.insert(name.clone(), (buf, b.size_bytes));
                                exe.held_bytes += b.size_bytes;
                            }
                        }
                    }
                    Home::State(name.clone())
                }
                BufferRole::Table { words } => {
                    let buf = self.device.alloc(b.size_bytes).map_err(|e| self.fail(e))?;
                    self.device
                        .write(&buf, 0, bytemuck::cast_slice(words))
                        .map_err(|e| self.fail(e))?;
                    own.push(buf);
                    own_bytes += b.size_bytes;
                    Home::Own(own.len() - 1)
                }
                BufferRole::Slot { .. } | BufferRole::Scratch => {
                    let buf = self.device.alloc(b.size_bytes).map_err(|e| self.fail(e))?;
                    self.stats.scratch_bytes += b.size_bytes;
                    own.push(buf);
                    own_bytes += b.size_bytes;
                    Home::Own(own.len() - 1)
                }
            };
            homes.push(home);
        }
        let kernels = self
            .device
            .compile_all(&plan.kernels)
            .map_err(|e| self.fail(e))?;
        let exe = self
            .executables
            .get(executable.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable { id: executable.0 })?;
        let recorded = record_range(
            &mut self.device,
            &plan,
            &homes,
            &own,
            exe,
            &kernels,
            0..plan.dispatches.len(),
        )?;
        let recording = recorded.map_err(|e| self.fail(e))?;
        self.stats.dispatches_per_step.push(plan.dispatches.len());
        let entry = Entry {
            executable,
            plan,
            own,
            own_bytes,
            homes,
            recording,
            kernels,
            split: None,
            needs_reset: false,
        };
        self.entries.push(Some(entry));
        Ok(EntryId(self.entries.len() - 1))
    }

    fn step(
        &mut self,
        id: EntryId,
        inputs: &StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        self.write_slots(id, inputs, |_| true)?;
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        if let Err(e) = self.device.replay(&entry.recording) {
            return Err(self.fail_entry(id, e));
        }
        self.finish_step(id, outputs)
    }

    fn step_overlapped(
        &mut self,
        id: EntryId,
        inputs: &StepInputs,
        late: &mut dyn FnMut() -> StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        self.check_poison()?;
        let Some(at) = self.late_split(id, inputs)? else {
            let mut all = inputs.clone();
            all.extend(late());
            return self.step(id, &all, outputs);
        };
        self.ensure_split(id, at)?;
        self.write_slots(id, inputs, |slot| inputs.slot(slot).is_some())?;
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        let Some(split) = &entry.split else {
            return Err(ExecError::UnknownEntry { id: id.0 });
        };
        if let Err(e) = self.device.replay(&split.first) {
            return Err(self.fail_entry(id, e));
        }
        // The host works while the first part runs.
        let late = late();
        if let Err(e) = self.write_slots(id, &late, |slot| inputs.slot(slot).is_none()) {
            // The first part ran: the entry's state must be reset before it steps again.
            if let Some(Some(entry)) = self.entries.get_mut(id.0) {
                entry.needs_reset = true;
            }
            return Err(e);
        }
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        let Some(split) = &entry.split else {
            return Err(ExecError::UnknownEntry { id: id.0 });
        };
        if let Err(e) = self.device.replay(&split.rest) {
            return Err(self.fail_entry(id, e));
        }
        self.stats.overlapped_steps += 1;
        self.finish_step(id, outputs)
    }

    fn add_chain(&mut self, id: EntryId, feed: &ChainFeed) -> Result<ChainId, ExecError> {
        self.check_poison()?;
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        let layout = layout(&entry.plan, feed)?;
        let kernel = self
            .device
            .compile(&layout.kernel)
            .map_err(|e| self.fail(e))?;
        let base = self
            .device
            .alloc((layout.rows as u64 * 4).max(4))
            .map_err(|e| self.fail(e))?;
        let record_bytes = (feed.max_steps * layout.rows * layout.width * 4).max(4) as u64;
        let record = self.device.alloc(record_bytes).map_err(|e| self.fail(e))?;
        self.stats.scratch_bytes += record_bytes;
        self.chains.push(Some(Chain {
            entry: id,
            kernel,
            plan_buffers: layout.plan_buffers,
            base,
            record,
            rows: layout.rows,
            width: layout.width,
            max_steps: feed.max_steps,
            base_slot: layout.base_slot,
        }));
        Ok(ChainId(self.chains.len() - 1))
    }

    fn step_chain(
        &mut self,
        chain: ChainId,
        inputs: &StepInputs,
        steps: usize,
    ) -> Result<Vec<i32>, ExecError> {
        self.check_poison()?;
        let c = self
            .chains
            .get(chain.0)
            .and_then(|c| c.as_ref())
            .ok_or(ExecError::Chain {
                why: format!("no chain {}", chain.0),
            })?;
        if steps == 0 || steps > c.max_steps {
            return Err(ExecError::Chain {
                why: format!("{steps} steps (the chain runs 1 to {})", c.max_steps),
            });
        }
        let id = c.entry;
        self.write_slots(id, inputs, |_| true)?;
        let Engine {
            device,
            entries,
            executables,
            chains,
            ..
        } = self;
        let c = chains
            .get(chain.0)
            .and_then(|c| c.as_ref())
            .ok_or(ExecError::Chain {
                why: format!("no chain {}", chain.0),
            })?;
        let (entry, exe) = entry_and_executable(entries, executables, id)?;
        let base = inputs.slot(&c.base_slot).unwrap_or_default();
        let mut args = Vec::with_capacity(c.plan_buffers.len() + 2);
        for &b in &c.plan_buffers {
            args.push(Self::buffer(entry, exe, b)?);
        }
        args.push(&c.base);
        args.push(&c.record);
        let mut run = || -> Result<(), crate::error::DeviceError> {
            device.write(&c.base, 0, base)?;
            for _ in 0..steps {
                device.replay(&entry.recording)?;
                device.launch(&Launch {
                    kernel: &c.kernel,
                    grid: feed_grid(c.rows),
                    args: &args,
                })?;
            }
            device.synchronize()
        };
        let ran = run();
        let words = steps * c.rows * c.width;
        let mut host = vec![0u8; words * 4];
        let read = ran.and_then(|()| device.read(&c.record, 0, &mut host));
        if let Err(e) = read {
            return Err(self.fail_entry(id, e));
        }
        self.stats.steps += steps as u64;
        self.stats.last_read_bytes = host.len() as u64;
        Ok(bytemuck::cast_slice::<u8, i32>(&host).to_vec())
    }

    fn profile(
        &mut self,
        id: EntryId,
        inputs: &StepInputs,
        reps: u32,
    ) -> Result<Option<Vec<KernelTime>>, ExecError> {
        self.write_slots(id, inputs, |_| true)?;
        let Engine {
            device,
            entries,
            executables,
            ..
        } = self;
        let (entry, exe) = entry_and_executable(entries, executables, id)?;
        let mut times = Vec::with_capacity(entry.plan.dispatches.len());
        let mut failed = None;
        for d in &entry.plan.dispatches {
            let mut args = Vec::with_capacity(d.args.len());
            for a in &d.args {
                args.push(resolve(&entry.homes, &entry.own, exe, a.0 as usize)?);
            }
            let launch = Launch {
                kernel: &entry.kernels[d.kernel],
                grid: d.grid,
                args: &args,
            };
            match device.time_launch(&launch, reps.max(1)) {
                Ok(Some(seconds)) => times.push(KernelTime {
                    kernel: entry.plan.kernels[d.kernel].name.clone(),
                    label: d.label.clone(),
                    grid: d.grid,
                    seconds,
                }),
                Ok(None) => return Ok(None),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return Err(self.fail_entry(id, e));
        }
        Ok(Some(times))
    }

    fn write_const(
        &mut self,
        executable: ExecutableId,
        name: &str,
        offset_bytes: u64,
        bytes: &[u8],
    ) -> Result<(), ExecError> {
        self.check_poison()?;
        let refuse = |why| ExecError::ConstWrite {
            name: name.to_string(),
            offset_bytes,
            len_bytes: bytes.len() as u64,
            why,
        };
        let exe = self
            .executables
            .get(executable.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable { id: executable.0 })?;
        let Some(&index) = exe.weights.get(name) else {
            return Err(refuse("not uploaded as one whole buffer"));
        };
        // A constant sharing its buffer with another (same stored bytes) would change both.
        if exe.weights.values().filter(|&&i| i == index).count() > 1 {
            return Err(refuse("its buffer is shared with another constant"));
        }
        let len = exe.source.byte_len(name).unwrap_or(0);
        if offset_bytes
            .checked_add(bytes.len() as u64)
            .is_none_or(|end| end > len)
        {
            return Err(refuse("past the constant's end"));
        }
        let Some(buf) = exe.buffers.get(index) else {
            return Err(refuse("not uploaded as one whole buffer"));
        };
        if let Err(e) = self.device.write(buf, offset_bytes, bytes) {
            return Err(self.fail(e));
        }
        Ok(())
    }

    fn reset_state(&mut self, id: EntryId) -> Result<(), ExecError> {
        self.check_poison()?;
        let entry = self
            .entries
            .get_mut(id.0)
            .and_then(|e| e.as_mut())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        entry.needs_reset = false;
        let exe_id = entry.executable;
        let exe = self
            .executables
            .get(exe_id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable { id: exe_id.0 })?;
        for (buf, size) in exe.states.values() {
            let zeros = vec![0u8; *size as usize];
            if let Err(e) = self.device.write(buf, 0, &zeros) {
                return Err(self.fail(e));
            }
        }
        for e in self.entries.iter_mut().flatten() {
            if e.executable == exe_id {
                e.needs_reset = false;
            }
        }
        Ok(())
    }

    fn remove_entry(&mut self, id: EntryId) {
        if let Some(slot) = self.entries.get_mut(id.0) {
            *slot = None;
        }
        for c in self.chains.iter_mut() {
            if c.as_ref().is_some_and(|c| c.entry == id) {
                *c = None;
            }
        }
    }

    fn stats(&self) -> &ExecStats {
        &self.stats
    }

    fn copy_bandwidth(
        &mut self,
        buffer_bytes: u64,
        rounds: u32,
    ) -> Result<CopyBandwidth, ExecError> {
        self.check_poison()?;
        let rounds = rounds.max(1);
        let bytes = buffer_bytes.min(self.device.limits().max_buffer_bytes) / 4 * 4;
        let bytes = bytes.max(4);
        let a = self.device.alloc(bytes).map_err(|e| self.fail(e))?;
        let b = self.device.alloc(bytes).map_err(|e| self.fail(e))?;
        // Not zeros: the copy must move real data.
        let pattern: Vec<u8> = (0..PROBE_PATTERN_BYTES / 4)
            .flat_map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes())
            .collect();
        let mut at = 0u64;
        while at < bytes {
            let n = (bytes - at).min(pattern.len() as u64) as usize;
            self.device
                .write(&a, at, &pattern[..n])
                .map_err(|e| self.fail(e))?;
            at += n as u64;
        }
        let mut best = f64::INFINITY;
        for round in 0..=rounds {
            let started = Instant::now();
            for k in 0..PROBE_COPIES_PER_ROUND {
                let (src, dst) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
                self.device
                    .copy(src, dst, bytes)
                    .map_err(|e| self.fail(e))?;
            }
            self.device.synchronize().map_err(|e| self.fail(e))?;
            // Round 0 warms up (first-touch costs, clocks ramping).
            if round > 0 {
                best = best.min(started.elapsed().as_secs_f64());
            }
        }
        Ok(CopyBandwidth {
            buffer_bytes: bytes,
            copies_per_round: PROBE_COPIES_PER_ROUND,
            rounds,
            best_seconds: best,
        })
    }

    fn unload(&mut self, id: ExecutableId) {
        for e in self.entries.iter_mut() {
            if e.as_ref().is_some_and(|e| e.executable == id) {
                *e = None;
            }
        }
        if let Some(slot) = self.executables.get_mut(id.0) {
            *slot = None;
        }
    }
}

impl<D: Device> Engine<D> {
    /// Checks the entry can step and writes every slot of its plan from `inputs`.
    /// Waits for the entry's replay, then reads its outputs back.
    fn finish_step(&mut self, id: EntryId, outputs: &mut StepOutputs) -> Result<(), ExecError> {
        if let Err(e) = self.device.synchronize() {
            return Err(self.fail_entry(id, e));
        }
        let (entry, exe) = entry_and_executable(&self.entries, &self.executables, id)?;
        outputs.values.clear();
        let mut read_bytes = 0u64;
        let mut failed = None;
        for hv in &entry.plan.outputs {
            let size = hv.ty.shape.n_elems().unwrap_or(0) as u64 * 4;
            let mut host = vec![0u8; size as usize];
            let buf = Self::buffer(entry, exe, hv.buffer.0 as usize)?;
            if let Err(e) = self.device.read(buf, 0, &mut host) {
                failed = Some(e);
                break;
            }
            read_bytes += size;
            outputs.values.push(host);
        }
        if let Some(e) = failed {
            return Err(self.fail_entry(id, e));
        }
        self.stats.steps += 1;
        self.stats.last_read_bytes = read_bytes;
        Ok(())
    }

    /// Where a step whose `inputs` leave some slots out splits: before the first dispatch (or
    /// library call) that reads one of them. `None` when nothing is left out, or the first
    /// command already reads one (nothing could run before the late slots are written).
    fn late_split(&self, id: EntryId, inputs: &StepInputs) -> Result<Option<usize>, ExecError> {
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        let plan = &entry.plan;
        let late: Vec<u32> = plan
            .slots
            .iter()
            .filter(|(slot, _)| inputs.slot(slot).is_none())
            .map(|(_, hv)| hv.buffer.0)
            .collect();
        if late.is_empty() {
            return Ok(None);
        }
        let reads = |b: &poot_graph_plan::BufferId| late.contains(&b.0);
        let dispatch = plan
            .dispatches
            .iter()
            .position(|d| d.args.iter().any(reads));
        let contraction = plan
            .contractions
            .iter()
            .filter(|c| [&c.lhs, &c.weights, &c.out].into_iter().any(reads))
            .map(|c| c.before);
        let collective = plan
            .collectives
            .iter()
            .filter(|c| reads(&c.src) || reads(&c.dst))
            .map(|c| c.before);
        let at = dispatch
            .into_iter()
            .chain(contraction)
            .chain(collective)
            .min();
        Ok(at.filter(|&at| at > 0))
    }

    /// Records the entry again as two parts split before dispatch `at`, unless it already is.
    fn ensure_split(&mut self, id: EntryId, at: usize) -> Result<(), ExecError> {
        let Engine {
            device,
            entries,
            executables,
            ..
        } = self;
        let (entry, exe) = entry_and_executable(entries, executables, id)?;
        if entry.split.as_ref().is_some_and(|s| s.at == at) {
            return Ok(());
        }
        let (plan, homes, own, kernels) = (&entry.plan, &entry.homes, &entry.own, &entry.kernels);
        let first = record_range(device, plan, homes, own, exe, kernels, 0..at)?;
        let rest = record_range(
            device,
            plan,
            homes,
            own,
            exe,
            kernels,
            at..plan.dispatches.len(),
        )?;
        let split = match (first, rest) {
            (Ok(first), Ok(rest)) => Split { at, first, rest },
            (Err(e), _) | (_, Err(e)) => return Err(self.fail(e)),
        };
        if let Some(Some(entry)) = self.entries.get_mut(id.0) {
            entry.split = Some(split);
        }
        Ok(())
    }

    /// Writes the entry's slots that `which` selects, each of which `inputs` must hold with
    /// exactly its bytes.
    fn write_slots(
        &mut self,
        id: EntryId,
        inputs: &StepInputs,
        which: impl Fn(&Slot) -> bool,
    ) -> Result<(), ExecError> {
        self.check_poison()?;
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        if entry.needs_reset {
            return Err(ExecError::NeedsReset { entry: id.0 });
        }
        let exe = self
            .executables
            .get(entry.executable.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable {
                id: entry.executable.0,
            })?;
        for (slot, hv) in entry.plan.slots.iter().filter(|(slot, _)| which(slot)) {
            let data = inputs.slot(slot).ok_or_else(|| ExecError::MissingSlot {
                slot: slot.name().to_string(),
            })?;
            let want = entry.plan.buffers[hv.buffer.0 as usize].size_bytes;
            if data.len() as u64 != want {
                return Err(ExecError::SlotSize {
                    slot: slot.name().to_string(),
                    expected_bytes: want,
                    got_bytes: data.len() as u64,
                });
            }
            let buf = Self::buffer(entry, exe, hv.buffer.0 as usize)?;
            if let Err(e) = self.device.write(buf, 0, data) {
                return Err(self.fail_entry(id, e));
            }
        }
        Ok(())
    }

    /// Copies `bytes` into a new buffer of whole words; returns it and its size.
    fn upload(&mut self, bytes: &[u8]) -> Result<(D::Buffer, u64), ExecError> {
        let size = word_bytes(bytes.len() as u64);
        let buf = self.device.alloc(size).map_err(|e| self.fail(e))?;
        self.device
            .write(&buf, 0, bytes)
            .map_err(|e| self.fail(e))?;
        self.stats.weight_bytes += size;
        Ok((buf, size))
    }

    /// The buffer holding `len_bytes` of constant `name` from `offset_bytes`, uploaded on first
    /// use straight from the source's bytes and shared with any constant that borrows the same
    /// bytes.
    fn upload_part(
        &mut self,
        executable: ExecutableId,
        name: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<usize, ExecError> {
        let Engine {
            device,
            executables,
            stats,
            ..
        } = self;
        let exe = executables
            .get_mut(executable.0)
            .and_then(|e| e.as_mut())
            .ok_or(ExecError::UnknownExecutable { id: executable.0 })?;
        let key = (name.to_string(), offset_bytes, len_bytes);
        if let Some(&i) = exe.parts.get(&key) {
            return Ok(i);
        }
        let data = exe
            .source
            .bytes(name)
            .ok_or_else(|| ExecError::UnboundConst {
                name: name.to_string(),
            })?;
        let (bytes, borrowed) = const_bytes(&data);
        let range = usize::try_from(offset_bytes)
            .ok()
            .zip(usize::try_from(offset_bytes.saturating_add(len_bytes)).ok())
            .filter(|&(_, end)| end <= bytes.len());
        let Some((start, end)) = range else {
            return Err(ExecError::ConstRange {
                name: name.to_string(),
                offset_bytes,
                len_bytes,
                size_bytes: bytes.len() as u64,
            });
        };
        let part = &bytes[start..end];
        let id = (part.as_ptr() as usize, part.len());
        if let Some(&i) = exe.by_bytes.get(&id).filter(|_| borrowed) {
            exe.parts.insert(key, i);
            return Ok(i);
        }
        let size = word_bytes(part.len() as u64);
        let uploaded = device
            .alloc(size)
            .and_then(|buf| device.write(&buf, 0, part).map(|()| buf));
        drop(data);
        let buf = match uploaded {
            Ok(buf) => buf,
            Err(e) => return Err(self.fail(e)),
        };
        stats.weight_bytes += size;
        exe.buffers.push(buf);
        exe.held_bytes += size;
        let i = exe.buffers.len() - 1;
        if borrowed {
            exe.by_bytes.insert(id, i);
        }
        exe.parts.insert(key, i);
        Ok(i)
    }

    /// Bytes `plan` would newly allocate for `executable`: its own buffers, states the
    /// executable does not hold yet, and constant chunks not uploaded yet.
    fn new_bytes(&self, executable: ExecutableId, plan: &Plan) -> Result<u64, ExecError> {
        let exe = self.executable(executable)?;
        let mut parts = std::collections::HashSet::new();
        let mut bytes = 0u64;
        for b in &plan.buffers {
            let new = match &b.role {
                BufferRole::Const { .. } => false,
                BufferRole::ConstPart {
                    name,
                    offset_bytes,
                    len_bytes,
                } => {
                    let key = (name.clone(), *offset_bytes, *len_bytes);
                    !exe.parts.contains_key(&key) && parts.insert(key)
                }
                BufferRole::State { name } => !exe.states.contains_key(name),
                BufferRole::Table { .. } | BufferRole::Slot { .. } | BufferRole::Scratch => true,
            };
            if new {
                bytes = bytes.saturating_add(b.size_bytes);
            }
        }
        Ok(bytes)
    }

    /// Bytes held on the device: every executable's weights and states, every entry's buffers.
    fn held_bytes(&self) -> u64 {
        let exes: u64 = self
            .executables
            .iter()
            .flatten()
            .map(|e| e.held_bytes)
            .sum();
        let entries: u64 = self.entries.iter().flatten().map(|e| e.own_bytes).sum();
        exes + entries
    }

    /// Refuses `needed_bytes` more (for `what`: weights, or an entry's label) when they would
    /// take the device past its memory, before anything is allocated.
    fn check_memory(&self, what: &str, needed_bytes: u64) -> Result<(), ExecError> {
        let Some(memory_bytes) = self.target.limits.memory_bytes else {
            return Ok(());
        };
        let held_bytes = self.held_bytes();
        if held_bytes.saturating_add(needed_bytes) <= memory_bytes {
            return Ok(());
        }
        Err(ExecError::OutOfMemory {
            what: what.to_string(),
            needed_bytes,
            held_bytes,
            memory_bytes,
        })
    }

    /// A failure after the step replayed: the entry's executable needs a full state reset.
    fn fail_entry(&mut self, id: EntryId, e: crate::error::DeviceError) -> ExecError {
        if let Some(Some(entry)) = self.entries.get(id.0) {
            let exe = entry.executable;
            for en in self.entries.iter_mut().flatten() {
                if en.executable == exe {
                    en.needs_reset = true;
                }
            }
        }
        self.fail(e)
    }

    /// The slot names an entry reads, for callers assembling inputs.
    pub fn entry_slots(&self, id: EntryId) -> Vec<Slot> {
        self.entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .map(|e| e.plan.slots.iter().map(|(s, _)| s.clone()).collect())
            .unwrap_or_default()
    }

    /// The weight source of an executable (kept so entries added later can bind new constants).
    pub fn source(&self, id: ExecutableId) -> Option<&dyn ConstSource> {
        self.executables
            .get(id.0)
            .and_then(|e| e.as_ref())
            .map(|e| e.source.as_ref())
    }
}

/// Records the plan's dispatches in `range`, with the collectives and library contractions
/// that precede them (and, when the range ends the plan, those after every dispatch). The
/// outer error is a buffer that does not resolve; the inner one the device's.
fn record_range<D: Device>(
    device: &mut D,
    plan: &Plan,
    homes: &[Home],
    own: &[D::Buffer],
    exe: &Executable<D>,
    kernels: &[D::Kernel],
    range: std::ops::Range<usize>,
) -> Result<Result<D::Recording, crate::error::DeviceError>, ExecError> {
    let dispatches = &plan.dispatches[range.clone()];
    let mut arg_refs: Vec<Vec<&D::Buffer>> = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        let mut refs = Vec::with_capacity(d.args.len());
        for a in &d.args {
            refs.push(resolve(homes, own, exe, a.0 as usize)?);
        }
        arg_refs.push(refs);
    }
    let launches = dispatches.iter().zip(&arg_refs).map(|(d, args)| Launch {
        kernel: &kernels[d.kernel],
        grid: d.grid,
        args,
    });
    if plan.collectives.is_empty() && plan.contractions.is_empty() {
        let launches: Vec<Launch<'_, D>> = launches.collect();
        return Ok(device.record(&launches));
    }
    // Collectives and library contractions among the launches, each before the dispatch it
    // precedes; a contraction before the collectives its count leaves out.
    let ends_plan = range.end == plan.dispatches.len();
    let mut calls = call_commands(plan, homes, own, exe)?
        .into_iter()
        .filter(|(before, _)| *before >= range.start && (*before < range.end || ends_plan))
        .peekable();
    let mut commands = Vec::with_capacity(dispatches.len());
    for (i, l) in (range.start..).zip(launches) {
        while let Some((_, c)) = calls.next_if(|(before, _)| *before <= i) {
            commands.push(c);
        }
        commands.push(Command::Launch(l));
    }
    commands.extend(calls.map(|(_, c)| c));
    Ok(device.record_commands(&commands))
}

/// The recorded forms of a plan's collectives and library contractions, each with the number
/// of dispatches before it, in the order the step runs them.
fn call_commands<'a, D: Device>(
    plan: &poot_graph_plan::Plan,
    homes: &'a [Home],
    own: &'a [D::Buffer],
    exe: &'a Executable<D>,
) -> Result<Vec<(usize, Command<'a, D>)>, ExecError> {
    let mut keyed = Vec::with_capacity(plan.collectives.len() + plan.contractions.len());
    for (j, c) in plan.collectives.iter().enumerate() {
        keyed.push(((c.before, j, 1u8), collective_command(c, homes, own, exe)?));
    }
    for c in &plan.contractions {
        let command = Command::Contract(crate::Contraction {
            operands: c.operands,
            lhs: resolve(homes, own, exe, c.lhs.0 as usize)?,
            weights: resolve(homes, own, exe, c.weights.0 as usize)?,
            transpose_weights: c.transpose_weights,
            out: resolve(homes, own, exe, c.out.0 as usize)?,
            rows: c.rows,
            cols: c.cols,
            depth: c.depth,
        });
        keyed.push(((c.before, c.collectives_before, 0u8), command));
    }
    keyed.sort_by_key(|(key, _)| *key);
    Ok(keyed
        .into_iter()
        .map(|((before, _, _), c)| (before, c))
        .collect())
}

/// The recorded form of a plan's collective, its buffers resolved.
fn collective_command<'a, D: Device>(
    c: &poot_graph_plan::Collective,
    homes: &'a [Home],
    own: &'a [D::Buffer],
    exe: &'a Executable<D>,
) -> Result<Command<'a, D>, ExecError> {
    let src = resolve(homes, own, exe, c.src.0 as usize)?;
    let dst = resolve(homes, own, exe, c.dst.0 as usize)?;
    Ok(match c.op {
        poot_graph_plan::CollectiveOp::AllReduceSum { .. } => Command::AllReduceSum {
            src,
            dst,
            n_elems: c.n_elems,
        },
        poot_graph_plan::CollectiveOp::Broadcast { root, .. } => Command::Broadcast {
            src,
            dst,
            n_elems: c.n_elems,
            root,
        },
    })
}

/// The device buffer behind plan buffer `i` of an entry.
fn resolve<'a, D: Device>(
    homes: &'a [Home],
    own: &'a [D::Buffer],
    exe: &'a Executable<D>,
    i: usize,
) -> Result<&'a D::Buffer, ExecError> {
    match homes.get(i) {
        Some(Home::Own(j)) => own.get(*j).ok_or(ExecError::Internal {
            what: "own buffer index",
        }),
        Some(Home::Weight(j)) => exe.buffers.get(*j).ok_or(ExecError::Internal {
            what: "weight buffer index",
        }),
        Some(Home::State(name)) => exe
            .states
            .get(name)
            .map(|(b, _)| b)
            .ok_or_else(|| ExecError::UnboundState { name: name.clone() }),
        None => Err(ExecError::Internal {
            what: "plan buffer index",
        }),
    }
}

/// A constant's bytes, and whether they are borrowed from the store (so their address
/// identifies them).
fn const_bytes<'a>(data: &'a ConstBytes<'_>) -> (&'a [u8], bool) {
    match data {
        ConstBytes::Stored(Cow::Borrowed(b)) => (b, true),
        ConstBytes::Stored(Cow::Owned(b)) => (b, false),
        ConstBytes::F32(Cow::Borrowed(v)) => (bytemuck::cast_slice(v), true),
        ConstBytes::F32(Cow::Owned(v)) => (bytemuck::cast_slice(v), false),
    }
}

/// A buffer's size for `bytes`: whole words, at least one.
fn word_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(4).max(1) * 4
}

/// An entry and the executable it belongs to (free of `self`, so callers can borrow the device
/// mutably beside them).
fn entry_and_executable<'a, D: Device>(
    entries: &'a [Option<Entry<D>>],
    executables: &'a [Option<Executable<D>>],
    id: EntryId,
) -> Result<(&'a Entry<D>, &'a Executable<D>), ExecError> {
    let entry = entries
        .get(id.0)
        .and_then(|e| e.as_ref())
        .ok_or(ExecError::UnknownEntry { id: id.0 })?;
    let exe = executables
        .get(entry.executable.0)
        .and_then(|e| e.as_ref())
        .ok_or(ExecError::UnknownExecutable {
            id: entry.executable.0,
        })?;
    Ok((entry, exe))
}
