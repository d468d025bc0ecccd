//! One kernel per buffered value, by the kind of op that produces it. These are the plain,
//! correct first versions of each kernel shape; speed comes from specializing them, behind the
//! same oracle checks.

use poot_graph_ir::{DType, OpKind, ReduceOp, Storage, ValueId};

use super::access::{device_word, f16_bits, flatten, kty, to_word, unflatten};
use super::classify::Placement;
use super::context::{KernelCtx, LBuf};
use super::{Lowering, fault, split};
use crate::refusal::PlanError;
use poot_kernel::build::{bin, cmp, shuffle_xor};
use poot_kernel::build::{
    eq, group_count_x, group_id, load, load_half, load_shared, local_id, lt, select, u32c, un,
};
use poot_kernel::{BinOp, CmpOp, Expr, Half, ParamId, SharedId, Ty, UnOp, Word};

/// How a tree reduction merges two threads' partial values (one expression per shared array).
type Combine<'a> = dyn Fn(&[Expr], &[Expr]) -> Vec<Expr> + 'a;

/// Threads per workgroup of element-wise kernels.
pub(super) const ELEMENTWISE_THREADS: u32 = 256;

/// An index that marks "no element yet" in arg-max and top-k reductions.
pub(super) const NONE: u32 = u32::MAX;

/// Threads of a row kernel (one workgroup per row): a power of two between 32 and 256 that
/// covers `len` when it can.
pub(super) fn row_threads(len: usize) -> u32 {
    (len.next_power_of_two().min(256) as u32).max(32)
}

/// Whether an f32 is NaN, from its bits (a shader compiler that assumes finite floats may fold
/// `x != x` to false; lavapipe folds such identities).
fn is_nan(x: Expr) -> Expr {
    cmp(
        CmpOp::Gt,
        un(UnOp::BitsToU32, x) & u32c(0x7fff_ffff),
        u32c(0x7f80_0000),
    )
}

fn and(a: Expr, b: Expr) -> Expr {
    bin(BinOp::And, a, b)
}

fn or(a: Expr, b: Expr) -> Expr {
    bin(BinOp::Or, a, b)
}

/// Whether `(va, ia)` ranks before `(vb, ib)` in the oracle's arg-max / top-k order: NaN above
/// every number, then larger values, ties to the lower index. `None` indices rank last.
pub(super) fn ranks_before(ty: Ty, va: Expr, ia: Expr, vb: Expr, ib: Expr) -> Expr {
    let a_some = cmp(CmpOp::Ne, ia.clone(), u32c(NONE));
    let b_none = eq(ib.clone(), u32c(NONE));
    let lower_index = lt(ia, ib);
    let by_value = if ty == Ty::F32 {
        let (na, nb) = (is_nan(va.clone()), is_nan(vb.clone()));
        let both_nan = and(na.clone(), nb.clone());
        let a_nan_only = and(na, bin(BinOp::Xor, nb.clone(), Expr::Bool(true)));
        let neither = and(
            bin(BinOp::Xor, is_nan(va.clone()), Expr::Bool(true)),
            bin(BinOp::Xor, nb, Expr::Bool(true)),
        );
        let numeric = or(
            cmp(CmpOp::Gt, va.clone(), vb.clone()),
            and(eq(va, vb), lower_index.clone()),
        );
        or(
            a_nan_only,
            or(and(both_nan, lower_index), and(neither, numeric)),
        )
    } else {
        or(
            cmp(CmpOp::Gt, va.clone(), vb.clone()),
            and(eq(va, vb), lower_index),
        )
    };
    and(a_some, or(b_none, by_value))
}

/// Merges two partial results of a reduction (`reduce`, or arg-max when `None`, over values of
/// type `ty`): `[value]`, or `[value, index]` for arg-max, where `b` replaces `a` when it ranks
/// before it. Every tree and split of a reduction merges with this.
pub(super) fn merge(reduce: Option<ReduceOp>, ty: Ty, a: &[Expr], b: &[Expr]) -> Vec<Expr> {
    match reduce {
        Some(op) => vec![combine(op, a[0].clone(), b[0].clone())],
        None => {
            let take_b = ranks_before(ty, b[0].clone(), b[1].clone(), a[0].clone(), a[1].clone());
            vec![
                select(take_b.clone(), b[0].clone(), a[0].clone()),
                select(take_b, b[1].clone(), a[1].clone()),
            ]
        }
    }
}

/// Where a top-k selection reads its candidates.
pub(super) enum Candidates<'a> {
    /// Positions of the last axis of `x` in the row at `row` (every axis but the last): a
    /// candidate's index is its position.
    Row { x: ValueId, row: &'a [Expr] },
    /// Word pairs (the value's bits, the index) of `buf` from word `base` on.
    Pairs { buf: ParamId, base: Expr },
}

