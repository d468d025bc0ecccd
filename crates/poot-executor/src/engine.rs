//! The one generic engine: plans each entry for the device's target, uploads weights once per
//! executable, shares carried state between an executable's entries, records each entry once
//! and replays it per step with fresh slot contents.

use std::collections::HashMap;
use std::time::Instant;

use poot_graph_ir::{Graph, Slot};
use poot_graph_plan::{BufferRole, Plan, Target, compile};

use crate::device::{Device, Launch};
use crate::error::ExecError;
use crate::executor::{
    ConstBytes, ConstSource, CopyBandwidth, EntryId, ExecStats, ExecutableId, Executor, StepInputs,
    StepOutputs,
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
    /// An executable weight, by constant name.
    Weight(String),
    /// An executable state, by state name.
    State(String),
}

struct Entry<D: Device> {
    executable: ExecutableId,
    plan: Plan,
    own: Vec<D::Buffer>,
    homes: Vec<Home>,
    recording: D::Recording,
    /// Set when a step failed after replaying: state may be half-written.
    needs_reset: bool,
}

struct Executable<D: Device> {
    /// Each constant's buffer, by name: an index into `buffers`, shared by constants whose
    /// stored bytes are the same (a tied embedding and head).
    weights: HashMap<String, usize>,
    buffers: Vec<D::Buffer>,
    states: HashMap<String, (D::Buffer, u64)>,
    source: Box<dyn ConstSource>,
}

/// An [`Executor`] over any [`Device`].
pub struct Engine<D: Device> {
    device: D,
    target: Target,
    executables: Vec<Option<Executable<D>>>,
    entries: Vec<Option<Entry<D>>>,
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
        // Constants that borrow the same stored bytes share one buffer.
        let mut by_bytes: HashMap<(usize, usize), usize> = HashMap::new();
        for name in source.names() {
            let data = source
                .bytes(&name)
                .ok_or_else(|| ExecError::UnboundConst { name: name.clone() })?;
            let bytes: &[u8] = match &data {
                ConstBytes::Stored(b) => b,
                ConstBytes::F32(v) => bytemuck::cast_slice(v),
            };
            let key = (bytes.as_ptr() as usize, bytes.len());
            let shared = match &data {
                ConstBytes::Stored(std::borrow::Cow::Borrowed(_))
                | ConstBytes::F32(std::borrow::Cow::Borrowed(_)) => by_bytes.get(&key).copied(),
                ConstBytes::Stored(std::borrow::Cow::Owned(_))
                | ConstBytes::F32(std::borrow::Cow::Owned(_)) => None,
            };
            if let Some(i) = shared {
                weights.insert(name, i);
                continue;
            }
            let size = (bytes.len() as u64).div_ceil(4) * 4;
            let buf = self.device.alloc(size.max(4)).map_err(|e| self.fail(e))?;
            self.device
                .write(&buf, 0, bytes)
                .map_err(|e| self.fail(e))?;
            self.stats.weight_bytes += size;
            buffers.push(buf);
            by_bytes.insert(key, buffers.len() - 1);
            weights.insert(name, buffers.len() - 1);
        }
        self.executables.push(Some(Executable {
            weights,
            buffers,
            states: HashMap::new(),
            source,
        }));
        Ok(ExecutableId(self.executables.len() - 1))
    }

    fn add_entry(&mut self, executable: ExecutableId, graph: &Graph) -> Result<EntryId, ExecError> {
        self.check_poison()?;
        self.executable(executable)?;
        let plan = compile(graph, &self.target)?;
        let mut own = Vec::new();
        let mut homes = Vec::with_capacity(plan.buffers.len());
        for b in &plan.buffers {
            let home = match &b.role {
                BufferRole::Const { name } => {
                    let exe = self.executable(executable)?;
                    if !exe.weights.contains_key(name) {
                        return Err(ExecError::UnboundConst { name: name.clone() });
                    }
                    Home::Weight(name.clone())
                }
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
                    Home::Own(own.len() - 1)
                }
                BufferRole::Slot { .. } | BufferRole::Scratch => {
                    let buf = self.device.alloc(b.size_bytes).map_err(|e| self.fail(e))?;
                    self.stats.scratch_bytes += b.size_bytes;
                    own.push(buf);
                    Home::Own(own.len() - 1)
                }
            };
            homes.push(home);
        }
        let mut kernels = Vec::with_capacity(plan.kernels.len());
        for k in &plan.kernels {
            kernels.push(self.device.compile(k).map_err(|e| self.fail(e))?);
        }
        let exe = self
            .executables
            .get(executable.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable { id: executable.0 })?;
        let mut arg_refs: Vec<Vec<&D::Buffer>> = Vec::with_capacity(plan.dispatches.len());
        for d in &plan.dispatches {
            let mut refs = Vec::with_capacity(d.args.len());
            for a in &d.args {
                refs.push(resolve(&homes, &own, exe, a.0 as usize)?);
            }
            arg_refs.push(refs);
        }
        let launches: Vec<Launch<'_, D>> = plan
            .dispatches
            .iter()
            .zip(&arg_refs)
            .map(|(d, args)| Launch {
                kernel: &kernels[d.kernel],
                grid: d.grid,
                args,
            })
            .collect();
        let recorded = self.device.record(&launches);
        drop(launches);
        drop(arg_refs);
        let recording = recorded.map_err(|e| self.fail(e))?;
        self.stats.dispatches_per_step.push(plan.dispatches.len());
        let entry = Entry {
            executable,
            plan,
            own,
            homes,
            recording,
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
        // Every slot of the plan must be given, with exactly its bytes.
        for (slot, hv) in &entry.plan.slots {
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
        if let Err(e) = self.device.replay(&entry.recording) {
            return Err(self.fail_entry(id, e));
        }
        if let Err(e) = self.device.synchronize() {
            return Err(self.fail_entry(id, e));
        }
        let entry = self
            .entries
            .get(id.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownEntry { id: id.0 })?;
        let exe = self
            .executables
            .get(entry.executable.0)
            .and_then(|e| e.as_ref())
            .ok_or(ExecError::UnknownExecutable {
                id: entry.executable.0,
            })?;
        outputs.values.clear();
        let mut read_bytes = 0u64;
        for hv in &entry.plan.outputs {
            let size = hv.ty.shape.n_elems().unwrap_or(0) as u64 * 4;
            let mut host = vec![0u8; size as usize];
            let buf = Self::buffer(entry, exe, hv.buffer.0 as usize)?;
            if let Err(e) = self.device.read(buf, 0, &mut host) {
                return Err(self.fail_entry(id, e));
            }
            read_bytes += size;
            outputs.values.push(host);
        }
        self.stats.steps += 1;
        self.stats.last_read_bytes = read_bytes;
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
        Some(Home::Weight(name)) => exe
            .weights
            .get(name)
            .and_then(|&i| exe.buffers.get(i))
            .ok_or_else(|| ExecError::UnboundConst { name: name.clone() }),
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
