//! Reductions over long rows, split across workgroups. One workgroup reducing a vocabulary's
//! logits (49152 to 262144 values) keeps one multiprocessor busy for tens of microseconds while
//! the rest idle; here a first kernel reduces every row's partitions in parallel (rows x
//! partitions workgroups) into a scratch buffer, and a second, one workgroup per row, combines
//! each row's partial results. It costs one launch more than the one-workgroup kernel.
//!
//! - Sums, maxima and minima combine partial results with their own operator: a sum is
//!   reassociated (per-thread strides, a tree per partition, then the partitions), a maximum or
//!   minimum is exact.
//! - Arg-max keeps a (value, index) pair per partition and combines the pairs in the oracle's
//!   order (NaN above every number, then larger values, ties to the lower index). That order is
//!   total, so the result is the oracle's whatever the split.
//! - Top-k keeps each partition's `k` best pairs; the second kernel picks the `k` best of
//!   those, which are the row's: each of the row's `k` best is among its partition's.
//!
//! Reductions of rows of the same shape whose inputs are ready at the first one's place (the
//! sampling suffix's arg-max, its non-finite flag and the maximum under the softmax) share both
//! kernels, each keeping its own results. Rows are split only when long (past any hidden size,
//! so a norm stays one row kernel inside its projection) and few (many rows give enough
//! workgroups as they are).

use poot_graph_ir::{Eqn, Graph, OpKind, ReduceOp, ValueId};

use super::access::{device_word, kty, to_word, unflatten};
use super::classify::Placement;
use super::context::KernelCtx;
use super::emit::{Candidates, NONE, from_bits, lowest, merge, reduce_init, row_threads, to_bits};
use super::{Lowering, PlanError};
use crate::plan::BufferRole;
use poot_kernel::build::{cast, eq, load, load_shared, local_id, min, u32c};
use poot_kernel::{Expr, SharedId, Ty, Var, Word};

/// Rows at least this long are split: longer than any model's hidden size (the largest dense
/// models use 16384), no longer than the shortest vocabularies (32000).
pub(super) const SPLIT_MIN_LEN: usize = 24576;
/// Elements one workgroup of the first kernel reduces (four per thread).
const PART_LEN: usize = 1024;
/// Rows from which every row keeps one workgroup: they fill the device as they are.
const ROWS_WITHOUT_SPLIT: usize = 128;
/// The most partitions of one row.
const MAX_PARTS: usize = 1024;
/// Threads of a first-kernel workgroup.
const THREADS: u32 = 256;
/// Equations after a split reduction searched for others to share its kernels, and the most
/// reductions one pair of kernels computes.
const GROUP_WINDOW: usize = 128;
const GROUP_MAX: usize = 8;

/// Partitions per row for `rows` rows of `len` elements: 1 when the rows are not split.
fn parts(rows: usize, len: usize) -> usize {
    if len < SPLIT_MIN_LEN || rows >= ROWS_WITHOUT_SPLIT {
        1
    } else {
        len.div_ceil(PART_LEN).min(MAX_PARTS)
    }
}

/// Partitions per row of reduction `e` (`Reduce` or `ArgMax`; 1 for any other op, and for
/// values other than f32, i32 and u32).
pub(super) fn reduction_parts(g: &Graph, e: &Eqn) -> usize {
    let axis = match e.op {
        OpKind::Reduce { axis, .. } | OpKind::ArgMax { axis } => axis,
        _ => return 1,
    };
    let xt = &g.values()[e.inputs[0].index()].ty;
    if !matches!(kty(xt.dtype), Ty::F32 | Ty::I32 | Ty::U32) {
        return 1;
    }
    let len = xt.dims()[axis];
    let rows = xt.shape.n_elems().unwrap_or(0) / len.max(1);
    parts(rows, len)
}

/// Partitions per row of the top `k` of `rows` rows of `len` elements of type `ty`: about
/// `sqrt(len / k)`, so each partition (about `sqrt(len k)` elements, at least `k`) and the
/// combine (`k` per partition) take similar work.
pub(super) fn top_k_parts(rows: usize, len: usize, k: usize, ty: Ty) -> usize {
    if parts(rows, len) == 1 || k == 0 || !matches!(ty, Ty::F32 | Ty::I32 | Ty::U32) {
        return 1;
    }
    (len / k).isqrt().clamp(1, MAX_PARTS)
}

/// Stores member `j`'s result (its value, and its index for arg-max), on thread 0.
type StoreResult<'a> = dyn FnMut(&mut KernelCtx, usize, &Member, &[Expr]) + 'a;