impl Lowering<'_> {
    /// Workgroups for `items` independent items, each handled by `per_group` threads in
    /// grid-stride loops.
    pub(super) fn groups_for(&self, items: u32, per_group: u32) -> [u32; 3] {
        [
            items
                .div_ceil(per_group)
                .clamp(1, self.target.limits.max_groups_x),
            1,
            1,
        ]
    }

    /// Opens `for i in thread..n step threads` over the whole grid; returns `i`.
    pub(super) fn begin_grid_stride(cx: &mut KernelCtx, n: u32) -> Expr {
        let wg = cx.kb.workgroup();
        let start = group_id(0) * u32c(wg) + local_id();
        let step = group_count_x() * u32c(wg);
        cx.kb.begin_for(start, u32c(n), step)
    }

    /// Opens `for row in group..rows step groups`; returns `row`.
    pub(super) fn begin_rows(cx: &mut KernelCtx, rows: u32) -> Expr {
        cx.kb.begin_for(group_id(0), u32c(rows), group_count_x())
    }

    /// The whole workgroup's combination of each thread's `acc`, left in `shared[0]`: pairs
    /// `(i, i + s)` combined in shared memory for `s = threads / 2, .., 1`. Where the target
    /// shuffles, the last 32 are combined in registers by the first 32 threads (a warp, or half
    /// a 64-lane wavefront) in the same pairs (lane 0 sees exactly the association of the
    /// shared-memory tree), one barrier instead of six.
    pub(super) fn tree_reduce(
        &self,
        cx: &mut KernelCtx,
        arrays: &[SharedId],
        combine: &Combine<'_>,
    ) {
        let wg = cx.kb.workgroup();
        // At most 32 lanes combine in registers: shuffle masks stay below 32 (the kernel IR's
        // rule), so a 64-lane wavefront's first half does what a CUDA warp does.
        let warp = self.target.limits.subgroup_size.min(32);
        let shuffles = self.target.team_shuffles()
            && wg >= warp
            && wg.is_power_of_two()
            && arrays.iter().all(|&a| cx.kb.shared_ty(a) != Ty::Bool);
        let last_shared = if shuffles { warp } else { 1 };
        cx.kb.barrier();
        let mut s = wg / 2;
        while s >= last_shared {
            cx.kb.begin_if(lt(local_id(), u32c(s)));
            let mine: Vec<Expr> = arrays.iter().map(|&a| load_shared(a, local_id())).collect();
            let theirs: Vec<Expr> = arrays
                .iter()
                .map(|&a| load_shared(a, local_id() + u32c(s)))
                .collect();
            let merged = combine(&mine, &theirs);
            let vars: Vec<Expr> = merged
                .into_iter()
                .zip(arrays)
                .map(|(m, &a)| cx.kb.let_(cx.kb.shared_ty(a), m))
                .collect();
            for (&a, v) in arrays.iter().zip(vars) {
                cx.kb.store_shared(a, local_id(), v);
            }
            cx.kb.end();
            cx.kb.barrier();
            s /= 2;
        }
        if shuffles {
            // The whole first warp takes this branch, as shuffles require.
            cx.kb.begin_if(lt(local_id(), u32c(warp)));
            let mut mine: Vec<Expr> = arrays
                .iter()
                .map(|&a| cx.kb.let_(cx.kb.shared_ty(a), load_shared(a, local_id())))
                .collect();
            let mut m = warp / 2;
            while m > 0 {
                let theirs: Vec<Expr> = mine
                    .iter()
                    .zip(arrays)
                    .map(|(x, &a)| cx.kb.let_(cx.kb.shared_ty(a), shuffle_xor(x.clone(), m)))
                    .collect();
                mine = combine(&mine, &theirs)
                    .into_iter()
                    .zip(arrays)
                    .map(|(x, &a)| cx.kb.let_(cx.kb.shared_ty(a), x))
                    .collect();
                m /= 2;
            }
            cx.kb.begin_if(eq(local_id(), u32c(0)));
            for (&a, x) in arrays.iter().zip(mine) {
                cx.kb.store_shared(a, u32c(0), x);
            }
            cx.kb.end();
            cx.kb.end();
            cx.kb.barrier();
        }
    }

    /// Ends a one-workgroup-per-output contraction: sums every thread's `acc` and stores it at
    /// `out[o]`, then closes the output loop.
    pub(super) fn finish_row_sum(
        &self,
        cx: &mut KernelCtx,
        sv: SharedId,
        acc: poot_kernel::Var,
        outp: poot_kernel::ParamId,
        o: Expr,
    ) {
        cx.kb.store_shared(sv, local_id(), Expr::Var(acc));
        self.tree_reduce(cx, &[sv], &|a, b| vec![a[0].clone() + b[0].clone()]);
        cx.kb.begin_if(eq(local_id(), u32c(0)));
        cx.kb.store(outp, o, load_shared(sv, u32c(0)));
        cx.kb.end();
        cx.kb.barrier();
        cx.close_prologue();
        cx.kb.end();
    }

    pub(super) fn emit_elementwise(&mut self, i: usize) -> Result<(), PlanError> {
        let v = self.g.eqns()[i].out;
        if let Some(mms) = self.cls.epilogues.get(&v.index()).cloned() {
            return self.emit_epilogue(i, &mms);
        }
        let n = self.n_elems(v)?;
        let dims = self.g.values()[v.index()].ty.dims().to_vec();
        let dtype = self.g.values()[v.index()].ty.dtype;
        let out = self.scratch_for(v)?;
        if self.cls.eqn_reads_row_reduce(self.g, i) && !dims.is_empty() {
            let wg = row_threads(dims[dims.len() - 1]);
            let mut cx = KernelCtx::labelled("row_map", self.label(v), wg).sums_short_reductions();
            let outp = cx.param(out, device_word(dtype), true);
            let (idx, flat, groups) = Self::begin_row_loops(&mut cx, &dims);
            let value = self.compute(&mut cx, v, &idx)?;
            cx.kb.store(outp, flat, to_word(value, dtype));
            Self::end_row_loops(&mut cx);
            let grid = self.groups_for(groups, 1);
            return self.push_kernel(cx, grid);
        }
        let mut cx =
            KernelCtx::labelled("map", self.label(v), ELEMENTWISE_THREADS).sums_short_reductions();
        let outp = cx.param(out, device_word(dtype), true);
        let flat = Self::begin_grid_stride(&mut cx, n);
        let idx = unflatten(&mut cx, flat.clone(), &dims);
        let value = self.compute(&mut cx, v, &idx)?;
        cx.kb.store(outp, flat, to_word(value, dtype));
        cx.kb.end();
        let grid = self.groups_for(n, ELEMENTWISE_THREADS);
        self.push_kernel(cx, grid)
    }

    /// Copies every word of `v` from `src` to `dst`.
    pub(super) fn emit_copy(&mut self, v: ValueId, src: LBuf, dst: LBuf) -> Result<(), PlanError> {
        let n = self.n_elems(v)?;
        let word = device_word(self.g.values()[v.index()].ty.dtype);
        let mut cx = KernelCtx::labelled("copy", self.label(v), ELEMENTWISE_THREADS);
        let grid = match (self.halves(src), self.halves(dst)) {
            (false, false) => {
                let (s, d) = (cx.param(src, word, false), cx.param(dst, word, true));
                let i = Self::begin_grid_stride(&mut cx, n);
                cx.kb.store(d, i.clone(), load(s, i));
                self.groups_for(n, ELEMENTWISE_THREADS)
            }
            (true, true) => {
                let words = n.div_ceil(2);
                let (s, d) = (
                    cx.param(src, Word::U32, false),
                    cx.param(dst, Word::U32, true),
                );
                let i = Self::begin_grid_stride(&mut cx, words);
                cx.kb.store(d, i.clone(), load(s, i));
                self.groups_for(words, ELEMENTWISE_THREADS)
            }
            (true, false) => {
                let (s, d) = (cx.param(src, Word::U32, false), cx.param(dst, word, true));
                let i = Self::begin_grid_stride(&mut cx, n);
                cx.kb.store(d, i.clone(), load_half(s, i, Half::F16));
                self.groups_for(n, ELEMENTWISE_THREADS)
            }
            (false, true) => {
                if n % 2 != 0 {
                    return Err(self.unsupported("copy into an f16 state", v, DType::F16));
                }
                let (s, d) = (cx.param(src, word, false), cx.param(dst, Word::U32, true));
                let i = Self::begin_grid_stride(&mut cx, n / 2);
                let lo = f16_bits(&mut cx, load(s, i.clone() * u32c(2)));
                let hi = f16_bits(&mut cx, load(s, i.clone() * u32c(2) + u32c(1)));
                cx.kb.store(d, i, lo | (hi << u32c(16)));
                self.groups_for(n / 2, ELEMENTWISE_THREADS)
            }
        };
        cx.kb.end();
        self.push_kernel(cx, grid)
    }

    /// How the writes of `x`'s elements (an update's new values) into buffer `out` spread over
    /// threads: one element a thread, or into a buffer of halves one word, two neighbours of
    /// the last axis, a thread (refused as `what` unless the words are whole: `whole_words`).
    fn element_writes(
        &self,
        v: ValueId,
        out: LBuf,
        x: ValueId,
        whole_words: bool,
        what: &'static str,
    ) -> Result<ElementWrites, PlanError> {
        let dtype = self.g.values()[v.index()].ty.dtype;
        let halves = self.halves(out);
        if halves && !whole_words {
            return Err(self.unsupported(what, v, dtype));
        }
        let per = if halves { 2 } else { 1 };
        let mut iter_dims = self.g.values()[x.index()].ty.dims().to_vec();
        if let Some(last) = iter_dims.last_mut() {
            *last /= per;
        }
        Ok(ElementWrites {
            halves,
            iter_dims,
            n: self.n_elems(x)? / per as u32,
            word: if halves {
                Word::U32
            } else {
                device_word(dtype)
            },
            dtype,
        })
    }

    /// Stores `x` at `idx` into element `at` of `outp` as `writes` says: the element, or the
    /// word of halves holding it and its last-axis neighbour.
    fn store_element(
        &mut self,
        cx: &mut KernelCtx,
        writes: &ElementWrites,
        outp: ParamId,
        at: Expr,
        x: ValueId,
        idx: &[Expr],
    ) -> Result<(), PlanError> {
        if writes.halves {
            let pair = self.half_pair(cx, x, idx)?;
            cx.kb.store(outp, at >> u32c(1), pair);
        } else {
            let value = self.value_at(cx, x, idx)?;
            cx.kb.store(outp, at, to_word(value, writes.dtype));
        }
        Ok(())
    }

    /// The word holding `x`'s elements at `idx` and at its last axis's next index, as f16
    /// halves (the first in the low half).
    fn half_pair(
        &mut self,
        cx: &mut KernelCtx,
        x: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        let mut next = idx.to_vec();
        if let Some(last) = next.last_mut() {
            *last = last.clone() + u32c(1);
        }
        let lo = self.value_at(cx, x, idx)?;
        let lo = f16_bits(cx, lo);
        let hi = self.value_at(cx, x, &next)?;
        let hi = f16_bits(cx, hi);
        Ok(lo | (hi << u32c(16)))
    }

    pub(super) fn emit_reduce(&mut self, i: usize) -> Result<(), PlanError> {
        if split::reduction_parts(self.g, &self.g.eqns()[i]) > 1 {
            return self.emit_split_reductions(i);
        }
        let e = &self.g.eqns()[i];
        let (v, x) = (e.out, e.inputs[0]);
        let (axis, reduce) = match e.op {
            OpKind::Reduce { op, axis } => (axis, Some(op)),
            OpKind::ArgMax { axis } => (axis, None),
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(v),
                });
            }
        };
        let xt = self.g.values()[x.index()].ty.clone();
        let ty = kty(xt.dtype);
        let out_dims = self.g.values()[v.index()].ty.dims().to_vec();
        let out_dtype = self.g.values()[v.index()].ty.dtype;
        let len = xt.dims()[axis];
        let inner: usize = xt.dims()[axis + 1..].iter().product();
        if let Some(op) = reduce
            && len <= SHORT_AXIS
            && inner >= SHORT_AXIS_MIN_INNER
        {
            return self.emit_short_axis_reduce(i, op, axis);
        }
        let rows = self.n_elems(v)?;
        let wg = row_threads(len);
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled(
            if reduce.is_some() { "reduce" } else { "argmax" },
            self.label(v),
            wg,
        );
        let outp = cx.param(out, device_word(out_dtype), true);
        let sv = cx.kb.shared("sv", ty, wg);
        let si = if reduce.is_none() {
            Some(cx.kb.shared("si", Ty::U32, wg))
        } else {
            None
        };
        let row = Self::begin_rows(&mut cx, rows);
        let oidx = unflatten(&mut cx, row.clone(), &out_dims);
        cx.open_prologue();
        let init = match reduce {
            Some(op) => reduce_init(op, ty),
            None => lowest(ty),
        };
        let acc = cx.kb.var(ty, init);
        let acc_i = cx.kb.var(Ty::U32, u32c(NONE));
        let k = cx.kb.begin_for(local_id(), u32c(len as u32), u32c(wg));
        let mut xidx = oidx.clone();
        xidx[axis] = k.clone();
        let xv = self.value_at(&mut cx, x, &xidx)?;
        let xv = cx.kb.let_(ty, xv);
        Self::fold(&mut cx, reduce, ty, (acc, acc_i), &[xv, k]);
        cx.kb.end();
        cx.kb.store_shared(sv, local_id(), Expr::Var(acc));
        match (reduce, si) {
            (Some(_), _) => {
                self.tree_reduce(&mut cx, &[sv], &|a, b| merge(reduce, ty, a, b));
                cx.kb.begin_if(eq(local_id(), u32c(0)));
                cx.kb
                    .store(outp, row, to_word(load_shared(sv, u32c(0)), out_dtype));
                cx.kb.end();
            }
            (None, Some(si)) => {
                cx.kb.store_shared(si, local_id(), Expr::Var(acc_i));
                self.tree_reduce(&mut cx, &[sv, si], &|a, b| merge(None, ty, a, b));
                cx.kb.begin_if(eq(local_id(), u32c(0)));
                cx.kb.store(
                    outp,
                    row,
                    poot_kernel::build::cast(Ty::I32, load_shared(si, u32c(0))),
                );
                cx.kb.end();
            }
            (None, None) => {}
        }
        cx.kb.barrier();
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for(rows, 1);
        self.push_kernel(cx, grid)
    }

    /// Reduction `i` over a short axis `axis` with a long stretch of dims after it (a token's
    /// selected experts summed per feature): each thread walks the axis for one output element,
    /// a workgroup covering a run of one outer index's elements. Its readers' row reductions
    /// (a router's renormalizing sum) then run once per workgroup in the prologue, where a
    /// workgroup per output element reduced a few values with a tree of barriers.
    fn emit_short_axis_reduce(
        &mut self,
        i: usize,
        op: ReduceOp,
        axis: usize,
    ) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (v, x) = (e.out, e.inputs[0]);
        let xt = self.g.values()[x.index()].ty.clone();
        let ty = kty(xt.dtype);
        let dims = xt.dims().to_vec();
        let out_dtype = self.g.values()[v.index()].ty.dtype;
        let len = dims[axis] as u32;
        let inner: usize = dims[axis + 1..].iter().product();
        let outer: usize = dims[..axis].iter().product();
        let wg = row_threads(inner);
        let chunks = (inner as u32).div_ceil(wg);
        let tiles = u32::try_from(outer)
            .ok()
            .and_then(|o| o.checked_mul(chunks))
            .ok_or_else(|| PlanError::Unplaced {
                label: self.label(v),
            })?;
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("reduce", self.label(v), wg);
        let outp = cx.param(out, device_word(out_dtype), true);
        let tile = Self::begin_rows(&mut cx, tiles);
        let row = cx.kb.let_(Ty::U32, tile.clone() / u32c(chunks));
        let first = cx.kb.let_(Ty::U32, tile % u32c(chunks) * u32c(wg));
        let oidx = unflatten(&mut cx, row.clone(), &dims[..axis]);
        cx.open_prologue();
        let c = cx.kb.let_(Ty::U32, first + local_id());
        cx.kb.begin_if(lt(c.clone(), u32c(inner as u32)));
        let cidx = unflatten(&mut cx, c.clone(), &dims[axis + 1..]);
        let mut xidx = oidx.clone();
        xidx.push(u32c(0));
        xidx.extend(cidx);
        let acc = self.serial_reduce(&mut cx, op, ty, x, &xidx, axis, len)?;
        let at = row * u32c(inner as u32) + c;
        cx.kb.store(outp, at, to_word(acc, out_dtype));
        cx.kb.end();
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for(tiles, 1);
        self.push_kernel(cx, grid)
    }

    /// Folds `item` (`[value]`, or `[value, index]` for arg-max) into the running result
    /// `acc` (the value and, for arg-max, its index) as [`merge`] does.
    pub(super) fn fold(
        cx: &mut KernelCtx,
        reduce: Option<ReduceOp>,
        ty: Ty,
        acc: (poot_kernel::Var, poot_kernel::Var),
        item: &[Expr],
    ) {
        match reduce {
            Some(op) => cx
                .kb
                .set(acc.0, combine(op, Expr::Var(acc.0), item[0].clone())),
            None => {
                // One test of the order, shared by the value and the index.
                let take = ranks_before(
                    ty,
                    item[0].clone(),
                    item[1].clone(),
                    Expr::Var(acc.0),
                    Expr::Var(acc.1),
                );
                let take = cx.kb.let_(Ty::Bool, take);
                cx.kb.set(
                    acc.0,
                    select(take.clone(), item[0].clone(), Expr::Var(acc.0)),
                );
                cx.kb
                    .set(acc.1, select(take, item[1].clone(), Expr::Var(acc.1)));
            }
        }
    }

    pub(super) fn emit_matmul(&mut self, i: usize, transpose_rhs: bool) -> Result<(), PlanError> {
        if self.emit_tiled_matmuls(&[i])? || self.emit_gemv(&[i])? {
            return Ok(());
        }
        let e = &self.g.eqns()[i];
        let (v, lhs, rhs) = (e.out, e.inputs[0], e.inputs[1]);
        let out_dims = self.g.values()[v.index()].ty.dims().to_vec();
        let lhs_dims = self.g.values()[lhs.index()].ty.dims().to_vec();
        let rhs_rank = self.g.values()[rhs.index()].ty.rank();
        let k_len = lhs_dims[lhs_dims.len() - 1];
        let total = self.n_elems(v)?;
        let wg = row_threads(k_len);
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("matmul", self.label(v), wg);
        let outp = cx.param(out, Word::F32, true);
        let sv = cx.kb.shared("sv", Ty::F32, wg);
        let o = Self::begin_rows(&mut cx, total);
        let oidx = unflatten(&mut cx, o.clone(), &out_dims);
        cx.open_prologue();
        let r = oidx.len();
        let (batch, m, n) = (
            oidx[..r - 2].to_vec(),
            oidx[r - 2].clone(),
            oidx[r - 1].clone(),
        );
        let acc = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let k = cx.kb.begin_for(local_id(), u32c(k_len as u32), u32c(wg));
        let mut li = batch.clone();
        li.extend([m, k.clone()]);
        let a = self.value_at(&mut cx, lhs, &li)?;
        let mut ri = if rhs_rank > 2 { batch } else { Vec::new() };
        if transpose_rhs {
            ri.extend([n, k]);
        } else {
            ri.extend([k, n]);
        }
        let w = self.value_at(&mut cx, rhs, &ri)?;
        cx.kb.set(acc, Expr::Var(acc) + a * w);
        cx.kb.end();
        self.finish_row_sum(&mut cx, sv, acc, outp, o);
        let grid = self.groups_for(total, 1);
        self.push_kernel(cx, grid)
    }

    pub(super) fn emit_indexed_matmul(&mut self, i: usize) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (v, lhs, rhs, ids) = (e.out, e.inputs[0], e.inputs[1], e.inputs[2]);
        let rhs_dims = self.g.values()[rhs.index()].ty.dims().to_vec();
        let (experts, k_len) = (rhs_dims[0], rhs_dims[2]);
        let out_dims = self.g.values()[v.index()].ty.dims().to_vec();
        let total = self.n_elems(v)?;
        let wg = row_threads(k_len);
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("indexed_matmul", self.label(v), wg);
        let outp = cx.param(out, Word::F32, true);
        let sv = cx.kb.shared("sv", Ty::F32, wg);
        let o = Self::begin_rows(&mut cx, total);
        let oidx = unflatten(&mut cx, o.clone(), &out_dims);
        cx.open_prologue();
        let (t, n) = (oidx[0].clone(), oidx[1].clone());
        let expert = self.value_at(&mut cx, ids, std::slice::from_ref(&t))?;
        let expert = self.checked_index(&mut cx, expert, experts, fault::EXPERT_INDEX);
        let expert = cx.kb.let_(Ty::U32, expert);
        let acc = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let k = cx.kb.begin_for(local_id(), u32c(k_len as u32), u32c(wg));
        let a = self.value_at(&mut cx, lhs, &[t, k.clone()])?;
        let w = self.value_at(&mut cx, rhs, &[expert, n, k])?;
        cx.kb.set(acc, Expr::Var(acc) + a * w);
        cx.kb.end();
        self.finish_row_sum(&mut cx, sv, acc, outp, o);
        let grid = self.groups_for(total, 1);
        self.push_kernel(cx, grid)
    }

    /// The buffer an in-place update of `operand` may write: its own when nothing else reads it
    /// and it is writable (not a constant or slot, not a returned value); a copy otherwise.
    fn update_target(&mut self, operand: ValueId, out: ValueId) -> Result<LBuf, PlanError> {
        let src = self.buffer_of(operand)?;
        let info = &self.g.values()[operand.index()];
        let writable = matches!(info.storage, Storage::State(_) | Storage::Device);
        let placed = matches!(
            self.cls.placement[operand.index()],
            Placement::Input | Placement::Materialized
        );
        let returned = self.g.outputs().primary.contains(&operand);
        if writable && placed && self.cls.uses[operand.index()] == 1 && !returned {
            self.lbuf[out.index()] = Some(src);
            return Ok(src);
        }
        let dst = self.scratch_for(out)?;
        self.emit_copy(operand, src, dst)?;
        Ok(dst)
    }

    pub(super) fn emit_update_slice(&mut self, i: usize) -> Result<(), PlanError> {
        let v = self.g.eqns()[i].out;
        let wg = self.update_slice_threads(i);
        let mut cx = KernelCtx::labelled("update_slice", self.label(v), wg);
        let grid = self.update_slice_body(&mut cx, i)?;
        self.push_kernel(cx, grid)
    }

    /// The workgroup width update `i`'s body wants: a row of its new values when they read a
    /// row reduction, else the element-wise width.
    pub(super) fn update_slice_threads(&self, i: usize) -> u32 {
        let update = self.g.eqns()[i].inputs[1];
        let upd_dims = self.g.values()[update.index()].ty.dims();
        match upd_dims.last() {
            Some(&len) if self.cls.reads_row_reduce[update.index()] => row_threads(len),
            _ => ELEMENTWISE_THREADS,
        }
    }

    /// Appends the body of update `i` (`DynamicUpdateSlice`) to `cx`; returns the workgroups it
    /// wants.
    pub(super) fn update_slice_body(
        &mut self,
        cx: &mut KernelCtx,
        i: usize,
    ) -> Result<[u32; 3], PlanError> {
        let e = self.g.eqns()[i].clone();
        let (v, operand, update) = (e.out, e.inputs[0], e.inputs[1]);
        let op_dims = self.g.values()[operand.index()].ty.dims().to_vec();
        let upd_dims = self.g.values()[update.index()].ty.dims().to_vec();
        let out = self.update_target(operand, v)?;
        let whole_words = whole_even_rows(&op_dims, &upd_dims);
        let writes = self.element_writes(v, out, update, whole_words, "update of an f16 state")?;
        let (iter_dims, n) = (&writes.iter_dims, writes.n);
        let outp = cx.param(out, writes.word, true);
        let mut starts = Vec::with_capacity(op_dims.len());
        for (j, (&d, &u)) in op_dims.iter().zip(&upd_dims).enumerate() {
            let s = self.value_at(cx, e.inputs[2 + j], &[])?;
            let s = self.checked_index(cx, s, d - u + 1, fault::UPDATE_SLICE_START);
            starts.push(cx.kb.let_(Ty::U32, s));
        }
        let rows = self.cls.reads_row_reduce[update.index()] && !upd_dims.is_empty();
        let (uidx, grid) = if rows {
            let (uidx, _, groups) = Self::begin_row_loops(cx, iter_dims);
            (uidx, self.groups_for(groups, 1))
        } else {
            let flat = Self::begin_grid_stride(cx, n);
            let uidx = unflatten(cx, flat, iter_dims);
            (uidx, self.groups_for(n, cx.kb.workgroup()))
        };
        let uidx = writes.first_of_word(uidx);
        let oidx: Vec<Expr> = uidx
            .iter()
            .zip(&starts)
            .map(|(u, s)| u.clone() + s.clone())
            .collect();
        let at = flatten(&oidx, &op_dims);
        self.store_element(cx, &writes, outp, at, update, &uidx)?;
        if rows {
            Self::end_row_loops(cx);
        } else {
            cx.kb.end();
        }
        Ok(grid)
    }

    pub(super) fn emit_scatter(&mut self, i: usize, axis: usize) -> Result<(), PlanError> {
        let v = self.g.eqns()[i].out;
        let mut cx = KernelCtx::labelled("scatter", self.label(v), ELEMENTWISE_THREADS);
        let grid = self.scatter_body(&mut cx, i, axis)?;
        self.push_kernel(cx, grid)
    }

    /// Appends the body of scatter `i` (`ScatterUpdate`) to `cx`; returns the workgroups it
    /// wants.
    pub(super) fn scatter_body(
        &mut self,
        cx: &mut KernelCtx,
        i: usize,
        axis: usize,
    ) -> Result<[u32; 3], PlanError> {
        let e = self.g.eqns()[i].clone();
        let (v, operand, indices, updates) = (e.out, e.inputs[0], e.inputs[1], e.inputs[2]);
        let op_dims = self.g.values()[operand.index()].ty.dims().to_vec();
        let upd_dims = self.g.values()[updates.index()].ty.dims().to_vec();
        let out = self.update_target(operand, v)?;
        let whole_words = axis + 1 < op_dims.len() && whole_even_rows(&op_dims, &upd_dims);
        let writes =
            self.element_writes(v, out, updates, whole_words, "scatter into an f16 state")?;
        let n = writes.n;
        let outp = cx.param(out, writes.word, true);
        let flat = Self::begin_grid_stride(cx, n);
        let uidx = unflatten(cx, flat, &writes.iter_dims);
        let uidx = writes.first_of_word(uidx);
        let at = self.value_at(cx, indices, std::slice::from_ref(&uidx[axis]))?;
        let at = self.checked_index(cx, at, op_dims[axis], fault::SCATTER_INDEX);
        let mut oidx = uidx.clone();
        oidx[axis] = at;
        let at = flatten(&oidx, &op_dims);
        self.store_element(cx, &writes, outp, at, updates, &uidx)?;
        cx.kb.end();
        Ok(self.groups_for(n, cx.kb.workgroup()))
    }

    pub(super) fn emit_top_k(&mut self, i: usize, k: usize) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (v, x) = (e.out, e.inputs[0]);
        let xt = self.g.values()[x.index()].ty.clone();
        let ty = kty(xt.dtype);
        let dims = xt.dims().to_vec();
        let len = dims[dims.len() - 1];
        let rows = (self.n_elems(x)? as usize / len.max(1)) as u32;
        if split::top_k_parts(rows as usize, len, k, ty) > 1 {
            return self.emit_split_top_k(i, k);
        }
        let wg = row_threads(len);
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("top_k", self.label(v), wg);
        let outp = cx.param(out, Word::I32, true);
        let row = Self::begin_rows(&mut cx, rows);
        let ridx = unflatten(&mut cx, row.clone(), &dims[..dims.len() - 1]);
        cx.open_prologue();
        if ranks_in_one_pass(len, k, ty) {
            self.rank_top_k(&mut cx, ty, k, x, &ridx, len, outp, row)?;
            cx.close_prologue();
            cx.kb.end();
            let grid = self.groups_for(rows, 1);
            return self.push_kernel(cx, grid);
        }
        let cands = Candidates::Row { x, row: &ridx };
        self.select_top_k(
            &mut cx,
            ty,
            k,
            &cands,
            (u32c(0), u32c(len as u32)),
            &mut |cx, j, _, index| {
                let at = row.clone() * u32c(k as u32) + j;
                cx.kb
                    .store(outp, at, poot_kernel::build::cast(Ty::I32, index));
            },
        )?;
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for(rows, 1);
        self.push_kernel(cx, grid)
    }

    /// A row's top `k` in one pass (a router's experts): each candidate's sort key goes to
    /// shared memory, every thread counts the candidates ranking before its own, and a
    /// candidate whose rank is below `k` writes its index at that rank. `k` passes of a
    /// workgroup reduction cost `k` round trips through shared memory and barriers, which
    /// dominate a decode step's router.
    #[allow(clippy::too_many_arguments)]
    fn rank_top_k(
        &mut self,
        cx: &mut KernelCtx,
        ty: Ty,
        k: usize,
        x: ValueId,
        ridx: &[Expr],
        len: usize,
        outp: ParamId,
        row: Expr,
    ) -> Result<(), PlanError> {
        let wg = cx.kb.workgroup();
        let keys = cx.kb.shared("sk", Ty::U32, len as u32);
        let c = cx.kb.begin_for(local_id(), u32c(len as u32), u32c(wg));
        let mut at = ridx.to_vec();
        at.push(c.clone());
        let xv = self.value_at(cx, x, &at)?;
        let xv = cx.kb.let_(ty, xv);
        cx.kb.store_shared(keys, c, sort_key(ty, xv));
        cx.kb.end();
        cx.kb.barrier();
        let c = cx.kb.begin_for(local_id(), u32c(len as u32), u32c(wg));
        let mine = cx.kb.let_(Ty::U32, load_shared(keys, c.clone()));
        let rank = cx.kb.var(Ty::U32, u32c(0));
        let u = cx.kb.begin_for(u32c(0), u32c(len as u32), u32c(1));
        let other = cx.kb.let_(Ty::U32, load_shared(keys, u.clone()));
        let before = or(
            cmp(CmpOp::Gt, other.clone(), mine.clone()),
            and(eq(other, mine.clone()), lt(u, c.clone())),
        );
        cx.kb
            .set(rank, Expr::Var(rank) + select(before, u32c(1), u32c(0)));
        cx.kb.end();
        cx.kb.begin_if(lt(Expr::Var(rank), u32c(k as u32)));
        let at = row * u32c(k as u32) + Expr::Var(rank);
        cx.kb.store(outp, at, poot_kernel::build::cast(Ty::I32, c));
        cx.kb.end();
        cx.kb.end();
        // Every thread has read the keys before the workgroup's next row stages its own.
        cx.kb.barrier();
        Ok(())
    }

    /// The `k` passes of a top-k selection over candidates `range` (`[start, end)`) of
    /// `cands`, by the whole workgroup: pass `j` picks the best candidate ranking after pass
    /// `j - 1`'s pick (none once they run out, its index [`NONE`]). `write(cx, j, value,
    /// index)` records each pick, on thread 0.
    pub(super) fn select_top_k(
        &mut self,
        cx: &mut KernelCtx,
        ty: Ty,
        k: usize,
        cands: &Candidates<'_>,
        range: (Expr, Expr),
        write: &mut dyn FnMut(&mut KernelCtx, Expr, Expr, Expr),
    ) -> Result<(), PlanError> {
        let wg = cx.kb.workgroup();
        let sv = cx.kb.shared("sv", ty, wg);
        let si = cx.kb.shared("si", Ty::U32, wg);
        let prev_v = cx.kb.var(ty, lowest(ty));
        let prev_i = cx.kb.var(Ty::U32, u32c(NONE));
        let j = cx.kb.begin_for(u32c(0), u32c(k as u32), u32c(1));
        let best_v = cx.kb.var(ty, lowest(ty));
        let best_i = cx.kb.var(Ty::U32, u32c(NONE));
        let c = cx.kb.begin_for(range.0 + local_id(), range.1, u32c(wg));
        let (xv, xi) = match cands {
            Candidates::Row { x, row } => {
                let mut at = row.to_vec();
                at.push(c.clone());
                let xv = self.value_at(cx, *x, &at)?;
                (cx.kb.let_(ty, xv), c)
            }
            Candidates::Pairs { buf, base } => {
                let w = cx.kb.let_(Ty::U32, base.clone() + c * u32c(2));
                let xv = from_bits(ty, load(*buf, w.clone()));
                (
                    cx.kb.let_(ty, xv),
                    cx.kb.let_(Ty::U32, load(*buf, w + u32c(1))),
                )
            }
        };
        // Eligible: ranks after the previous pick (every candidate, on the first pass; none
        // once the picks ran out).
        let after_prev = or(
            eq(j.clone(), u32c(0)),
            ranks_before(
                ty,
                Expr::Var(prev_v),
                Expr::Var(prev_i),
                xv.clone(),
                xi.clone(),
            ),
        );
        let better = ranks_before(
            ty,
            xv.clone(),
            xi.clone(),
            Expr::Var(best_v),
            Expr::Var(best_i),
        );
        let take = cx.kb.let_(Ty::Bool, and(after_prev, better));
        cx.kb
            .set(best_v, select(take.clone(), xv, Expr::Var(best_v)));
        cx.kb.set(best_i, select(take, xi, Expr::Var(best_i)));
        cx.kb.end();
        cx.kb.store_shared(sv, local_id(), Expr::Var(best_v));
        cx.kb.store_shared(si, local_id(), Expr::Var(best_i));
        self.tree_reduce(cx, &[sv, si], &|a, b| merge(None, ty, a, b));
        cx.kb.set(prev_v, load_shared(sv, u32c(0)));
        cx.kb.set(prev_i, load_shared(si, u32c(0)));
        cx.kb.begin_if(eq(local_id(), u32c(0)));
        write(cx, j, Expr::Var(prev_v), Expr::Var(prev_i));
        cx.kb.end();
        cx.kb.barrier();
        cx.kb.end();
        Ok(())
    }
}

