//! Row reductions computed by their readers. A reduction placed [`Placement::RowReduce`] has no
//! kernel of its own: a kernel that reads it at an index known before its inner loop (one
//! output of a projection, one row of a norm) computes it there, once per row, with the whole
//! workgroup, and keeps it in a variable. So `x * rsqrt(mean(x^2) + eps) * w` is one row kernel,
//! and inside a projection it costs one extra pass over the row per output rather than a
//! launch. A read the kernel cannot serve that way materializes the reduction on the spot.
//!
//! The reduction runs in the order the standalone reduction kernel uses (each thread sums a
//! stride of the axis, then a tree over the workgroup), so a fused norm reassociates its sum of
//! squares exactly as the unfused one does, up to the workgroup width.

use poot_graph_ir::{OpKind, ReduceOp, ValueId};

use super::access::{kty, unflatten};
use super::classify::Placement;
use super::context::KernelCtx;
use super::emit::{combine, reduce_init};
use super::{Lowering, PlanError};
use poot_kernel::build::{load_shared, local_id, u32c};
use poot_kernel::{Expr, Ty};

/// Reductions over at most this many terms, used once (a view may pass them to a few
/// readers) and read by an element-wise kernel at an index its prologue cannot serve, are
/// summed there in place rather than given a kernel: each read costs a few terms.
const SUMMED_IN_PLACE_MAX: usize = 16;

/// Row kernels with fewer rows than this cut their rows into parts (see
/// [`Lowering::begin_row_loops`]).
const ROW_KERNEL_MIN_GROUPS: u32 = 32;

/// Rows no longer than this may be cut: each part recomputes the row's prologue, which for a
/// norm reads the whole row, so the waste stays a few kilobytes a part.
const ROW_PARTS_MAX_LEN: u32 = 16384;

/// How many parts each of `rows` rows of `len` elements is cut into for `wg`-thread
/// workgroups: enough for [`ROW_KERNEL_MIN_GROUPS`] workgroups. A part is a whole number of
/// `wg`-element strides where the row is, so its loop has a fixed trip count; else (gpt-oss's
/// 2880) an equal share of the row of at least a warp's 32 elements.
fn row_parts(rows: u32, len: u32, wg: u32) -> u32 {
    if rows == 0 || rows >= ROW_KERNEL_MIN_GROUPS || len > ROW_PARTS_MAX_LEN {
        return 1;
    }
    let want = ROW_KERNEL_MIN_GROUPS.div_ceil(rows);
    let (units, want) = if len.is_multiple_of(wg) {
        (len / wg, want.min(len / wg))
    } else {
        (len, want.min(len / 32))
    };
    (1..=want)
        .rev()
        .find(|p| units.is_multiple_of(*p))
        .unwrap_or(1)
}

