//! The coordinator: several executors driven in lockstep as one, the ranks of a
//! tensor-parallel group.
//!
//! Each rank's executor lives on a worker thread of its own, so every rank submits its step at
//! the same time and a rank blocked in a collective (waiting for its peers) never stops the
//! host from submitting the peers' work. A call reaches every rank and returns when all have
//! answered; weights and graphs differ per rank ([`Executor::load_weights_ranked`],
//! [`Executor::add_entry_ranked`]), everything else is the same call on each. A step's outputs
//! are rank 0's (every rank computes the same).
//!
//! A failure on one rank fails the whole call with [`ExecError::Rank`] naming the rank. A
//! failure of a step, or one that poisons its rank's device, poisons the group: the group's
//! collectives are aborted on every rank ([`GroupAbort`]), so peers waiting in a collective for
//! the failed rank return at once instead of at their wait timeout, and every later call is
//! refused with [`ExecError::Poisoned`].
//!
//! Ids are the coordinator's own; each maps to the id every rank gave, so a call that
//! succeeded on some ranks and failed on others leaves no rank out of step.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use poot_graph_ir::Graph;
use poot_graph_plan::Target;

use crate::chain::ChainFeed;
use crate::error::ExecError;
use crate::executor::{
    ChainId, ConstSource, CopyBandwidth, EntryId, ExecStats, ExecutableId, Executor, KernelTime,
    StepInputs, StepOutputs,
};

/// One rank's executor, movable to its worker thread.
pub type RankExecutor = Box<dyn Executor + Send>;

/// Stops a group's collectives on every rank at once (NCCL's communicator abort), so ranks
/// blocked in a collective waiting for a failed peer return. Called at most once, from any
/// thread, while ranks may be blocked.
pub trait GroupAbort: Send + Sync {
    fn abort(&self, reason: &str);
}

type Job = Box<dyn FnOnce(&mut dyn Executor) + Send>;

struct Worker {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// Whether a failed call leaves the group unusable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// A step: peers may be blocked in a collective; any failure poisons.
    Poisons,
    /// Setup: only a failure that poisons its rank poisons the group.
    IfRankPoisoned,
}

/// A tensor-parallel group of executors driven as one [`Executor`].
pub struct Coordinator {
    workers: Vec<Worker>,
    target: Target,
    /// Each rank's target, in rank order.
    targets: Vec<Target>,
    abort: Option<Arc<dyn GroupAbort>>,
    executables: Vec<Option<Vec<ExecutableId>>>,
    entries: Vec<Option<Vec<EntryId>>>,
    chains: Vec<Option<Vec<ChainId>>>,
    stats: ExecStats,
    poisoned: Arc<Mutex<Option<String>>>,
}

