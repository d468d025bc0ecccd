//! The driver's serving surface as the engine loop drives it: open a sequence into a free row,
//! advance every open sequence by one step (`step` then `commit`), release a row. A trait so the
//! loop's scheduling (queueing, disconnects, failures) is tested without a device.

use poot_llm::{
    Driver, DriverError, GenerateRequest, GuideStats, Layout, SeqEvent, SeqId, Serving, SpecStats,
};
use poot_models::LoraAdapter;

/// Why a sequence was not opened.
#[derive(Debug)]
pub enum Admission {
    /// Every row, or the KV blocks the request needs, are taken: keep it queued and retry
    /// after a release.
    NoRoom,
    /// The driver refused the request (its own fault, unless the error says otherwise).
    Refused(DriverError),
}

/// Sequences over rows.
pub trait Rows {
    fn open(&mut self, request: GenerateRequest) -> Result<SeqId, Admission>;
    /// One step over every open sequence. An error is the engine's: every open sequence fails.
    fn advance(&mut self) -> Result<Vec<SeqEvent>, DriverError>;
    /// Frees the sequence's row and blocks now; unknown ids are ignored.
    fn release(&mut self, id: SeqId);
    fn rows(&self) -> usize;
    /// KV blocks held by sequences and the pool's size; for a contiguous cache, rows.
    fn kv_usage(&self) -> (usize, usize);
    /// Prepares one more step variant while the engine is idle; whether more are left.
    fn warm(&mut self) -> bool {
        false
    }
    /// Prompt blocks the prefix cache was asked for, and of those how many it served.
    fn prefix_cache(&self) -> (u64, u64) {
        (0, 0)
    }
    /// Sequences preempted so far to make room in the KV pool.
    fn preemptions(&self) -> u64 {
        0
    }
    /// What speculative decoding has done so far.
    fn spec_stats(&self) -> SpecStats {
        SpecStats::default()
    }
    /// Loads a LoRA adapter under `name` (requests then name it as their model).
    fn load_lora(&mut self, name: &str, adapter: &LoraAdapter) -> Result<(), DriverError> {
        let _ = (name, adapter);
        Err(DriverError::LoraOff)
    }
    /// Unloads LoRA adapter `name`.
    fn unload_lora(&mut self, name: &str) -> Result<(), DriverError> {
        let _ = name;
        Err(DriverError::LoraOff)
    }
    /// What guided decoding's masks have cost so far.
    fn guide_stats(&self) -> GuideStats {
        GuideStats::default()
    }
}

impl Rows for Driver<Serving> {
    fn open(&mut self, request: GenerateRequest) -> Result<SeqId, Admission> {
        match Driver::open(self, request) {
            Ok(id) => Ok(id),
            Err(DriverError::NoRoom { .. }) => Err(Admission::NoRoom),
            Err(e) => Err(Admission::Refused(e)),
        }
    }

    fn advance(&mut self) -> Result<Vec<SeqEvent>, DriverError> {
        let picks = self.step()?;
        self.commit(picks)
    }

    fn release(&mut self, id: SeqId) {
        Driver::release(self, id);
    }

    fn rows(&self) -> usize {
        Driver::rows(self)
    }

    fn kv_usage(&self) -> (usize, usize) {
        match self.layout() {
            // The last block is the pool's scratch block, never handed out.
            Layout::Paged { blocks, .. } => {
                let total = blocks.saturating_sub(1);
                (total.saturating_sub(self.free_blocks()), total)
            }
            Layout::Contiguous => (self.open_count(), Driver::rows(self)),
        }
    }

    fn warm(&mut self) -> bool {
        self.warm_one()
    }

    fn prefix_cache(&self) -> (u64, u64) {
        let s = self.prefix_cache_stats();
        (s.queried_blocks, s.hit_blocks)
    }

    fn preemptions(&self) -> u64 {
        Driver::preemptions(self)
    }

    fn spec_stats(&self) -> SpecStats {
        Driver::spec_stats(self)
    }

    fn load_lora(&mut self, name: &str, adapter: &LoraAdapter) -> Result<(), DriverError> {
        Driver::load_lora(self, name, adapter).map(|_| ())
    }

    fn unload_lora(&mut self, name: &str) -> Result<(), DriverError> {
        Driver::unload_lora(self, name)
    }

    fn guide_stats(&self) -> GuideStats {
        Driver::guide_stats(self)
    }
}
