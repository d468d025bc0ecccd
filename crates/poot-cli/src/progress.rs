//! Progress bars on stderr while a model loads: reading the checkpoint, uploading its weights
//! and compiling its entries. Shown only when stderr is a terminal and `--quiet` is off, so
//! pipes, logs and tests see the plain status lines alone.
//!
//! The bars are driven from outside the library: [`Reporting`] wraps the executor the driver or
//! encoder is given, and ticks as the weights are read for upload and as each entry is added.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use poot_executor::{
    ChainFeed, ChainId, ConstBytes, ConstSource, CopyBandwidth, EntryId, ExecError, ExecStats,
    ExecutableId, Executor, KernelTime, StepInputs, StepOutputs,
};
use poot_graph_ir::Graph;
use poot_graph_plan::Target;

use crate::status::Status;

/// The one bar shown at a time (none when progress is off).
#[derive(Clone)]
pub struct Progress {
    enabled: bool,
    current: Arc<Mutex<Option<ProgressBar>>>,
}

/// What a bar counts.
#[derive(Clone, Copy)]
pub enum Unit {
    Bytes,
    Items,
}

impl Progress {
    /// Bars when stderr is a terminal and the status lines are on.
    pub fn new(status: &Status) -> Progress {
        Progress::with(!status.quiet && std::io::stderr().is_terminal())
    }

    fn with(enabled: bool) -> Progress {
        Progress {
            enabled,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// A spinner with a message, replacing the current bar.
    pub fn spinner(&self, message: impl Into<String>) {
        if !self.enabled {
            return;
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            bar.set_style(style);
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(100));
        self.replace(Some(bar));
    }

    /// A bar of `total` units with a message, replacing the current bar.
    pub fn bar(&self, message: impl Into<String>, total: u64, unit: Unit) {
        if !self.enabled {
            return;
        }
        let bar = ProgressBar::new(total);
        let template = match unit {
            Unit::Bytes => "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {elapsed}",
            Unit::Items => "{msg} [{bar:30}] {pos}/{len} {elapsed}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(200));
        self.replace(Some(bar));
    }

    /// Advances the current bar.
    pub fn inc(&self, delta: u64) {
        if let Ok(current) = self.current.lock()
            && let Some(bar) = current.as_ref()
        {
            bar.inc(delta);
        }
    }

    /// Removes the current bar (before a status line takes its place).
    pub fn clear(&self) {
        self.replace(None);
    }

    fn replace(&self, bar: Option<ProgressBar>) {
        if let Ok(mut current) = self.current.lock() {
            if let Some(old) = current.take() {
                old.finish_and_clear();
            }
            *current = bar;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // The last clone gone: leave no bar behind on an error path.
        if Arc::strong_count(&self.current) == 1 {
            self.clear();
        }
    }
}

/// An executor that reports uploads and compiles on a [`Progress`], passing everything through.
pub struct Reporting {
    inner: Box<dyn Executor>,
    progress: Progress,
    /// Entries the caller will add, for the compile bar (0: count without a total).
    entries_expected: u64,
    entries_added: u64,
}

impl Reporting {
    pub fn new(inner: Box<dyn Executor>, progress: Progress, entries_expected: usize) -> Reporting {
        Reporting {
            inner,
            progress,
            entries_expected: entries_expected as u64,
            entries_added: 0,
        }
    }
}

/// A weight source that advances the upload bar as the engine reads each constant.
struct Counting {
    inner: Box<dyn ConstSource>,
    progress: Progress,
}

impl ConstSource for Counting {
    fn names(&self) -> Vec<String> {
        self.inner.names()
    }

    fn byte_len(&self, name: &str) -> Option<u64> {
        self.inner.byte_len(name)
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        let data = self.inner.bytes(name);
        if let Some(d) = &data {
            self.progress.inc(d.len());
        }
        data
    }
}

impl Executor for Reporting {
    fn target(&self) -> &Target {
        self.inner.target()
    }

    fn ranks(&self) -> usize {
        self.inner.ranks()
    }

    fn load_weights(&mut self, source: Box<dyn ConstSource>) -> Result<ExecutableId, ExecError> {
        self.load_weights_ranked(vec![source])
    }

    /// One bar over every rank's weights.
    fn load_weights_ranked(
        &mut self,
        sources: Vec<Box<dyn ConstSource>>,
    ) -> Result<ExecutableId, ExecError> {
        let total: u64 = sources
            .iter()
            .flat_map(|s| s.names().into_iter().filter_map(|n| s.byte_len(&n)))
            .sum();
        self.progress.bar("uploading weights", total, Unit::Bytes);
        let counting: Vec<Box<dyn ConstSource>> = sources
            .into_iter()
            .map(|inner| {
                Box::new(Counting {
                    inner,
                    progress: self.progress.clone(),
                }) as Box<dyn ConstSource>
            })
            .collect();
        let loaded = self.inner.load_weights_ranked(counting);
        self.progress.clear();
        loaded
    }

    fn write_const(
        &mut self,
        executable: ExecutableId,
        name: &str,
        offset_bytes: u64,
        bytes: &[u8],
    ) -> Result<(), ExecError> {
        self.inner
            .write_const(executable, name, offset_bytes, bytes)
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
        if self.entries_added == 0 {
            self.progress
                .bar("compiling entries", self.entries_expected, Unit::Items);
        }
        let added = self.inner.add_entry_ranked(executable, graphs, label);
        self.entries_added += 1;
        self.progress.inc(1);
        if added.is_err() || self.entries_added >= self.entries_expected {
            self.progress.clear();
        }
        added
    }

    fn step(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        self.inner.step(entry, inputs, outputs)
    }

    fn add_chain(&mut self, entry: EntryId, feed: &ChainFeed) -> Result<ChainId, ExecError> {
        self.inner.add_chain(entry, feed)
    }

    fn step_chain(
        &mut self,
        chain: ChainId,
        inputs: &StepInputs,
        steps: usize,
    ) -> Result<Vec<i32>, ExecError> {
        self.inner.step_chain(chain, inputs, steps)
    }

    fn profile(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        reps: u32,
    ) -> Result<Option<Vec<KernelTime>>, ExecError> {
        self.inner.profile(entry, inputs, reps)
    }

    fn reset_state(&mut self, entry: EntryId) -> Result<(), ExecError> {
        self.inner.reset_state(entry)
    }

    fn remove_entry(&mut self, entry: EntryId) {
        self.inner.remove_entry(entry);
    }

    fn stats(&self) -> &ExecStats {
        self.inner.stats()
    }

    fn unload(&mut self, executable: ExecutableId) {
        self.inner.unload(executable);
    }

    fn copy_bandwidth(
        &mut self,
        buffer_bytes: u64,
        rounds: u32,
    ) -> Result<CopyBandwidth, ExecError> {
        self.inner.copy_bandwidth(buffer_bytes, rounds)
    }
}

/// The executor a driver is built on, reporting its upload and the entries `Driver::serve`
/// prepares (a prefill chunk and single tokens, each with the greedy and the sampling head).
pub fn reporting(
    executor: Box<dyn Executor>,
    status: &Status,
    prefill_chunk: usize,
) -> Box<dyn Executor> {
    let entries = if prefill_chunk > 1 { 4 } else { 2 };
    Box::new(Reporting::new(executor, Progress::new(status), entries))
}