/// Reductions over an axis this short, with at least [`SHORT_AXIS_MIN_INNER`] elements after
/// it, take [`Lowering::emit_short_axis_reduce`]: a thread per output element.
const SHORT_AXIS: usize = 32;
const SHORT_AXIS_MIN_INNER: usize = 32;

/// Rows this short take [`Lowering::rank_top_k`]: each thread compares its candidate with
/// every other, so the pass costs `len` steps a thread.
const RANK_TOP_K_MAX_LEN: usize = 256;

/// Whether a top-`k` over rows of `len` takes the one-pass ranking: `k` of at least 2 (one
/// pass of the reduction is already one pass), every rank filled (`k <= len`), and a value
/// type with a [`sort_key`].
fn ranks_in_one_pass(len: usize, k: usize, ty: Ty) -> bool {
    (2..=len).contains(&k) && len <= RANK_TOP_K_MAX_LEN && ty != Ty::Bool
}

/// A u32 whose order is [`ranks_before`]'s order of values (ties are broken by index apart):
/// larger ranks first. For f32: every NaN above +inf (all NaNs tie), -0 equal to +0, and the
/// sign-magnitude bits mapped to an unsigned order.
fn sort_key(ty: Ty, x: Expr) -> Expr {
    match ty {
        Ty::F32 => {
            let bits = un(UnOp::BitsToU32, x);
            let magnitude = bits.clone() & u32c(0x7fff_ffff);
            let negative = cmp(CmpOp::Gt, bits.clone(), u32c(0x8000_0000));
            let ordered = select(
                negative,
                bin(BinOp::Xor, bits.clone(), u32c(u32::MAX)),
                bin(BinOp::Or, magnitude.clone(), u32c(0x8000_0000)),
            );
            select(
                cmp(CmpOp::Gt, magnitude, u32c(0x7f80_0000)),
                u32c(u32::MAX),
                ordered,
            )
        }
        Ty::I32 => bin(
            BinOp::Xor,
            poot_kernel::build::cast(Ty::U32, x),
            u32c(0x8000_0000),
        ),
        Ty::U32 | Ty::Bool => x,
    }
}