impl Lowering<'_> {
    /// Row reduction `v` at `idx`: from a tiled kernel's table when `idx` is the tile row being
    /// read, from the kernel's prologue when `idx` is known there, else from its own kernel's
    /// buffer (emitted now, before the reader).
    pub(super) fn row_reduce_at(
        &mut self,
        cx: &mut KernelCtx,
        v: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        if let Some(e) = cx.tile_row_value(v, idx) {
            return Ok(e);
        }
        if let Some(e) = cx.prologue_value(v, idx) {
            return Ok(e);
        }
        let e = self.producer_of(v)?;
        let (op, axis, x) = match e.op {
            OpKind::Reduce { op, axis } => (op, axis, e.inputs[0]),
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(v),
                });
            }
        };
        let xt = &self.g.values()[x.index()].ty;
        let ty = kty(xt.dtype);
        let len = xt.dims()[axis];
        if !cx.known_at_prologue(idx) {
            if cx.is_elementwise() && len <= SUMMED_IN_PLACE_MAX && self.cls.uses[v.index()] == 1 {
                // A token's expert slots summed where the residual add reads them.
                let mut xi = idx.to_vec();
                xi[axis] = u32c(0);
                let acc = self.serial_reduce(cx, op, ty, x, &xi, axis, len as u32)?;
                return Ok(cx.kb.let_(ty, acc));
            }
            return self.materialize_row_reduce(cx, v, idx);
        }
        let wg = cx.kb.workgroup();
        cx.begin_prologue_item();
        let acc = cx.kb.var(ty, reduce_init(op, ty));
        let k = cx.kb.begin_for(local_id(), u32c(len as u32), u32c(wg));
        let mut xi = idx.to_vec();
        xi[axis] = k;
        let xv = self.value_at(cx, x, &xi)?;
        cx.kb.set(acc, combine(op, Expr::Var(acc), xv));
        cx.kb.end();
        let sr = cx.reduce_array(ty);
        cx.kb.store_shared(sr, local_id(), Expr::Var(acc));
        self.tree_reduce(cx, &[sr], &|a, b| {
            vec![combine(op, a[0].clone(), b[0].clone())]
        });
        let result = cx.kb.let_(ty, load_shared(sr, u32c(0)));
        // Every thread has read the total before the array is reused.
        cx.kb.barrier();
        cx.end_prologue_item(v, idx, result.clone());
        Ok(result)
    }

    /// `op` over `x` along `axis` at `idx` (whose `axis` entry is replaced), one term after
    /// another by the calling thread, in axis order: a short reduction where each thread
    /// owns an output element.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn serial_reduce(
        &mut self,
        cx: &mut KernelCtx,
        op: ReduceOp,
        ty: Ty,
        x: ValueId,
        idx: &[Expr],
        axis: usize,
        len: u32,
    ) -> Result<Expr, PlanError> {
        let acc = cx.kb.var(ty, reduce_init(op, ty));
        let j = cx.kb.begin_for(u32c(0), u32c(len), u32c(1));
        let mut xi = idx.to_vec();
        xi[axis] = j;
        let xv = self.value_at(cx, x, &xi)?;
        cx.kb.set(acc, combine(op, Expr::Var(acc), xv));
        cx.kb.end();
        Ok(Expr::Var(acc))
    }

    /// Gives `v` its own kernel and buffer (for this and every later reader) and loads it.
    fn materialize_row_reduce(
        &mut self,
        cx: &mut KernelCtx,
        v: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        let eqn = self.cls.producer[v.index()].ok_or_else(|| PlanError::Unplaced {
            label: self.label(v),
        })?;
        self.cls.placement[v.index()] = Placement::Materialized;
        self.emit_reduce(eqn)?;
        self.load_value(cx, v, idx)
    }

    /// Opens the loops of a row kernel over a value of shape `dims`: workgroups over the rows
    /// of the last axis (grid-strided), the row's prologue, then the row's elements across the
    /// workgroup's threads. A few short rows (a decode step's) are each cut into parts, one
    /// workgroup a part, so the step does not wait on one multiprocessor; each part computes
    /// the row's prologue itself, in the same order, so the result does not change. Returns the
    /// element's index, its flat index and the workgroups wanted; close with
    /// [`Lowering::end_row_loops`].
    pub(super) fn begin_row_loops(cx: &mut KernelCtx, dims: &[usize]) -> (Vec<Expr>, Expr, u32) {
        let (lead, len) = match dims.split_last() {
            Some((&len, lead)) => (lead.to_vec(), len),
            None => (Vec::new(), 1),
        };
        let rows = lead.iter().product::<usize>() as u32;
        let wg = cx.kb.workgroup();
        let parts = row_parts(rows, len as u32, wg);
        let group = Self::begin_rows(cx, rows * parts);
        let part_len = len as u32 / parts;
        // A part's first element; none where rows are whole, so their loops stay as they were.
        let (row, start) = if parts == 1 {
            (group, None)
        } else {
            let row = cx.kb.let_(Ty::U32, group.clone() / u32c(parts));
            let start = cx.kb.let_(Ty::U32, group % u32c(parts) * u32c(part_len));
            (row, Some(start))
        };
        let mut idx = unflatten(cx, row.clone(), &lead);
        cx.open_prologue();
        let (first, end) = match start {
            None => (local_id(), u32c(part_len)),
            Some(start) => (start.clone() + local_id(), start + u32c(part_len)),
        };
        let k = cx.kb.begin_for(first, end, u32c(wg));
        idx.push(k.clone());
        let flat = row * u32c(len as u32) + k;
        (idx, flat, rows * parts)
    }

    /// Closes [`Lowering::begin_row_loops`].
    pub(super) fn end_row_loops(cx: &mut KernelCtx) {
        cx.kb.end();
        cx.close_prologue();
        cx.kb.end();
    }
}