impl Coordinator {
    /// Drives `ranks` (rank `r` is `ranks[r]`) in lockstep; `abort` stops their collectives
    /// when a rank fails. At least one rank.
    pub fn new(
        ranks: Vec<RankExecutor>,
        abort: Option<Arc<dyn GroupAbort>>,
    ) -> Result<Coordinator, ExecError> {
        let targets: Vec<Target> = ranks.iter().map(|e| e.target().clone()).collect();
        let target = targets
            .first()
            .cloned()
            .ok_or(ExecError::RankCount { ranks: 0, given: 0 })?;
        let stats = ranks.first().map(|e| e.stats().clone()).unwrap_or_default();
        let mut workers = Vec::with_capacity(ranks.len());
        for (r, mut exec) in ranks.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Job>();
            let thread = std::thread::Builder::new()
                .name(format!("poot-rank-{r}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job(exec.as_mut());
                    }
                })
                .map_err(|_| ExecError::RankLost { rank: r })?;
            workers.push(Worker {
                jobs: Some(tx),
                thread: Some(thread),
            });
        }
        Ok(Coordinator {
            workers,
            target,
            targets,
            abort,
            executables: Vec::new(),
            entries: Vec::new(),
            chains: Vec::new(),
            stats,
            poisoned: Arc::new(Mutex::new(None)),
        })
    }

    /// Each rank's target (its device's limits), in rank order: what a capacity plan fits.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The first failure that poisoned the group, if any.
    pub fn poisoned(&self) -> Option<String> {
        self.poisoned.lock().ok().and_then(|p| p.clone())
    }

    fn check_poison(&self) -> Result<(), ExecError> {
        match self.poisoned() {
            Some(first) => Err(ExecError::Poisoned { first }),
            None => Ok(()),
        }
    }

    /// Marks the group poisoned by `e` on `rank` (the first report wins) and aborts its
    /// collectives.
    fn poison(&self, rank: usize, e: &ExecError) {
        let first = format!("rank {rank}: {e}");
        let newly = match self.poisoned.lock() {
            Ok(mut p) if p.is_none() => {
                *p = Some(first.clone());
                true
            }
            _ => false,
        };
        if newly && let Some(a) = &self.abort {
            a.abort(&first);
        }
    }

    /// Runs `make(r)`'s job on every rank `r` at once; returns each rank's result in rank order
    /// with its executor's stats after the call. The first failure (in arrival order) poisons
    /// the group as `failure` says, before the other ranks have answered.
    #[allow(clippy::type_complexity)]
    fn on_ranks<R: Send + 'static>(
        &mut self,
        failure: Failure,
        mut make: impl FnMut(usize) -> Box<dyn FnOnce(&mut dyn Executor) -> Result<R, ExecError> + Send>,
    ) -> Result<Vec<R>, ExecError> {
        self.check_poison()?;
        let n = self.workers.len();
        let (tx, rx) = mpsc::channel::<(usize, Result<R, ExecError>, ExecStats)>();
        let mut lost = None;
        for (r, w) in self.workers.iter().enumerate() {
            let job = make(r);
            let tx = tx.clone();
            let wrapped: Job = Box::new(move |exec: &mut dyn Executor| {
                let result = job(exec);
                let _ = tx.send((r, result, exec.stats().clone()));
            });
            let sent = w.jobs.as_ref().is_some_and(|j| j.send(wrapped).is_ok());
            if !sent {
                lost.get_or_insert(r);
            }
        }
        drop(tx);
        let mut results: Vec<Option<Result<R, ExecError>>> = (0..n).map(|_| None).collect();
        let mut stats: Vec<Option<ExecStats>> = vec![None; n];
        // The rank that failed first: its error is the cause, later ones its consequences.
        let mut first_failed = None;
        for (r, result, s) in rx.iter() {
            if let Err(e) = &result {
                first_failed.get_or_insert(r);
                let poisons = failure == Failure::Poisons || rank_poisoned(e);
                if poisons {
                    self.poison(r, e);
                }
            }
            results[r] = Some(result);
            stats[r] = Some(s);
        }
        if let Some(rank) = lost.or_else(|| results.iter().position(Option::is_none)) {
            let e = ExecError::RankLost { rank };
            self.poison(rank, &e);
            return Err(e);
        }
        self.merge_stats(&stats);
        if let Some(rank) = first_failed
            && let Some(Some(Err(e))) = results.get_mut(rank).map(Option::take)
        {
            return Err(ExecError::Rank {
                rank,
                source: Box::new(e),
            });
        }
        let mut out = Vec::with_capacity(n);
        for (rank, result) in results.into_iter().enumerate() {
            match result {
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => {
                    return Err(ExecError::Rank {
                        rank,
                        source: Box::new(e),
                    });
                }
                None => return Err(ExecError::RankLost { rank }),
            }
        }
        Ok(out)
    }

    /// Rank 0's stats, with the bytes each rank holds taken at their largest (what one device
    /// of the group must hold).
    fn merge_stats(&mut self, stats: &[Option<ExecStats>]) {
        let Some(Some(first)) = stats.first() else {
            return;
        };
        let mut merged = first.clone();
        for s in stats.iter().flatten() {
            merged.weight_bytes = merged.weight_bytes.max(s.weight_bytes);
            merged.state_bytes = merged.state_bytes.max(s.state_bytes);
            merged.scratch_bytes = merged.scratch_bytes.max(s.scratch_bytes);
        }
        self.stats = merged;
    }

    fn rank_ids<T: Copy>(ids: &[Option<Vec<T>>], i: usize) -> Option<Vec<T>> {
        ids.get(i).and_then(|x| x.clone())
    }

    fn entry_ids(&self, id: EntryId) -> Result<Vec<EntryId>, ExecError> {
        Self::rank_ids(&self.entries, id.0).ok_or(ExecError::UnknownEntry { id: id.0 })
    }

    fn executable_ids(&self, id: ExecutableId) -> Result<Vec<ExecutableId>, ExecError> {
        Self::rank_ids(&self.executables, id.0).ok_or(ExecError::UnknownExecutable { id: id.0 })
    }

    /// Runs a setup call that yields one id per rank; on a failure the ranks that succeeded
    /// undo theirs with `undo`.
    fn setup<T: Copy + Send + 'static>(
        &mut self,
        make: impl FnMut(usize) -> Box<dyn FnOnce(&mut dyn Executor) -> Result<T, ExecError> + Send>,
        undo: fn(&mut dyn Executor, T),
    ) -> Result<Vec<T>, ExecError> {
        // Each rank undoes its own part when another rank failed: run the call, keeping every
        // rank's outcome.
        let outcomes: Arc<Mutex<Vec<Option<T>>>> =
            Arc::new(Mutex::new(vec![None; self.workers.len()]));
        let mut make = make;
        let keep = Arc::clone(&outcomes);
        let result = self.on_ranks(Failure::IfRankPoisoned, move |r| {
            let job = make(r);
            let keep = Arc::clone(&keep);
            Box::new(move |exec: &mut dyn Executor| {
                let v = job(exec)?;
                if let Ok(mut k) = keep.lock() {
                    k[r] = Some(v);
                }
                Ok(v)
            })
        });
        if result.is_err() && self.poisoned().is_none() {
            let done: Vec<Option<T>> = outcomes.lock().map(|o| o.clone()).unwrap_or_default();
            let _ = self.on_ranks(Failure::IfRankPoisoned, |r| {
                let id = done.get(r).copied().flatten();
                Box::new(move |exec: &mut dyn Executor| {
                    if let Some(id) = id {
                        undo(exec, id);
                    }
                    Ok(())
                })
            });
        }
        result
    }
}

