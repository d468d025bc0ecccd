//! Contractions computed in the kernel of the value their sums flow into. When every use of a
//! `MatMul`'s output reaches one stored value through same-shape element-wise ops (a residual
//! add `x + o_proj(a)`, a gated activation `silu(gate(x)) * up(x)`, a masked score), that
//! value's kernel runs one workgroup per element: it computes each contraction's sum for its
//! element (contractions reading the same left side share one pass over it), then the value
//! itself, and the contractions never get a buffer or a launch of their own.
//!
//! Each sum is formed exactly as the standalone contraction forms it (per-thread strided
//! partial sums, then a tree over the workgroup), so the fused result differs from the unfused
//! plan only through the workgroup width.

use poot_graph_ir::{OpKind, ValueId};

use super::access::{device_word, to_word, unflatten};
use super::classify::Placement;
use super::context::KernelCtx;
use super::emit::row_threads;
use super::{Lowering, PlanError};
use poot_kernel::build::{eq, load_shared, local_id, u32c};
use poot_kernel::{Expr, Ty};

/// One contraction an epilogue kernel computes.
struct Sum {
    out: ValueId,
    lhs: ValueId,
    rhs: ValueId,
    transpose_rhs: bool,
    k_len: usize,
}

impl Lowering<'_> {
    /// The kernel of value `eqn` computing the contractions `mms` as it goes; if it would bind
    /// more buffers than the target allows, the contractions get their own kernels instead.
    pub(super) fn emit_epilogue(&mut self, eqn: usize, mms: &[ValueId]) -> Result<(), PlanError> {
        if self.emit_tiled_epilogue(eqn, mms)? || self.emit_gemv_epilogue(eqn, mms)? {
            return Ok(());
        }
        let v = self.g.eqns()[eqn].out;
        let mut sums = Vec::with_capacity(mms.len());
        for &m in mms {
            let e = self.producer_of(m)?;
            let OpKind::MatMul { transpose_rhs } = e.op else {
                return Err(PlanError::Unplaced {
                    label: self.label(m),
                });
            };
            let lhs_dims = self.g.values()[e.inputs[0].index()].ty.dims();
            sums.push(Sum {
                out: m,
                lhs: e.inputs[0],
                rhs: e.inputs[1],
                transpose_rhs,
                k_len: lhs_dims[lhs_dims.len() - 1],
            });
        }
        let dims = self.g.values()[v.index()].ty.dims().to_vec();
        let dtype = self.g.values()[v.index()].ty.dtype;
        let total = self.n_elems(v)?;
        let wg = row_threads(sums.iter().map(|s| s.k_len).max().unwrap_or(1));
        let out = self.scratch_for(v)?;
        let mut cx = KernelCtx::labelled("matmul_epilogue", self.label(v), wg);
        let outp = cx.param(out, device_word(dtype), true);
        let o = Self::begin_rows(&mut cx, total);
        let oidx = unflatten(&mut cx, o.clone(), &dims);
        cx.open_prologue();
        // Contractions over the same left side share one pass over it.
        let mut groups: Vec<Vec<&Sum>> = Vec::new();
        for s in &sums {
            match groups
                .iter_mut()
                .find(|g| g[0].lhs == s.lhs && g[0].k_len == s.k_len)
            {
                Some(g) => g.push(s),
                None => groups.push(vec![s]),
            }
        }
        for group in &groups {
            self.sum_group(&mut cx, group, &oidx)?;
        }
        let value = self.compute(&mut cx, v, &oidx)?;
        cx.kb.begin_if(eq(local_id(), u32c(0)));
        cx.kb.store(outp, o, to_word(value, dtype));
        cx.kb.end();
        cx.kb.barrier();
        cx.close_prologue();
        cx.kb.end();
        if cx.binding_count() as u32 > self.target.limits.max_bindings {
            // Too many buffers for one kernel: the contractions run on their own first.
            for s in &sums {
                self.cls.placement[s.out.index()] = Placement::Materialized;
                let i = self.cls.producer[s.out.index()].ok_or_else(|| PlanError::Unplaced {
                    label: self.label(s.out),
                })?;
                self.emit_matmul(i, s.transpose_rhs)?;
            }
            self.cls.epilogues.remove(&v.index());
            return self.emit_elementwise(eqn);
        }
        let grid = self.groups_for(total, 1);
        self.push_kernel(cx, grid)
    }

    /// Computes every sum of `group` (same left side) at output index `oidx` in one pass, and
    /// records each as known to the kernel.
    fn sum_group(
        &mut self,
        cx: &mut KernelCtx,
        group: &[&Sum],
        oidx: &[Expr],
    ) -> Result<(), PlanError> {
        let wg = cx.kb.workgroup();
        let r = oidx.len();
        let (batch, m, n) = (
            oidx[..r - 2].to_vec(),
            oidx[r - 2].clone(),
            oidx[r - 1].clone(),
        );
        let k_len = group[0].k_len;
        let accs: Vec<_> = group
            .iter()
            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
            .collect();
        let k = cx.kb.begin_for(local_id(), u32c(k_len as u32), u32c(wg));
        let mut li = batch.clone();
        li.extend([m, k.clone()]);
        let a = self.value_at(cx, group[0].lhs, &li)?;
        let a = cx.kb.let_(Ty::F32, a);
        for (s, &acc) in group.iter().zip(&accs) {
            let rhs_rank = self.g.values()[s.rhs.index()].ty.rank();
            let mut ri = if rhs_rank > 2 {
                batch.clone()
            } else {
                Vec::new()
            };
            if s.transpose_rhs {
                ri.extend([n.clone(), k.clone()]);
            } else {
                ri.extend([k.clone(), n.clone()]);
            }
            let w = self.value_at(cx, s.rhs, &ri)?;
            cx.kb.set(acc, Expr::Var(acc) + a.clone() * w);
        }
        cx.kb.end();
        let arrays: Vec<_> = (0..group.len())
            .map(|j| cx.kb.shared(format!("se{j}"), Ty::F32, wg))
            .collect();
        for (&arr, &acc) in arrays.iter().zip(&accs) {
            cx.kb.store_shared(arr, local_id(), Expr::Var(acc));
        }
        self.tree_reduce(cx, &arrays, &|a, b| {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.clone() + y.clone())
                .collect()
        });
        for (s, &arr) in group.iter().zip(&arrays) {
            let total = cx.kb.let_(Ty::F32, load_shared(arr, u32c(0)));
            cx.set_known(s.out, oidx, total);
        }
        // Every thread has read the sums before the arrays are written again.
        cx.kb.barrier();
        Ok(())
    }
}
