//! The CPU oracle behind the executor contract, for driver tests on any machine: each entry's
//! graph is evaluated by `poot_eval::eval` with the executable's carried states kept by name
//! (shared by its entries, as a device shares them), and a chain replays its entry on the host,
//! feeding each pick into the next step as the executor's feed kernel does. A test device
//! only: the driver never chooses it, and nothing is planned or compiled.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::HashMap;

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_executor::{
    ChainFeed, ChainId, ConstBytes, ConstSource, CopyBandwidth, EntryId, ExecError, ExecStats,
    ExecutableId, Executor, KernelTime, StepInputs, StepOutputs,
};
use poot_graph_ir::{Graph, Slot};
use poot_graph_plan::Target;

struct Executable {
    source: Box<dyn ConstSource>,
    consts: HashMap<String, HostTensor<'static>>,
    states: HashMap<String, HostTensor<'static>>,
}

/// The oracle as an [`Executor`].
pub struct OracleExecutor {
    target: Target,
    stats: ExecStats,
    executables: Vec<Option<Executable>>,
    entries: Vec<Option<(usize, Graph)>>,
    chains: Vec<(EntryId, ChainFeed)>,
}

impl Default for OracleExecutor {
    fn default() -> OracleExecutor {
        OracleExecutor {
            target: Target::lavapipe_preset(),
            stats: ExecStats::default(),
            executables: Vec::new(),
            entries: Vec::new(),
            chains: Vec::new(),
        }
    }
}

impl OracleExecutor {
    pub fn boxed() -> Box<dyn Executor> {
        Box::new(OracleExecutor::default())
    }

    fn entry(&self, entry: EntryId) -> Result<&(usize, Graph), ExecError> {
        self.entries
            .get(entry.0)
            .and_then(Option::as_ref)
            .ok_or(ExecError::UnknownEntry { id: entry.0 })
    }

    /// Evaluates `entry` with `inputs`, carrying its executable's states.
    fn run(&mut self, entry: EntryId, inputs: &StepInputs) -> Result<StepOutputs, ExecError> {
        let (exe, graph) = self.entry(entry)?;
        let (exe, graph) = (*exe, graph.clone());
        let executable = self.executables[exe].as_mut().expect("a live executable");
        let mut bound = Inputs::new();
        for (_, name, ty) in graph.consts() {
            if !executable.consts.contains_key(name) {
                let t = match executable.source.bytes(name) {
                    Some(ConstBytes::Stored(b)) => {
                        HostTensor::from_le_bytes(ty.clone(), b.into_owned()).expect("const bytes")
                    }
                    Some(ConstBytes::F32(v)) => {
                        HostTensor::f32(ty.shape.clone(), v.into_owned()).expect("const table")
                    }
                    None => {
                        return Err(ExecError::UnboundConst {
                            name: name.to_string(),
                        });
                    }
                };
                executable.consts.insert(name.to_string(), t);
            }
        }
        for (_, name, ty) in graph.states() {
            if !executable.states.contains_key(name) {
                let bytes = vec![0u8; ty.size_bytes().unwrap() as usize];
                let zero = HostTensor::from_le_bytes(ty.clone(), bytes).unwrap();
                executable.states.insert(name.to_string(), zero);
            }
        }
        for (_, name, _) in graph.consts() {
            bound.set_const(name, executable.consts[name].view());
        }
        for (_, slot, ty) in graph.slots() {
            let bytes = inputs.slot(slot).ok_or_else(|| ExecError::MissingSlot {
                slot: slot.name().to_string(),
            })?;
            let t = HostTensor::from_le_bytes(ty.clone(), bytes.to_vec()).expect("slot bytes");
            bound.set_slot(slot.clone(), t);
        }
        for (_, name, _) in graph.states() {
            bound.set_state(name, executable.states[name].view());
        }
        let done = eval(&graph, &bound, EvalOptions::default())
            .expect("the oracle evaluates the entry")
            .into_owned();
        for (name, t) in done.state {
            executable.states.insert(name, t);
        }
        self.stats.steps += 1;
        let values: Vec<Vec<u8>> = done.outputs.iter().map(HostTensor::to_le_bytes).collect();
        self.stats.last_read_bytes = values.iter().map(|v| v.len() as u64).sum();
        Ok(StepOutputs { values })
    }
}