/// Whether `e` leaves its rank unusable.
fn rank_poisoned(e: &ExecError) -> bool {
    match e {
        ExecError::Device(d) => d.poisons(),
        ExecError::Poisoned { .. } | ExecError::RankLost { .. } => true,
        ExecError::Rank { source, .. } => rank_poisoned(source),
        ExecError::Plan(_)
        | ExecError::NeedsReset { .. }
        | ExecError::UnknownExecutable { .. }
        | ExecError::UnknownEntry { .. }
        | ExecError::Chain { .. }
        | ExecError::UnboundConst { .. }
        | ExecError::ConstWrite { .. }
        | ExecError::UnboundState { .. }
        | ExecError::StateShape { .. }
        | ExecError::MissingSlot { .. }
        | ExecError::SlotSize { .. }
        | ExecError::ConstRange { .. }
        | ExecError::OutOfMemory { .. }
        | ExecError::RankCount { .. }
        | ExecError::Internal { .. } => false,
    }
}

impl Executor for Coordinator {
    fn target(&self) -> &Target {
        &self.target
    }

    fn ranks(&self) -> usize {
        self.workers.len()
    }

    fn load_weights(&mut self, source: Box<dyn ConstSource>) -> Result<ExecutableId, ExecError> {
        self.load_weights_ranked(vec![source])
    }

    fn load_weights_ranked(
        &mut self,
        sources: Vec<Box<dyn ConstSource>>,
    ) -> Result<ExecutableId, ExecError> {
        if sources.len() != self.workers.len() {
            return Err(ExecError::RankCount {
                ranks: self.workers.len(),
                given: sources.len(),
            });
        }
        let mut sources: Vec<Option<Box<dyn ConstSource>>> =
            sources.into_iter().map(Some).collect();
        let ids = self.setup(
            |r| {
                let source = sources[r].take();
                Box::new(move |exec: &mut dyn Executor| match source {
                    Some(s) => exec.load_weights(s),
                    None => Err(ExecError::Internal {
                        what: "a rank's weights were taken twice",
                    }),
                })
            },
            |exec, id| exec.unload(id),
        )?;
        self.executables.push(Some(ids));
        Ok(ExecutableId(self.executables.len() - 1))
    }

    fn add_entry(
        &mut self,
        executable: ExecutableId,
        graph: &Graph,
        label: &str,
    ) -> Result<EntryId, ExecError> {
        self.add_entry_ranked(executable, std::slice::from_ref(graph), label)
    }

    fn add_entry_ranked(
        &mut self,
        executable: ExecutableId,
        graphs: &[Graph],
        label: &str,
    ) -> Result<EntryId, ExecError> {
        if graphs.len() != self.workers.len() {
            return Err(ExecError::RankCount {
                ranks: self.workers.len(),
                given: graphs.len(),
            });
        }
        let exes = self.executable_ids(executable)?;
        let mut graphs: Vec<Option<Graph>> = graphs.iter().cloned().map(Some).collect();
        let label: Arc<str> = Arc::from(label);
        let ids = self.setup(
            |r| {
                let (graph, exe, label) = (graphs[r].take(), exes[r], Arc::clone(&label));
                Box::new(move |exec: &mut dyn Executor| match graph {
                    Some(g) => exec.add_entry(exe, &g, &label),
                    None => Err(ExecError::Internal {
                        what: "a rank's graph was taken twice",
                    }),
                })
            },
            |exec, id| exec.remove_entry(id),
        )?;
        self.entries.push(Some(ids));
        Ok(EntryId(self.entries.len() - 1))
    }

