//! A recording replayed by a team of the pool's threads. Every member walks the same list of
//! phases (a launch's workgroup chunks, a contraction's rounding of its left side, its column
//! chunks), takes the items of each from a shared counter, and waits for the others at a
//! spinning barrier before the next phase reads what this one wrote. Handing each launch to the
//! pool instead wakes a sleeping thread per launch, tens of microseconds on a virtual machine
//! and a decode step makes hundreds of launches; the team's members wake once per replay.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Spins before a waiting member yields its core (to a member descheduled meanwhile).
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// What a team replays: `phases` phases, phase `p` of `items(p)` items, each run by `run(p,
/// item)` on some member. `stop(p)`, asked once every item of phase `p` has run, ends the
/// replay there (a kernel's failed check).
pub(crate) trait Phases: Sync {
    fn phases(&self) -> usize;
    fn items(&self, phase: usize) -> u64;
    fn run(&self, phase: usize, item: u64);
    fn stop(&self, phase: usize) -> bool;
}

/// Replays `work` with `threads` members on `pool`; the phase it stopped after, if it did.
pub(crate) fn replay(pool: &rayon::ThreadPool, threads: usize, work: &dyn Phases) -> Option<usize> {
    let n = work.phases();
    if threads <= 1 {
        for p in 0..n {
            for i in 0..work.items(p) {
                work.run(p, i);
            }
            if work.stop(p) {
                return Some(p);
            }
        }
        return None;
    }
    let team = Team {
        members: threads,
        cursors: (0..n).map(|_| AtomicU64::new(0)).collect(),
        arrived: AtomicUsize::new(0),
        generation: AtomicUsize::new(0),
        stopped: AtomicBool::new(false),
    };
    let stopped_at = AtomicUsize::new(usize::MAX);
    pool.scope(|s| {
        for _ in 1..threads {
            s.spawn(|_| team.member(work, &stopped_at));
        }
        team.member(work, &stopped_at);
    });
    let at = stopped_at.load(Ordering::Acquire);
    (at != usize::MAX).then_some(at)
}

struct Team {
    members: usize,
    /// The next item of each phase.
    cursors: Vec<AtomicU64>,
    /// Members at the barrier, and how many times it has opened.
    arrived: AtomicUsize,
    generation: AtomicUsize,
    /// Set by the last member to reach a phase's barrier when the replay ends there.
    stopped: AtomicBool,
}

impl Team {
    fn member(&self, work: &dyn Phases, stopped_at: &AtomicUsize) {
        for (p, cursor) in self.cursors.iter().enumerate() {
            let items = work.items(p);
            loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                if i >= items {
                    break;
                }
                work.run(p, i);
            }
            self.wait(|| {
                if work.stop(p) {
                    stopped_at.store(p, Ordering::Release);
                    self.stopped.store(true, Ordering::Release);
                }
            });
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Waits until every member has arrived; the last to arrive runs `last` first, so what it
    /// decides is seen by all once the barrier opens.
    fn wait(&self, last: impl FnOnce()) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.members {
            last();
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}