fn words(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

fn set_words(inputs: &mut StepInputs, slot: &Slot, values: &[i32]) {
    inputs.set_i32(slot.clone(), values);
}

impl Executor for OracleExecutor {
    fn target(&self) -> &Target {
        &self.target
    }

    fn load_weights(&mut self, source: Box<dyn ConstSource>) -> Result<ExecutableId, ExecError> {
        self.executables.push(Some(Executable {
            source,
            consts: HashMap::new(),
            states: HashMap::new(),
        }));
        Ok(ExecutableId(self.executables.len() - 1))
    }

    fn add_entry(
        &mut self,
        executable: ExecutableId,
        graph: &Graph,
        _label: &str,
    ) -> Result<EntryId, ExecError> {
        if self
            .executables
            .get(executable.0)
            .is_none_or(Option::is_none)
        {
            return Err(ExecError::UnknownExecutable { id: executable.0 });
        }
        self.entries.push(Some((executable.0, graph.clone())));
        self.stats.dispatches_per_step.push(0);
        Ok(EntryId(self.entries.len() - 1))
    }

    fn step(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        *outputs = self.run(entry, inputs)?;
        Ok(())
    }

    fn add_chain(&mut self, entry: EntryId, feed: &ChainFeed) -> Result<ChainId, ExecError> {
        self.entry(entry)?;
        self.chains.push((entry, feed.clone()));
        Ok(ChainId(self.chains.len() - 1))
    }

    fn step_chain(
        &mut self,
        chain: ChainId,
        inputs: &StepInputs,
        steps: usize,
    ) -> Result<Vec<i32>, ExecError> {
        let (entry, feed) = self
            .chains
            .get(chain.0)
            .cloned()
            .ok_or_else(|| ExecError::Chain {
                why: format!("no chain {}", chain.0),
            })?;
        let mut inputs = inputs.clone();
        let mut record = Vec::new();
        for step in 0..steps.min(feed.max_steps) {
            if step > 0 {
                // The feed: each row's pick into the token slots, the counters up by one, the
                // paged write map after the new position.
                let last = &record[record.len() - self.pick_words(&feed, &record, step)..];
                let picks = last.to_vec();
                let rows = self.rows_of(&inputs, &feed);
                let width = picks.len() / rows;
                let tokens: Vec<i32> = (0..rows).map(|r| picks[r * width]).collect();
                for s in &feed.token_slots {
                    set_words(&mut inputs, s, &tokens);
                }
                for c in &feed.counters {
                    let mut w = words(inputs.slot(&c.slot).unwrap());
                    for r in 0..rows {
                        w[r * c.stride + c.offset] = w[r * c.stride + c.offset].wrapping_add(1);
                    }
                    set_words(&mut inputs, &c.slot, &w);
                }
                if let Some(paged) = feed.paged {
                    let bt = paged.block_tokens as i32;
                    let pos = words(inputs.slot(&Slot::Pos).unwrap());
                    let table = words(inputs.slot(&Slot::SlotMap).unwrap());
                    let per_row = table.len() / rows;
                    let writes: Vec<i32> = (0..rows)
                        .map(|r| table[r * per_row + (pos[r] / bt) as usize] * bt + pos[r] % bt)
                        .collect();
                    set_words(&mut inputs, &Slot::WriteMap, &writes);
                }
            }
            let out = self.run(entry, &inputs)?;
            record.extend(words(&out.values[feed.pick_output]));
        }
        Ok(record)
    }

    fn profile(
        &mut self,
        _entry: EntryId,
        _inputs: &StepInputs,
        _reps: u32,
    ) -> Result<Option<Vec<KernelTime>>, ExecError> {
        Ok(None)
    }

    fn reset_state(&mut self, entry: EntryId) -> Result<(), ExecError> {
        let exe = self.entry(entry)?.0;
        if let Some(e) = self.executables[exe].as_mut() {
            e.states.clear();
        }
        Ok(())
    }

    fn remove_entry(&mut self, entry: EntryId) {
        if let Some(e) = self.entries.get_mut(entry.0) {
            *e = None;
        }
    }

    fn stats(&self) -> &ExecStats {
        &self.stats
    }

    fn unload(&mut self, executable: ExecutableId) {
        if let Some(e) = self.executables.get_mut(executable.0) {
            *e = None;
        }
    }

    fn copy_bandwidth(
        &mut self,
        buffer_bytes: u64,
        rounds: u32,
    ) -> Result<CopyBandwidth, ExecError> {
        Ok(CopyBandwidth {
            buffer_bytes,
            copies_per_round: 0,
            rounds,
            best_seconds: 0.0,
        })
    }
}

impl OracleExecutor {
    /// Rows of a chained entry: the token slot's words.
    fn rows_of(&self, inputs: &StepInputs, feed: &ChainFeed) -> usize {
        words(inputs.slot(&feed.token_slots[0]).unwrap()).len()
    }

    /// Words of one step's pick output in `record` (which holds `steps` of them).
    fn pick_words(&self, _feed: &ChainFeed, record: &[i32], steps: usize) -> usize {
        record.len() / steps
    }
}