    fn step(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        let ids = self.entry_ids(entry)?;
        let inputs = Arc::new(inputs.clone());
        let mut outs = self.on_ranks(Failure::Poisons, |r| {
            let (id, inputs) = (ids[r], Arc::clone(&inputs));
            Box::new(move |exec: &mut dyn Executor| {
                let mut out = StepOutputs::default();
                exec.step(id, &inputs, &mut out)?;
                Ok(out)
            })
        })?;
        if let Some(first) = outs.first_mut() {
            *outputs = std::mem::take(first);
        }
        Ok(())
    }

    fn add_chain(&mut self, entry: EntryId, feed: &ChainFeed) -> Result<ChainId, ExecError> {
        let ids = self.entry_ids(entry)?;
        let feed = Arc::new(feed.clone());
        let chain = self.setup(
            |r| {
                let (id, feed) = (ids[r], Arc::clone(&feed));
                Box::new(move |exec: &mut dyn Executor| exec.add_chain(id, &feed))
            },
            // A chain goes with its entry; an orphan chain is never stepped.
            |_, _| {},
        )?;
        self.chains.push(Some(chain));
        Ok(ChainId(self.chains.len() - 1))
    }

    fn step_chain(
        &mut self,
        chain: ChainId,
        inputs: &StepInputs,
        steps: usize,
    ) -> Result<Vec<i32>, ExecError> {
        let ids = Self::rank_ids(&self.chains, chain.0).ok_or_else(|| ExecError::Chain {
            why: format!("no chain {}", chain.0),
        })?;
        let inputs = Arc::new(inputs.clone());
        let mut picks = self.on_ranks(Failure::Poisons, |r| {
            let (id, inputs) = (ids[r], Arc::clone(&inputs));
            Box::new(move |exec: &mut dyn Executor| exec.step_chain(id, &inputs, steps))
        })?;
        Ok(if picks.is_empty() {
            Vec::new()
        } else {
            picks.swap_remove(0)
        })
    }

    fn profile(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        reps: u32,
    ) -> Result<Option<Vec<KernelTime>>, ExecError> {
        let ids = self.entry_ids(entry)?;
        let inputs = Arc::new(inputs.clone());
        let mut times = self.on_ranks(Failure::Poisons, |r| {
            let (id, inputs) = (ids[r], Arc::clone(&inputs));
            Box::new(move |exec: &mut dyn Executor| exec.profile(id, &inputs, reps))
        })?;
        Ok(if times.is_empty() {
            None
        } else {
            times.swap_remove(0)
        })
    }

    fn reset_state(&mut self, entry: EntryId) -> Result<(), ExecError> {
        let ids = self.entry_ids(entry)?;
        self.on_ranks(Failure::IfRankPoisoned, |r| {
            let id = ids[r];
            Box::new(move |exec: &mut dyn Executor| exec.reset_state(id))
        })?;
        Ok(())
    }

    fn remove_entry(&mut self, entry: EntryId) {
        let Ok(ids) = self.entry_ids(entry) else {
            return;
        };
        if let Some(e) = self.entries.get_mut(entry.0) {
            *e = None;
        }
        let _ = self.on_ranks(Failure::IfRankPoisoned, |r| {
            let id = ids[r];
            Box::new(move |exec: &mut dyn Executor| {
                exec.remove_entry(id);
                Ok(())
            })
        });
    }

    fn stats(&self) -> &ExecStats {
        &self.stats
    }

    fn unload(&mut self, executable: ExecutableId) {
        let Ok(ids) = self.executable_ids(executable) else {
            return;
        };
        if let Some(e) = self.executables.get_mut(executable.0) {
            *e = None;
        }
        let _ = self.on_ranks(Failure::IfRankPoisoned, |r| {
            let id = ids[r];
            Box::new(move |exec: &mut dyn Executor| {
                exec.unload(id);
                Ok(())
            })
        });
    }

    /// Rank 0's copy bandwidth (each rank's device measures alike).
    fn copy_bandwidth(
        &mut self,
        buffer_bytes: u64,
        rounds: u32,
    ) -> Result<CopyBandwidth, ExecError> {
        let mut probes = self.on_ranks(Failure::IfRankPoisoned, |r| {
            Box::new(move |exec: &mut dyn Executor| {
                if r == 0 {
                    exec.copy_bandwidth(buffer_bytes, rounds).map(Some)
                } else {
                    Ok(None)
                }
            })
        })?;
        probes
            .first_mut()
            .and_then(Option::take)
            .ok_or(ExecError::Internal {
                what: "rank 0 measured no bandwidth",
            })
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        // Closing the job channels ends each worker's loop; its executor drops on its thread.
        for w in &mut self.workers {
            w.jobs = None;
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}
