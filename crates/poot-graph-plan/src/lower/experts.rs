//! The rows of a routed contraction grouped by expert: for each expert, how many rows selected
//! it and which, in ascending order. A prompt chunk's (token, expert) rows are many and each
//! expert takes a few of them, so a kernel that walks an expert's own rows reads each expert's
//! weights once per few rows ([`super::gemv`]'s grouped job), where a kernel per row read them
//! once per row.
//!
//! One workgroup per expert scans every row's id a workgroup-width at a time: each thread
//! flags its row, an inclusive scan of the flags in shared memory gives each flagged row its
//! place, and a running count carries over to the next run. The lists are `[experts, rows]`
//! (an expert may be chosen by every row), the counts `[experts]`; each id is checked against
//! the expert count as the contraction checks it.

use poot_graph_ir::ValueId;
use poot_kernel::build::{bin, eq, ge, load_shared, local_id, lt, min, select, u32c};
use poot_kernel::ir::BinOp;
use poot_kernel::{Ty, Word};

use super::context::{KernelCtx, LBuf};
use super::{Lowering, PlanError, fault};
use crate::plan::BufferRole;

/// Threads of the listing workgroup: rows scanned per run.
const THREADS: u32 = 256;

/// Each expert's row count (u32 `[experts]`) and rows (u32 `[experts, rows]`).
#[derive(Clone, Copy, Debug)]
pub(super) struct ExpertRows {
    pub counts: LBuf,
    pub lists: LBuf,
}

impl Lowering<'_> {
    /// The rows of the `rows` ids in `ids` grouped by expert (of `experts`), listed by one
    /// kernel the first time a contraction asks for them.
    pub(super) fn expert_rows(
        &mut self,
        ids: ValueId,
        experts: u32,
        rows: u32,
    ) -> Result<ExpertRows, PlanError> {
        if let Some(&listed) = self.expert_rows.get(&ids) {
            return Ok(listed);
        }
        let list_bytes = 4 * u64::from(experts) * u64::from(rows);
        self.check_size(ids, list_bytes)?;
        let listed = ExpertRows {
            counts: self.new_buffer(BufferRole::Scratch, 4 * u64::from(experts.max(1))),
            lists: self.new_buffer(BufferRole::Scratch, list_bytes.max(4)),
        };
        let mut cx = KernelCtx::labelled("expert_rows", self.label(ids), THREADS);
        let counts = cx.param(listed.counts, Word::U32, true);
        let lists = cx.param(listed.lists, Word::U32, true);
        let scan = cx.kb.shared("scan", Ty::U32, THREADS);
        let total = cx.kb.shared("total", Ty::U32, 1);
        let expert = Self::begin_rows(&mut cx, experts);
        let expert = cx.kb.let_(Ty::U32, expert);
        cx.kb.if_(eq(local_id(), u32c(0)), |k| {
            k.store_shared(total, u32c(0), u32c(0))
        });
        cx.kb.barrier();
        let run = cx.kb.begin_for(u32c(0), u32c(rows), u32c(THREADS));
        let row = cx.kb.let_(Ty::U32, run + local_id());
        let inside = cx.kb.let_(Ty::Bool, lt(row.clone(), u32c(rows)));
        let id = self.value_at(&mut cx, ids, &[min(row.clone(), u32c(rows - 1))])?;
        let id = self.checked_index(&mut cx, id, experts as usize, fault::EXPERT_INDEX);
        let mine = cx.kb.let_(
            Ty::U32,
            select(
                bin(BinOp::And, inside, eq(id, expert.clone())),
                u32c(1),
                u32c(0),
            ),
        );
        cx.kb.store_shared(scan, local_id(), mine.clone());
        cx.kb.barrier();
        // Inclusive scan: after the pass at `off`, each place holds the sum of the `2 off`
        // flags up to it.
        let mut off = 1;
        while off < THREADS {
            let before = select(
                ge(local_id(), u32c(off)),
                load_shared(scan, local_id() - u32c(off)),
                u32c(0),
            );
            let sum = cx.kb.let_(Ty::U32, load_shared(scan, local_id()) + before);
            cx.kb.barrier();
            cx.kb.store_shared(scan, local_id(), sum);
            cx.kb.barrier();
            off *= 2;
        }
        let base = cx.kb.let_(Ty::U32, load_shared(total, u32c(0)));
        cx.kb.begin_if(eq(mine, u32c(1)));
        let place = base + load_shared(scan, local_id()) - u32c(1);
        cx.kb.store(lists, expert.clone() * u32c(rows) + place, row);
        cx.kb.end();
        cx.kb.barrier();
        cx.kb.if_(eq(local_id(), u32c(0)), |k| {
            let grown = load_shared(total, u32c(0)) + load_shared(scan, u32c(THREADS - 1));
            k.store_shared(total, u32c(0), grown)
        });
        cx.kb.barrier();
        cx.kb.end();
        cx.kb.if_(eq(local_id(), u32c(0)), |k| {
            k.store(counts, expert, load_shared(total, u32c(0)))
        });
        // The next expert's count starts after every thread has read this one's.
        cx.kb.barrier();
        cx.kb.end();
        let grid = self.groups_for(experts, 1);
        self.push_kernel(cx, grid)?;
        self.expert_rows.insert(ids, listed);
        Ok(listed)
    }
}