/// `terms` summed pairwise (a balanced tree: short dependency chains).
pub(super) fn pairwise(mut terms: Vec<Expr>) -> Expr {
    while terms.len() > 1 {
        let mut next = Vec::with_capacity(terms.len().div_ceil(2));
        let mut it = terms.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => a + b,
                None => a,
            });
        }
        terms = next;
    }
    terms.pop().unwrap_or(Expr::F32(0.0))
}

/// An f32, i32 or u32 value as the u32 word of its bits (how split reductions keep partial
/// results of any type in one u32 buffer).
pub(super) fn to_bits(ty: Ty, x: Expr) -> Expr {
    match ty {
        Ty::F32 => un(UnOp::BitsToU32, x),
        Ty::I32 => poot_kernel::build::cast(Ty::U32, x),
        Ty::U32 => x,
        Ty::Bool => select(x, u32c(1), u32c(0)),
    }
}

/// The inverse of [`to_bits`].
pub(super) fn from_bits(ty: Ty, w: Expr) -> Expr {
    match ty {
        Ty::F32 => un(UnOp::BitsToF32, w),
        Ty::I32 => poot_kernel::build::cast(Ty::I32, w),
        Ty::U32 => w,
        Ty::Bool => cmp(CmpOp::Ne, w, u32c(0)),
    }
}

