//! Horizontal fusion: independent work that would be separate launches shares one kernel.
//!
//! - Sibling contractions, several `MatMul`s reading the same left side (a layer's Q, K and V
//!   projections), run as one contraction over their concatenated output columns: each
//!   workgroup computes one column of one of them, and what the left side needs per row (a
//!   norm's sum of squares) is computed once per workgroup for all of them. Each sum is formed
//!   exactly as the contraction alone forms it.
//! - Cache writes of one kind (`DynamicUpdateSlice` into a contiguous cache, `ScatterUpdate`
//!   into a paged pool) whose inputs are all ready and that touch disjoint buffers (a layer's
//!   key and value writes) run one after the other in one kernel.
//!
//! The later equations are computed at the first one's place and skipped when reached. A group
//! that would bind more buffers than the target allows is not formed.

use poot_graph_ir::{OpKind, ValueId};

use super::access::unflatten;
use super::classify::Placement;
use super::context::KernelCtx;
use super::emit::row_threads;
use super::{Lowering, PlanError};
use crate::precision::decoded_blocks;
use poot_kernel::build::{eq, load_shared, local_id, lt, u32c};
use poot_kernel::{Expr, Ty, Word};

/// Cache writes this many equations apart at most are considered for one kernel.
const UPDATE_WINDOW: usize = 64;

