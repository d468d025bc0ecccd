//! Chained decode: an entry replayed several times with the host waiting once. Between two
//! replays a small feed kernel copies each row's pick into the token slot, advances the
//! per-step counters (positions, the draw counter), moves the paged write map to the next
//! position, and appends the pick to a record the host reads at the end.

use poot_graph_ir::{DType, Slot};
use poot_graph_plan::{DeviceWords, Plan};
use poot_kernel::build::{KernelBuilder, cast, group_id, load, local_id, lt, u32c};
use poot_kernel::ir::{Access, Kernel, Ty, Word};

use crate::error::ExecError;

/// How a chained step feeds its picks into the next (the driver's `RowWork::Chain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainFeed {
    /// The output holding each row's pick: i32 `[rows, width]`, the token in column 0.
    pub pick_output: usize,
    /// The slots the picks feed, each i32 `[rows, 1]` (the model's tokens, and any other reader
    /// of the fed tokens such as a sampling history).
    pub token_slots: Vec<Slot>,
    /// Slots whose word `offset` of each row (rows of `stride` words) grows by one per step:
    /// the positions (which must come first) and the draw counter.
    pub counters: Vec<ChainCounter>,
    /// Paged KV: the write map (i32 `[rows, 1]`) follows the new position through the block
    /// table (i32 `[rows, table_len]`) of `block_tokens` positions per block.
    pub paged: Option<PagedFeed>,
    /// The most steps one chain runs (sizes the record).
    pub max_steps: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCounter {
    pub slot: Slot,
    pub stride: usize,
    pub offset: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedFeed {
    pub block_tokens: u32,
}

/// A chain checked against its entry's plan: the buffers the feed kernel binds, in order.
pub(crate) struct ChainLayout {
    pub kernel: Kernel,
    pub rows: usize,
    pub width: usize,
    /// Plan buffer ids: pick output, token slots..., counters..., (table, write map).
    pub plan_buffers: Vec<usize>,
    /// The slot whose initial values the record indexes steps from (the first counter).
    pub base_slot: Slot,
}

const FEED_THREADS: u32 = 64;

/// Checks `feed` against `plan` and builds its feed kernel. The kernel's parameters are the
/// plan buffers in `plan_buffers` order, then the base (initial positions) and the record.
pub(crate) fn layout(plan: &Plan, feed: &ChainFeed) -> Result<ChainLayout, ExecError> {
    let bad = |why: String| ExecError::Chain { why };
    let out = plan
        .outputs
        .get(feed.pick_output)
        .ok_or_else(|| bad(format!("the entry has no output {}", feed.pick_output)))?;
    let (rows, width) = match (out.ty.dtype, out.ty.dims()) {
        (DType::I32, &[r, w]) if w >= 1 => (r, w),
        _ => {
            return Err(bad(format!(
                "the pick output is {}, not i32 [rows, n]",
                out.ty
            )));
        }
    };
    let slot = |s: &Slot, dtype: DType, width: usize| -> Result<(usize, Word), ExecError> {
        let (_, hv) = plan
            .slots
            .iter()
            .find(|(x, _)| x == s)
            .ok_or_else(|| bad(format!("the entry has no slot `{}`", s.name())))?;
        let word = match hv.words {
            DeviceWords::I32 => Word::I32,
            DeviceWords::U32 => Word::U32,
            _ => return Err(bad(format!("slot `{}` is not integer", s.name()))),
        };
        if hv.ty.dims() != [rows, width] || (dtype != hv.ty.dtype && width == 1) {
            return Err(bad(format!(
                "slot `{}` is {}, the chain needs [{rows}, {width}]",
                s.name(),
                hv.ty
            )));
        }
        Ok((hv.buffer.0 as usize, word))
    };
    if feed.token_slots.is_empty() {
        return Err(bad("a chain feeds at least one token slot".into()));
    }
    let first = feed
        .counters
        .first()
        .ok_or_else(|| bad("a chain needs the positions as its first counter".into()))?;
    if first.stride != 1 || first.offset != 0 {
        return Err(bad("the positions counter must be [rows, 1]".into()));
    }
    let mut kb = KernelBuilder::new("chain_feed", FEED_THREADS);
    let out_p = kb.param("pick", Word::I32, Access::Read);
    let mut plan_buffers = vec![out.buffer.0 as usize];
    let mut token_params = Vec::new();
    for s in &feed.token_slots {
        let (buf, _) = slot(s, DType::I32, 1)?;
        plan_buffers.push(buf);
        token_params.push(kb.param(s.name(), Word::I32, Access::ReadWrite));
    }
    let mut counters = Vec::new();
    for c in &feed.counters {
        if c.offset >= c.stride {
            return Err(bad(format!(
                "counter `{}` offset past its stride",
                c.slot.name()
            )));
        }
        let (buf, word) = slot(&c.slot, DType::I32, c.stride)?;
        plan_buffers.push(buf);
        counters.push((kb.param(c.slot.name(), word, Access::ReadWrite), word, c));
    }
    let paged = match feed.paged {
        Some(p) if p.block_tokens > 0 => {
            let (_, table_hv) = plan
                .slots
                .iter()
                .find(|(x, _)| *x == Slot::SlotMap)
                .ok_or_else(|| bad("a paged chain needs the block table slot".into()))?;
            let table_len = match table_hv.ty.dims() {
                &[r, l] if r == rows => l,
                _ => return Err(bad(format!("the block table is {}", table_hv.ty))),
            };
            let (table_buf, _) = slot(&Slot::SlotMap, DType::I32, table_len)?;
            let (wm_buf, _) = slot(&Slot::WriteMap, DType::I32, 1)?;
            plan_buffers.push(table_buf);
            plan_buffers.push(wm_buf);
            let t = kb.param("table", Word::I32, Access::Read);
            let w = kb.param("write_map", Word::I32, Access::ReadWrite);
            Some((t, w, table_len as u32, p.block_tokens))
        }
        _ => None,
    };
    let base_p = kb.param("base", Word::I32, Access::Read);
    let rec_p = kb.param("record", Word::I32, Access::ReadWrite);

    let r = kb.let_(Ty::U32, group_id(0) * u32c(FEED_THREADS) + local_id());
    kb.begin_if(lt(r.clone(), u32c(rows as u32)));
    let pos_p = counters[0].0;
    let step = kb.let_(
        Ty::U32,
        cast(Ty::U32, load(pos_p, r.clone()) - load(base_p, r.clone())),
    );
    kb.begin_if(lt(step.clone(), u32c(feed.max_steps as u32)));
    for j in 0..width as u32 {
        let at = (step.clone() * u32c(rows as u32) + r.clone()) * u32c(width as u32) + u32c(j);
        kb.store(
            rec_p,
            at,
            load(out_p, r.clone() * u32c(width as u32) + u32c(j)),
        );
    }
    kb.end();
    for p in &token_params {
        kb.store(*p, r.clone(), load(out_p, r.clone() * u32c(width as u32)));
    }
    for (p, word, c) in &counters {
        let at = r.clone() * u32c(c.stride as u32) + u32c(c.offset as u32);
        let one = match word {
            Word::I32 => poot_kernel::build::i32c(1),
            _ => u32c(1),
        };
        kb.store(*p, at.clone(), load(*p, at) + one);
    }
    if let Some((t, w, table_len, bt)) = paged {
        let pos = kb.let_(Ty::U32, cast(Ty::U32, load(pos_p, r.clone())));
        // Clamped: a chain never runs past the capacity, but the table read stays in bounds.
        let block_index =
            poot_kernel::build::min(pos.clone() / u32c(bt), u32c(table_len.saturating_sub(1)));
        let entry = r.clone() * u32c(table_len) + block_index;
        let block = cast(Ty::U32, load(t, entry));
        let slot = block * u32c(bt) + pos % u32c(bt);
        kb.store(w, r.clone(), cast(Ty::I32, slot));
    }
    kb.end();
    Ok(ChainLayout {
        kernel: kb.finish(),
        rows,
        width,
        plan_buffers,
        base_slot: first.slot.clone(),
    })
}

/// Workgroups the feed kernel needs for `rows`.
pub(crate) fn feed_grid(rows: usize) -> [u32; 3] {
    [(rows as u32).div_ceil(FEED_THREADS).max(1), 1, 1]
}