/// One reduction of a split group.
struct Member {
    out: ValueId,
    x: ValueId,
    /// `None` for arg-max.
    reduce: Option<ReduceOp>,
    ty: Ty,
    /// Its first word in the partial-results buffer.
    offset: u32,
}

impl Member {
    /// Words per partial result: the value, and the index for arg-max.
    fn width(&self) -> u32 {
        if self.reduce.is_some() { 1 } else { 2 }
    }
}

impl Lowering<'_> {
    /// Split reduction `i` with the later reductions of the same rows that can share its
    /// kernels. A later one whose input is computed after `i` joins when nothing reads the
    /// group's results before it: the group is then computed at its place (`i` is deferred).
    pub(super) fn emit_split_reductions(&mut self, i: usize) -> Result<(), PlanError> {
        if let Some(group) = self.deferred.remove(&i) {
            return self.emit_split_group(group);
        }
        let e = &self.g.eqns()[i];
        let axis = match e.op {
            OpKind::Reduce { axis, .. } | OpKind::ArgMax { axis } => axis,
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(e.out),
                });
            }
        };
        let x_dims = self.g.values()[e.inputs[0].index()].ty.dims().to_vec();
        let split = reduction_parts(self.g, e);
        let mut group = vec![i];
        // Where the group is computed: here, or at the latest member whose input is not ready
        // here.
        let mut at = i;
        let last = (i + GROUP_WINDOW).min(self.g.eqns().len());
        for j in i + 1..last {
            if group.len() == GROUP_MAX {
                break;
            }
            let ej = &self.g.eqns()[j];
            let same_rows = match ej.op {
                OpKind::Reduce { axis: a, .. } | OpKind::ArgMax { axis: a } => {
                    a == axis && self.g.values()[ej.inputs[0].index()].ty.dims() == x_dims
                }
                _ => false,
            };
            if !same_rows
                || reduction_parts(self.g, ej) != split
                || self.cls.placement[ej.out.index()] != Placement::Materialized
                || self.done.contains(&j)
                || self.deferred_to.contains_key(&j)
            {
                continue;
            }
            let joined_at = if self.available_before(ej.inputs[0], i) {
                at
            } else {
                j
            };
            if group
                .iter()
                .chain([&j])
                .all(|&m| self.first_reader(m) > joined_at)
            {
                group.push(j);
                at = joined_at;
            }
        }
        if at > i {
            for &m in &group {
                self.deferred_to.insert(m, at);
                if m != at {
                    self.done.insert(m);
                }
            }
            self.deferred.insert(at, group);
            return Ok(());
        }
        self.emit_split_group(group)
    }

    /// The first equation reading the result of equation `m` (past every equation when none
    /// does: an output).
    fn first_reader(&self, m: usize) -> usize {
        let out = self.g.eqns()[m].out;
        self.cls.readers[out.index()]
            .iter()
            .map(|&(r, _)| r)
            .min()
            .unwrap_or(usize::MAX)
    }

    /// The two kernels of split reductions `group` (the same rows, the first one's split).
    fn emit_split_group(&mut self, group: Vec<usize>) -> Result<(), PlanError> {
        let i = group[0];
        let e = &self.g.eqns()[i];
        let axis = match e.op {
            OpKind::Reduce { axis, .. } | OpKind::ArgMax { axis } => axis,
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(e.out),
                });
            }
        };
        let (v0, x0) = (e.out, e.inputs[0]);
        let len = self.g.values()[x0.index()].ty.dims()[axis];
        let out_dims = self.g.values()[v0.index()].ty.dims().to_vec();
        let rows = self.n_elems(v0)? as usize;
        let chunk = len.div_ceil(reduction_parts(self.g, e));
        let parts = len.div_ceil(chunk);
        let mut members = Vec::with_capacity(group.len());
        let mut words = 0u32;
        for &j in &group {
            let ej = &self.g.eqns()[j];
            let reduce = match ej.op {
                OpKind::Reduce { op, .. } => Some(op),
                _ => None,
            };
            let m = Member {
                out: ej.out,
                x: ej.inputs[0],
                reduce,
                ty: kty(self.g.values()[ej.inputs[0].index()].ty.dtype),
                offset: words,
            };
            words += m.width() * (rows * parts) as u32;
            members.push(m);
        }
        let size = 4 * u64::from(words);
        self.check_size(v0, size)?;
        let partials = self.new_buffer(BufferRole::Scratch, size);

        // First kernel: one workgroup per (row, partition).
        let mut cx = KernelCtx::labelled("reduce_split", self.label(v0), THREADS);
        let pp = cx.param(partials, Word::U32, true);
        let arrays = Self::merge_arrays(&mut cx, &members, THREADS);
        let item = Self::begin_rows(&mut cx, (rows * parts) as u32);
        let row = cx.kb.let_(Ty::U32, item.clone() / u32c(parts as u32));
        let part = cx.kb.let_(Ty::U32, item.clone() % u32c(parts as u32));
        let oidx = unflatten(&mut cx, row, &out_dims);
        cx.open_prologue();
        let start = cx.kb.let_(Ty::U32, part * u32c(chunk as u32));
        let end = cx.kb.let_(
            Ty::U32,
            min(start.clone() + u32c(chunk as u32), u32c(len as u32)),
        );
        let accs = Self::merge_accs(&mut cx, &members);
        let k = cx.kb.begin_for(start + local_id(), end, u32c(THREADS));
        let mut xidx = oidx.clone();
        xidx[axis] = k.clone();
        for (m, &acc) in members.iter().zip(&accs) {
            let xv = self.value_at(&mut cx, m.x, &xidx)?;
            let xv = cx.kb.let_(m.ty, xv);
            Self::fold(&mut cx, m.reduce, m.ty, acc, &[xv, k.clone()]);
        }
        cx.kb.end();
        let at = |m: &Member| u32c(m.offset) + item.clone() * u32c(m.width());
        self.merge_trees(
            &mut cx,
            &members,
            &accs,
            &arrays,
            &mut |cx, _, m, result| {
                cx.kb.store(pp, at(m), to_bits(m.ty, result[0].clone()));
                if let Some(index) = result.get(1) {
                    cx.kb.store(pp, at(m) + u32c(1), index.clone());
                }
            },
        );
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for((rows * parts) as u32, 1);
        self.push_kernel(cx, grid)?;

        // Second kernel: one workgroup per row, over the row's partitions.
        let wg = row_threads(parts);
        let mut cx = KernelCtx::labelled("reduce_combine", self.label(v0), wg);
        let mut outs = Vec::with_capacity(members.len());
        for m in &members {
            let b = self.scratch_for(m.out)?;
            let dtype = self.g.values()[m.out.index()].ty.dtype;
            let word = if m.reduce.is_some() {
                device_word(dtype)
            } else {
                Word::I32
            };
            outs.push((cx.param(b, word, true), dtype));
        }
        let pp = cx.param(partials, Word::U32, false);
        let arrays = Self::merge_arrays(&mut cx, &members, wg);
        let row = Self::begin_rows(&mut cx, rows as u32);
        let accs = Self::merge_accs(&mut cx, &members);
        let p = cx.kb.begin_for(local_id(), u32c(parts as u32), u32c(wg));
        let first = cx.kb.let_(Ty::U32, row.clone() * u32c(parts as u32) + p);
        for (m, &acc) in members.iter().zip(&accs) {
            let w = cx
                .kb
                .let_(Ty::U32, u32c(m.offset) + first.clone() * u32c(m.width()));
            let mut item = vec![cx.kb.let_(m.ty, from_bits(m.ty, load(pp, w.clone())))];
            if m.reduce.is_none() {
                item.push(cx.kb.let_(Ty::U32, load(pp, w + u32c(1))));
            }
            Self::fold(&mut cx, m.reduce, m.ty, acc, &item);
        }
        cx.kb.end();
        self.merge_trees(
            &mut cx,
            &members,
            &accs,
            &arrays,
            &mut |cx, j, _, result| {
                let (outp, dtype) = outs[j];
                match result.get(1) {
                    Some(index) => cx.kb.store(outp, row.clone(), cast(Ty::I32, index.clone())),
                    None => cx
                        .kb
                        .store(outp, row.clone(), to_word(result[0].clone(), dtype)),
                }
            },
        );
        cx.kb.end();
        let grid = self.groups_for(rows as u32, 1);
        self.push_kernel(cx, grid)?;
        self.done.extend(group);
        Ok(())
    }

    /// Each member's shared arrays for its tree: the values, and the indices for arg-max.
    fn merge_arrays(
        cx: &mut KernelCtx,
        members: &[Member],
        wg: u32,
    ) -> Vec<(SharedId, Option<SharedId>)> {
        members
            .iter()
            .enumerate()
            .map(|(j, m)| {
                let sv = cx.kb.shared(format!("sv{j}"), m.ty, wg);
                let si = m
                    .reduce
                    .is_none()
                    .then(|| cx.kb.shared(format!("si{j}"), Ty::U32, wg));
                (sv, si)
            })
            .collect()
    }

    /// Each member's running result, at its identity (arg-max: the lowest value, no index).
    fn merge_accs(cx: &mut KernelCtx, members: &[Member]) -> Vec<(Var, Var)> {
        members
            .iter()
            .map(|m| {
                let init = match m.reduce {
                    Some(op) => reduce_init(op, m.ty),
                    None => lowest(m.ty),
                };
                (cx.kb.var(m.ty, init), cx.kb.var(Ty::U32, u32c(NONE)))
            })
            .collect()
    }

    /// Merges each member's running results over the workgroup, then `store(cx, j, member,
    /// result)` on thread 0 for member `j` (`result`: the value, and the index for arg-max).
    fn merge_trees(
        &self,
        cx: &mut KernelCtx,
        members: &[Member],
        accs: &[(Var, Var)],
        arrays: &[(SharedId, Option<SharedId>)],
        store: &mut StoreResult<'_>,
    ) {
        for (j, ((m, &(acc, acc_i)), &(sv, si))) in members.iter().zip(accs).zip(arrays).enumerate()
        {
            cx.kb.store_shared(sv, local_id(), Expr::Var(acc));
            let mut shared = vec![sv];
            if let Some(si) = si {
                cx.kb.store_shared(si, local_id(), Expr::Var(acc_i));
                shared.push(si);
            }
            let (reduce, ty) = (m.reduce, m.ty);
            self.tree_reduce(cx, &shared, &|a, b| merge(reduce, ty, a, b));
            cx.kb.begin_if(eq(local_id(), u32c(0)));
            let result: Vec<Expr> = shared.iter().map(|&a| load_shared(a, u32c(0))).collect();
            store(cx, j, m, &result);
            cx.kb.end();
        }
        // Every thread has read the trees before the arrays are written again.
        cx.kb.barrier();
    }

    /// Top-`k` `i` over long rows: each partition's `k` best, then the row's `k` best of those.
    pub(super) fn emit_split_top_k(&mut self, i: usize, k: usize) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (v, x) = (e.out, e.inputs[0]);
        let xt = self.g.values()[x.index()].ty.clone();
        let ty = kty(xt.dtype);
        let dims = xt.dims().to_vec();
        let len = dims[dims.len() - 1];
        let rows = self.n_elems(x)? as usize / len.max(1);
        let chunk = len.div_ceil(top_k_parts(rows, len, k, ty));
        let parts = len.div_ceil(chunk);
        let size = 4 * 2 * (rows * parts * k) as u64;
        self.check_size(v, size)?;
        let partials = self.new_buffer(BufferRole::Scratch, size);
        let kk = k as u32;

        let mut cx = KernelCtx::labelled("top_k_split", self.label(v), THREADS);
        let pp = cx.param(partials, Word::U32, true);
        let item = Self::begin_rows(&mut cx, (rows * parts) as u32);
        let row = cx.kb.let_(Ty::U32, item.clone() / u32c(parts as u32));
        let part = cx.kb.let_(Ty::U32, item.clone() % u32c(parts as u32));
        let ridx = unflatten(&mut cx, row, &dims[..dims.len() - 1]);
        cx.open_prologue();
        let start = cx.kb.let_(Ty::U32, part * u32c(chunk as u32));
        let end = cx.kb.let_(
            Ty::U32,
            min(start.clone() + u32c(chunk as u32), u32c(len as u32)),
        );
        let cands = Candidates::Row { x, row: &ridx };
        self.select_top_k(
            &mut cx,
            ty,
            k,
            &cands,
            (start, end),
            &mut |cx, j, value, index| {
                let at = cx.kb.let_(Ty::U32, (item.clone() * u32c(kk) + j) * u32c(2));
                cx.kb.store(pp, at.clone(), to_bits(ty, value));
                cx.kb.store(pp, at + u32c(1), index);
            },
        )?;
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for((rows * parts) as u32, 1);
        self.push_kernel(cx, grid)?;

        let wg = row_threads(parts * k);
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("top_k_combine", self.label(v), wg);
        let outp = cx.param(out, Word::I32, true);
        let pp = cx.param(partials, Word::U32, false);
        let row = Self::begin_rows(&mut cx, rows as u32);
        let base = cx
            .kb
            .let_(Ty::U32, row.clone() * u32c((parts * k * 2) as u32));
        let cands = Candidates::Pairs { buf: pp, base };
        self.select_top_k(
            &mut cx,
            ty,
            k,
            &cands,
            (u32c(0), u32c((parts * k) as u32)),
            &mut |cx, j, _, index| {
                cx.kb
                    .store(outp, row.clone() * u32c(kk) + j, cast(Ty::I32, index));
            },
        )?;
        cx.kb.end();
        let grid = self.groups_for(rows as u32, 1);
        self.push_kernel(cx, grid)
    }
}