impl Lowering<'_> {
    /// Whether `v` can be computed or loaded before equation `i` runs: every buffered value its
    /// computation reads was produced earlier (a deferred reduction where it is computed).
    pub(super) fn available_before(&self, v: ValueId, i: usize) -> bool {
        match self.cls.placement[v.index()] {
            Placement::Input => true,
            Placement::Materialized | Placement::View => self.cls.producer[v.index()]
                .is_some_and(|p| self.deferred_to.get(&p).copied().unwrap_or(p) < i),
            Placement::Inline | Placement::RowReduce => {
                self.cls.producer[v.index()].is_some_and(|p| {
                    self.g.eqns()[p]
                        .inputs
                        .iter()
                        .all(|&w| self.available_before(w, i))
                })
            }
            // A decoding of stored blocks that a tiled kernel reads from the blocks themselves.
            Placement::Absorbed => decoded_blocks(self.g, v).is_some(),
        }
    }

    /// The buffered values computing `v` in place reads (or `None` when it reads a value only
    /// another kernel computes).
    fn leaves(&self, v: ValueId, out: &mut Vec<ValueId>) -> Option<()> {
        match self.cls.placement[v.index()] {
            Placement::Input | Placement::Materialized | Placement::View => {
                out.push(v);
                Some(())
            }
            Placement::Inline | Placement::RowReduce => {
                let p = self.cls.producer[v.index()]?;
                for &w in &self.g.eqns()[p].inputs {
                    self.leaves(w, out)?;
                }
                Some(())
            }
            Placement::Absorbed => {
                out.push(decoded_blocks(self.g, v)?.weights);
                Some(())
            }
        }
    }

    /// Contraction `i` with the later contractions that read the same left side, in one kernel
    /// when there are any.
    /// Routed contraction `i` and the later ones reading its left side with its ids (a layer's
    /// gate and up stacks), in order: one kernel computes them all where it reads their stacks.
    fn routed_siblings(&self, i: usize) -> Vec<usize> {
        let e = &self.g.eqns()[i];
        let (lhs, ids) = (e.inputs[0], e.inputs[2]);
        let mut group = vec![i];
        for &(j, operand) in &self.cls.readers[lhs.index()] {
            let ej = &self.g.eqns()[j];
            let sibling = j > i
                && operand == 0
                && ej.op == OpKind::IndexedMatMul
                && ej.inputs[2] == ids
                && !self.done.contains(&j)
                && self.cls.placement[ej.out.index()] == Placement::Materialized
                && self.available_before(ej.inputs[1], i);
            if sibling && !group.contains(&j) {
                group.push(j);
            }
        }
        group
    }

    /// Routed contraction `i`: as tiles over each expert's rows where the graph decodes its
    /// stack for them; else with its siblings in one kernel that reads the stacks in units
    /// where one takes them, else alone in one, else a workgroup per output (also with
    /// `POOT_TUNING=routed=0`).
    pub(super) fn emit_routed(&mut self, i: usize) -> Result<(), PlanError> {
        let tiled = |this: &Self, j: usize| super::gemm::routed_tiled(this.g, j, this.target);
        if tiled(self, i).is_some() {
            // The graph decodes the stack for these tiles alone: no other kernel reads it.
            let group: Vec<usize> = (self.routed_siblings(i).into_iter())
                .filter(|&j| tiled(self, j).is_some())
                .collect();
            let alone = [i];
            for g in [&group[..], &alone[..]] {
                if self.emit_routed_tiles(g)? {
                    self.done.extend(g.iter().copied());
                    return Ok(());
                }
            }
            return Err(PlanError::Unplaced {
                label: self.label(self.g.eqns()[i].out),
            });
        }
        if self.target.tuning.routed_units {
            let group = self.routed_siblings(i);
            let alone = [i];
            let tries: &[&[usize]] = if group.len() > 1 {
                &[&group, &alone]
            } else {
                &[&alone]
            };
            for &g in tries {
                if self.emit_indexed_gemv(g)? || self.emit_grouped_gemv(g)? {
                    self.done.extend(g.iter().copied());
                    return Ok(());
                }
            }
        }
        self.emit_indexed_matmul(i)
    }

    pub(super) fn emit_sibling_matmuls(
        &mut self,
        i: usize,
        transpose_rhs: bool,
    ) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (lhs, rhs) = (e.inputs[0], e.inputs[1]);
        let od = self.g.values()[e.out.index()].ty.dims().to_vec();
        let rhs_rank = self.g.values()[rhs.index()].ty.rank();
        let mut group = vec![i];
        for &(j, operand) in &self.cls.readers[lhs.index()] {
            let ej = &self.g.eqns()[j];
            let jd = self.g.values()[ej.out.index()].ty.dims();
            let sibling = j > i
                && operand == 0
                && ej.op == (OpKind::MatMul { transpose_rhs })
                && !self.done.contains(&j)
                && !self.library.contains(&j)
                && !self.cls.attention.contains_key(&j)
                && self.cls.placement[ej.out.index()] == Placement::Materialized
                && jd.len() == od.len()
                && jd[..od.len() - 1] == od[..od.len() - 1]
                && self.g.values()[ej.inputs[1].index()].ty.rank() == rhs_rank
                && self.available_before(ej.inputs[1], i);
            if sibling && !group.contains(&j) {
                group.push(j);
            }
        }
        if group.len() == 1 || od.len() < 2 {
            return self.emit_matmul(i, transpose_rhs);
        }
        if self.emit_tiled_matmuls(&group)? || self.emit_gemv(&group)? {
            self.done.extend(group);
            return Ok(());
        }
        let cx = self.sibling_kernel(&group, transpose_rhs)?;
        if cx.binding_count() as u32 > self.target.limits.max_bindings {
            return self.emit_matmul(i, transpose_rhs);
        }
        let rows: usize = od[..od.len() - 1].iter().product();
        let columns: usize = group
            .iter()
            .map(|&j| {
                *self.g.values()[self.g.eqns()[j].out.index()]
                    .ty
                    .dims()
                    .last()
                    .unwrap_or(&1)
            })
            .sum();
        let grid = self.groups_for((rows * columns) as u32, 1);
        self.push_kernel(cx, grid)?;
        self.done.extend(group);
        Ok(())
    }

    /// The kernel of sibling contractions `group` (same left side, same leading output axes).
    fn sibling_kernel(
        &mut self,
        group: &[usize],
        transpose_rhs: bool,
    ) -> Result<KernelCtx, PlanError> {
        let first = &self.g.eqns()[group[0]];
        let (lhs, first_out) = (first.inputs[0], first.out);
        let lhs_dims = self.g.values()[lhs.index()].ty.dims().to_vec();
        let k_len = lhs_dims[lhs_dims.len() - 1];
        let od = self.g.values()[first_out.index()].ty.dims().to_vec();
        let lead = od[..od.len() - 1].to_vec();
        let rows: usize = lead.iter().product();
        // (output, weights, first column, columns) of each sibling.
        let mut parts = Vec::with_capacity(group.len());
        let mut columns = 0usize;
        for &j in group {
            let e = &self.g.eqns()[j];
            let n = *self.g.values()[e.out.index()]
                .ty
                .dims()
                .last()
                .unwrap_or(&1);
            parts.push((e.out, e.inputs[1], columns, n));
            columns += n;
        }
        let wg = row_threads(k_len);
        let mut cx = KernelCtx::labelled("matmul", self.label(first_out), wg);
        let mut outs = Vec::with_capacity(parts.len());
        for &(v, _, _, _) in &parts {
            let b = self.scratch_for(v)?;
            outs.push(cx.param(b, Word::F32, true));
        }
        let sv = cx.kb.shared("sv", Ty::F32, wg);
        let o = Self::begin_rows(&mut cx, (rows * columns) as u32);
        let row = cx.kb.let_(Ty::U32, o.clone() / u32c(columns as u32));
        let col = cx.kb.let_(Ty::U32, o % u32c(columns as u32));
        let lidx = unflatten(&mut cx, row.clone(), &lead);
        cx.open_prologue();
        let acc = cx.kb.var(Ty::F32, Expr::F32(0.0));
        // One branch per sibling, chosen by the column (the same for the whole workgroup).
        for (s, &(_, w, start, n)) in parts.iter().enumerate() {
            if s + 1 < parts.len() {
                cx.kb.begin_if(lt(col.clone(), u32c((start + n) as u32)));
            }
            let c = cx.kb.let_(Ty::U32, col.clone() - u32c(start as u32));
            let k = cx.kb.begin_for(local_id(), u32c(k_len as u32), u32c(wg));
            let mut li = lidx.clone();
            li.push(k.clone());
            let a = self.value_at(&mut cx, lhs, &li)?;
            let w_rank = self.g.values()[w.index()].ty.rank();
            let mut ri = if w_rank > 2 {
                lidx[..lidx.len() - 1].to_vec()
            } else {
                Vec::new()
            };
            if transpose_rhs {
                ri.extend([c, k]);
            } else {
                ri.extend([k, c]);
            }
            let wv = self.value_at(&mut cx, w, &ri)?;
            cx.kb.set(acc, Expr::Var(acc) + a * wv);
            cx.kb.end();
            if s + 1 < parts.len() {
                cx.kb.otherwise();
            }
        }
        for _ in 1..parts.len() {
            cx.kb.end();
        }
        cx.kb.store_shared(sv, local_id(), Expr::Var(acc));
        self.tree_reduce(&mut cx, &[sv], &|a, b| vec![a[0].clone() + b[0].clone()]);
        cx.kb.begin_if(eq(local_id(), u32c(0)));
        for (s, (&(_, _, start, n), &p)) in parts.iter().zip(&outs).enumerate() {
            if s + 1 < parts.len() {
                cx.kb.begin_if(lt(col.clone(), u32c((start + n) as u32)));
            }
            let at = row.clone() * u32c(n as u32) + (col.clone() - u32c(start as u32));
            cx.kb.store(p, at, load_shared(sv, u32c(0)));
            if s + 1 < parts.len() {
                cx.kb.otherwise();
            }
        }
        for _ in 1..parts.len() {
            cx.kb.end();
        }
        cx.kb.end();
        cx.kb.barrier();
        cx.close_prologue();
        cx.kb.end();
        Ok(cx)
    }

    /// Cache write `i` with the later cache writes of its kind it can share a kernel with.
    pub(super) fn emit_update_group(&mut self, i: usize) -> Result<(), PlanError> {
        let kind = std::mem::discriminant(&self.g.eqns()[i].op);
        let mut group = vec![i];
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        if !self.update_footprint(i, &mut reads, &mut writes) {
            return self.emit_cache_write(i);
        }
        let last = (i + UPDATE_WINDOW).min(self.g.eqns().len());
        for j in i + 1..last {
            if std::mem::discriminant(&self.g.eqns()[j].op) != kind
                || self.done.contains(&j)
                || self.cls.placement[self.g.eqns()[j].out.index()] != Placement::Materialized
            {
                continue;
            }
            let (mut r, mut w) = (Vec::new(), Vec::new());
            let independent = self.update_footprint(j, &mut r, &mut w)
                && r.iter().all(|&v| self.available_before(v, i))
                && !r.iter().chain(&w).any(|v| writes.contains(v))
                && !w.iter().any(|v| reads.contains(v));
            if independent {
                group.push(j);
                reads.extend(r);
                writes.extend(w);
            }
        }
        // One buffer per value read or written is an upper bound on the kernel's bindings.
        let mut buffers: Vec<ValueId> = reads.iter().chain(&writes).copied().collect();
        buffers.sort_by_key(|v| v.index());
        buffers.dedup();
        if group.len() == 1 || buffers.len() as u32 >= self.target.limits.max_bindings {
            return self.emit_cache_write(i);
        }
        let wg = group
            .iter()
            .map(|&j| self.cache_write_threads(j))
            .max()
            .unwrap_or(1);
        let v = self.g.eqns()[i].out;
        let name = match self.g.eqns()[i].op {
            OpKind::ScatterUpdate { .. } => "scatter",
            _ => "update_slice",
        };
        let mut cx = KernelCtx::labelled(name, self.label(v), wg);
        let mut grid = [1, 1, 1];
        for &j in &group {
            let g = match self.g.eqns()[j].op {
                OpKind::ScatterUpdate { axis } => self.scatter_body(&mut cx, j, axis)?,
                _ => self.update_slice_body(&mut cx, j)?,
            };
            grid[0] = grid[0].max(g[0]);
        }
        self.push_kernel(cx, grid)?;
        self.done.extend(group);
        Ok(())
    }

    /// Cache write `i` in a kernel of its own.
    fn emit_cache_write(&mut self, i: usize) -> Result<(), PlanError> {
        match self.g.eqns()[i].op {
            OpKind::ScatterUpdate { axis } => self.emit_scatter(i, axis),
            _ => self.emit_update_slice(i),
        }
    }

    /// The workgroup width cache write `i`'s body wants.
    fn cache_write_threads(&self, i: usize) -> u32 {
        match self.g.eqns()[i].op {
            OpKind::ScatterUpdate { .. } => super::emit::ELEMENTWISE_THREADS,
            _ => self.update_slice_threads(i),
        }
    }

    /// What cache write `i` reads (its new values' and positions' buffered inputs, the operand)
    /// and writes (the operand, updated in place, and its result); `false` when it reads a value
    /// only another kernel computes.
    fn update_footprint(
        &self,
        i: usize,
        reads: &mut Vec<ValueId>,
        writes: &mut Vec<ValueId>,
    ) -> bool {
        let e = &self.g.eqns()[i];
        for &w in &e.inputs[1..] {
            if self.leaves(w, reads).is_none() {
                return false;
            }
        }
        reads.push(e.inputs[0]);
        writes.extend([e.inputs[0], e.out]);
        true
    }
}