/// The identity of reduction `op` over `ty`.
pub(super) fn reduce_init(op: ReduceOp, ty: Ty) -> Expr {
    match op {
        ReduceOp::Sum => zero(ty),
        ReduceOp::Max => lowest(ty),
        ReduceOp::Min => highest(ty),
    }
}

fn zero(ty: Ty) -> Expr {
    match ty {
        Ty::F32 => Expr::F32(0.0),
        Ty::I32 => Expr::I32(0),
        Ty::U32 | Ty::Bool => u32c(0),
    }
}

pub(super) fn lowest(ty: Ty) -> Expr {
    match ty {
        Ty::F32 => Expr::F32(f32::NEG_INFINITY),
        Ty::I32 => Expr::I32(i32::MIN),
        Ty::U32 | Ty::Bool => u32c(0),
    }
}

fn highest(ty: Ty) -> Expr {
    match ty {
        Ty::F32 => Expr::F32(f32::INFINITY),
        Ty::I32 => Expr::I32(i32::MAX),
        Ty::U32 | Ty::Bool => u32c(u32::MAX),
    }
}

pub(super) fn combine(op: ReduceOp, a: Expr, b: Expr) -> Expr {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => bin(BinOp::Max, a, b),
        ReduceOp::Min => bin(BinOp::Min, a, b),
    }
}

/// Whether an update of `upd` into `op` writes whole words of a buffer of halves: both share
/// an even last axis, so every written pair starts at an even element.
fn whole_even_rows(op: &[usize], upd: &[usize]) -> bool {
    matches!((op.last(), upd.last()), (Some(&a), Some(&b)) if a == b && a % 2 == 0)
}

/// How a kernel's threads write an update's elements ([`Lowering::element_writes`]).
struct ElementWrites {
    /// Into a buffer of halves, a word (two elements) a thread.
    halves: bool,
    /// The update's dims with the last counted in words.
    iter_dims: Vec<usize>,
    /// Writes (threads' iterations) in all.
    n: u32,
    /// The word the written buffer is bound as.
    word: Word,
    /// The written value's type.
    dtype: DType,
}

impl ElementWrites {
    /// An index over `iter_dims` as the index of its word's first element.
    fn first_of_word(&self, mut idx: Vec<Expr>) -> Vec<Expr> {
        if self.halves
            && let Some(last) = idx.last_mut()
        {
            *last = last.clone() * u32c(2);
        }
        idx
    }
}
