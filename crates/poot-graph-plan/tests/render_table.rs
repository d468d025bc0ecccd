//! Every kernel in one table renders to WGSL that naga 30 parses and validates, and to CUDA C
//! that clang compiles to PTX (skipped with a `SKIP:` line where clang is missing).
//!
//! The table covers every `Expr` and `Stmt` variant, every unary, binary and comparison
//! operator at every operand type the validator accepts (with run-time operands and with
//! all-literal ones, whose values are picked to overflow, divide by zero or be non-finite),
//! every cast, both half formats, and three realistic kernels: an elementwise grid-stride
//! loop, a shared-memory tree reduction and a byte-unpacking dequantization loop; then every
//! kernel the planner makes for SmolLM2 and Gemma 3 steps (the fused ones included). What each
//! renderer writes for each of them is pinned by hash (`tests/golden/render_table.txt`).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use poot_graph_plan::Target;
use poot_kernel::build::{
    KernelBuilder, bin, cast, cmp, eq, f32c, group_count_x, group_id, i32c, load, load_byte,
    load_half, load_shared, local_id, lt, mul_add, select, shuffle_xor, u32c, un,
};
use poot_kernel::render::{RenderError, can_fault, entry_name, render_cuda, render_wgsl};
use poot_kernel::{Access, BinOp, CmpOp, Expr, Half, Kernel, Stmt, Ty, UnOp, Word};

const TYS: [Ty; 4] = [Ty::F32, Ty::I32, Ty::U32, Ty::Bool];

const UNOPS: [UnOp; 20] = [
    UnOp::Neg,
    UnOp::Abs,
    UnOp::Exp,
    UnOp::Log,
    UnOp::Sqrt,
    UnOp::Rsqrt,
    UnOp::Recip,
    UnOp::Tanh,
    UnOp::Erf,
    UnOp::Floor,
    UnOp::Ceil,
    UnOp::Round,
    UnOp::Sin,
    UnOp::Cos,
    UnOp::Not,
    UnOp::RoundF16,
    UnOp::RoundBf16,
    UnOp::BitsToU32,
    UnOp::BitsToF32,
    UnOp::F16ToF32,
];

const BINOPS: [BinOp; 13] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Rem,
    BinOp::Max,
    BinOp::Min,
    BinOp::Pow,
    BinOp::And,
    BinOp::Or,
    BinOp::Xor,
    BinOp::Shl,
    BinOp::Shr,
];

const CMPOPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

/// Fails to compile when an operator is added, so the lists above get the new one.
#[allow(dead_code)]
fn listed(u: UnOp, b: BinOp, c: CmpOp, t: Ty, h: Half) {
    match u {
        UnOp::Neg
        | UnOp::Abs
        | UnOp::Exp
        | UnOp::Log
        | UnOp::Sqrt
        | UnOp::Rsqrt
        | UnOp::Recip
        | UnOp::Tanh
        | UnOp::Erf
        | UnOp::Floor
        | UnOp::Ceil
        | UnOp::Round
        | UnOp::Sin
        | UnOp::Cos
        | UnOp::Not
        | UnOp::RoundF16
        | UnOp::RoundBf16
        | UnOp::BitsToU32
        | UnOp::BitsToF32
        | UnOp::F16ToF32 => {}
    }
    match b {
        BinOp::Add
        | BinOp::Sub
        | BinOp::Mul
        | BinOp::Div
        | BinOp::Rem
        | BinOp::Max
        | BinOp::Min
        | BinOp::Pow
        | BinOp::And
        | BinOp::Or
        | BinOp::Xor
        | BinOp::Shl
        | BinOp::Shr => {}
    }
    match c {
        CmpOp::Eq | CmpOp::Ne | CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => {}
    }
    match t {
        Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool => {}
    }
    match h {
        Half::F16 | Half::Bf16 => {}
    }
}

/// Inputs of every word type and an output per word type, plus a u32 flag output for bools.
struct Io {
    f: poot_kernel::ParamId,
    i: poot_kernel::ParamId,
    u: poot_kernel::ParamId,
    out_f: poot_kernel::ParamId,
    out_i: poot_kernel::ParamId,
    out_u: poot_kernel::ParamId,
}

impl Io {
    fn new(b: &mut KernelBuilder) -> Io {
        Io {
            f: b.param("in_f", Word::F32, Access::Read),
            i: b.param("in_i", Word::I32, Access::Read),
            u: b.param("in_u", Word::U32, Access::Read),
            out_f: b.param("out_f", Word::F32, Access::ReadWrite),
            out_i: b.param("out_i", Word::I32, Access::ReadWrite),
            out_u: b.param("out_u", Word::U32, Access::ReadWrite),
        }
    }

    /// A run-time value of type `t` (`k` varies it between operands).
    fn value(&self, t: Ty, k: u32) -> Expr {
        let at = local_id() + u32c(k);
        match t {
            Ty::F32 => load(self.f, at),
            Ty::I32 => load(self.i, at),
            Ty::U32 => load(self.u, at),
            Ty::Bool => lt(load(self.u, at), u32c(7 + k)),
        }
    }

    /// Stores `e` of type `t` at slot `slot` of the matching output.
    fn store(&self, b: &mut KernelBuilder, t: Ty, slot: u32, e: Expr) {
        let at = local_id() * u32c(1024) + u32c(slot);
        match t {
            Ty::F32 => b.store(self.out_f, at, e),
            Ty::I32 => b.store(self.out_i, at, e),
            Ty::U32 => b.store(self.out_u, at, e),
            Ty::Bool => b.store(self.out_u, at, select(e, u32c(1), u32c(0))),
        }
    }
}

/// Literal operands chosen to trip constant folding: extremes, zeros, non-finite values.
fn literal(t: Ty, k: u32) -> Expr {
    match (t, k % 4) {
        (Ty::F32, 0) => f32c(f32::MAX),
        (Ty::F32, 1) => f32c(0.0),
        (Ty::F32, 2) => f32c(f32::NAN),
        (Ty::F32, _) => f32c(-100.0),
        (Ty::I32, 0) => i32c(i32::MIN),
        (Ty::I32, 1) => i32c(0),
        (Ty::I32, 2) => i32c(-1),
        (Ty::I32, _) => i32c(i32::MAX),
        (Ty::U32, 0) => u32c(u32::MAX),
        (Ty::U32, 1) => u32c(0),
        (Ty::U32, 2) => u32c(31),
        (Ty::U32, _) => u32c(1),
        (Ty::Bool, 0 | 2) => Expr::Bool(true),
        (Ty::Bool, _) => Expr::Bool(false),
    }
}

/// Tries `e`; keeps it (stored at the next slot) if it types.
fn try_store(b: &mut KernelBuilder, io: &Io, probe: &Kernel, slot: &mut u32, e: Expr) -> bool {
    match probe.type_of(&e) {
        Ok(t) => {
            io.store(b, t, *slot, e);
            *slot += 1;
            true
        }
        Err(_) => false,
    }
}

/// A kernel whose parameters match `Io`, for type checks only.
fn probe_kernel() -> Kernel {
    let mut b = KernelBuilder::new("probe", 64);
    let _ = Io::new(&mut b);
    b.finish()
}

/// Every unary and binary operator at every operand type that types, with run-time operands
/// (`literals == false`) or all-literal ones.
fn operators_kernel(literals: bool) -> (Kernel, usize) {
    let probe = probe_kernel();
    let mut b = KernelBuilder::new(if literals { "ops_literal" } else { "ops" }, 64);
    let io = Io::new(&mut b);
    let operand = |t: Ty, k: u32| {
        if literals {
            literal(t, k)
        } else {
            io.value(t, k)
        }
    };
    let mut slot = 0;
    let mut typed = 0;
    for op in UNOPS {
        for t in TYS {
            for k in 0..if literals { 4 } else { 1 } {
                typed += usize::from(try_store(
                    &mut b,
                    &io,
                    &probe,
                    &mut slot,
                    un(op, operand(t, k)),
                ));
            }
        }
    }
    for op in BINOPS {
        for ta in TYS {
            for tb in TYS {
                for k in 0..if literals { 4 } else { 1 } {
                    typed += usize::from(try_store(
                        &mut b,
                        &io,
                        &probe,
                        &mut slot,
                        bin(op, operand(ta, k), operand(tb, k + 1)),
                    ));
                }
            }
        }
    }
    for op in CMPOPS {
        for t in TYS {
            typed += usize::from(try_store(
                &mut b,
                &io,
                &probe,
                &mut slot,
                cmp(op, operand(t, 0), operand(t, 1)),
            ));
        }
    }
    for from in TYS {
        for to in TYS {
            for k in 0..if literals { 4 } else { 1 } {
                typed += usize::from(try_store(
                    &mut b,
                    &io,
                    &probe,
                    &mut slot,
                    cast(to, operand(from, k)),
                ));
            }
        }
    }
    for t in TYS {
        typed += usize::from(try_store(
            &mut b,
            &io,
            &probe,
            &mut slot,
            select(operand(Ty::Bool, 0), operand(t, 1), operand(t, 2)),
        ));
    }
    // Fused multiply-add: run-time operands, and all literals (which WGSL must not fold).
    for k in 0..2u32 {
        let x = |i: u32| operand(Ty::F32, i + 3 * k);
        typed += usize::from(try_store(
            &mut b,
            &io,
            &probe,
            &mut slot,
            mul_add(x(0), x(1), x(2)),
        ));
    }
    (b.finish(), typed)
}

/// Every statement, every load, every built-in and a chain of constants of every spelling.
fn statements_kernel() -> Kernel {
    let mut b = KernelBuilder::new("statements", 128);
    let q = b.param("packed", Word::U32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let flags = b.param("flags", Word::U32, Access::ReadWrite);
    let tile = b.shared("tile", Ty::F32, 128);
    let marks = b.shared("marks", Ty::Bool, 128);
    let counts = b.shared("counts", Ty::I32, 4);
    let lid = b.let_(Ty::U32, local_id());
    let gid = b.let_(
        Ty::U32,
        group_id(0) + group_id(1) * group_count_x() + group_id(2),
    );
    let acc = b.var(Ty::F32, f32c(0.0));
    b.store_shared(
        tile,
        lid.clone(),
        load_half(q, lid.clone(), Half::F16) + load_half(q, lid.clone(), Half::Bf16),
    );
    b.store_shared(marks, lid.clone(), eq(load_byte(q, lid.clone()), u32c(0)));
    let quad = b.let_words(q, lid.clone() << u32c(2), 4);
    let pair = b.let_words(q, lid.clone() << u32c(1), 2);
    let words = quad.into_iter().chain(pair).fold(u32c(0), |a, w| a ^ w);
    b.store(flags, u32c(128) + lid.clone(), words);
    b.if_(lt(lid.clone(), u32c(4)), |b| {
        b.store_shared(counts, local_id(), i32c(-7))
    });
    b.barrier();
    let runs = b.let_shared(tile, (lid.clone() & u32c(31)) << u32c(2), 4);
    let run_pair = b.let_shared(tile, (lid.clone() & u32c(63)) << u32c(1), 2);
    let run_sum = runs
        .into_iter()
        .chain(run_pair)
        .fold(f32c(0.0), |a, x| a + x);
    b.set(acc, Expr::Var(acc) + run_sum);
    b.for_(u32c(0), u32c(128), u32c(3), |b, i| {
        let x = load_shared(tile, i.clone());
        b.set(
            acc,
            Expr::Var(acc) + select(load_shared(marks, i), x, f32c(0.0)),
        );
    });
    b.for_(u32c(0), u32c(u32::MAX), u32c(0x4000_0000), |b, i| {
        b.set(acc, Expr::Var(acc) + cast(Ty::F32, i));
    });
    b.if_else(
        ge_u(load_shared(counts, u32c(1)), i32c(0)),
        |b| b.fault(7),
        |b| {
            b.if_(eq(gid.clone(), u32c(u32::MAX)), |b| b.fault(0));
        },
    );
    let consts = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.1,
        1e-5,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65504.0,
        3.0e38,
    ];
    let mut sum = Expr::Var(acc);
    for c in consts {
        sum = sum * f32c(c);
    }
    b.store(out, gid * u32c(128) + lid.clone(), sum);
    b.store(flags, lid, u32c(u32::MAX) ^ cast(Ty::U32, i32c(i32::MIN)));
    b.finish()
}

fn ge_u(a: Expr, b: Expr) -> Expr {
    cmp(CmpOp::Ge, a, b)
}

/// `y[i] = silu(x[i]) * g[i]` over `n` elements, with a grid-stride loop.
fn elementwise_kernel() -> Kernel {
    let mut b = KernelBuilder::new("silu_mul.l3", 256);
    let x = b.param("x", Word::F32, Access::Read);
    let g = b.param("gate", Word::F32, Access::Read);
    let n = b.param("n", Word::U32, Access::Read);
    let y = b.param("y", Word::F32, Access::ReadWrite);
    let count = b.let_(Ty::U32, load(n, u32c(0)));
    let stride = b.let_(Ty::U32, group_count_x() * u32c(256));
    b.for_(
        group_id(0) * u32c(256) + local_id(),
        count,
        stride,
        |b, i| {
            let v = b.let_(Ty::F32, load(x, i.clone()));
            let silu = v.clone() / (f32c(1.0) + un(UnOp::Exp, -v));
            b.store(y, i.clone(), silu * load(g, i));
        },
    );
    b.finish()
}

/// A workgroup sum of 256 elements per group: a shared-memory tree with barriers.
fn reduction_kernel() -> Kernel {
    const W: u32 = 256;
    let mut b = KernelBuilder::new("sum_rows", W);
    let x = b.param("x", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let tile = b.shared("partial", Ty::F32, W);
    let lid = b.let_(Ty::U32, local_id());
    b.store_shared(
        tile,
        lid.clone(),
        load(x, group_id(0) * u32c(W) + lid.clone()),
    );
    b.barrier();
    // for level in 0..8 { stride = 128 >> level; if lid < stride { t[lid] += t[lid + stride] } barrier }
    b.for_(u32c(0), u32c(8), u32c(1), |b, level| {
        let stride = b.let_(Ty::U32, u32c(W / 2) >> level);
        b.if_(lt(lid.clone(), stride.clone()), |b| {
            let sum = load_shared(tile, lid.clone()) + load_shared(tile, lid.clone() + stride);
            b.store_shared(tile, lid.clone(), sum);
        });
        b.barrier();
    });
    b.if_(eq(lid, u32c(0)), |b| {
        b.store(out, group_id(0), load_shared(tile, u32c(0)))
    });
    b.finish()
}

/// Q4_0-style dequantization: blocks of 18 bytes (an f16 scale, 16 bytes of 4-bit values),
/// one block per thread, unpacked byte by byte; faults on a block count past the buffer.
fn dequant_kernel() -> Kernel {
    let mut b = KernelBuilder::new("dequant_q4_0", 64);
    let q = b.param("blocks", Word::U32, Access::Read);
    let meta = b.param("meta", Word::U32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let n_blocks = b.let_(Ty::U32, load(meta, u32c(0)));
    let block = b.let_(Ty::U32, group_id(0) * u32c(64) + local_id());
    b.if_(lt(load(meta, u32c(1)), n_blocks.clone()), |b| b.fault(3));
    b.if_(lt(block.clone(), n_blocks), |b| {
        let base = b.let_(Ty::U32, block.clone() * u32c(18));
        // The scale is the f16 at byte `base`: half index base / 2 (blocks start on even bytes).
        let d = b.let_(Ty::F32, load_half(q, base.clone() >> u32c(1), Half::F16));
        b.for_(u32c(0), u32c(16), u32c(1), |b, j| {
            let byte = b.let_(Ty::U32, load_byte(q, base.clone() + u32c(2) + j.clone()));
            let lo = cast(Ty::I32, byte.clone() & u32c(0xf)) - i32c(8);
            let hi = cast(Ty::I32, byte >> u32c(4)) - i32c(8);
            let o = b.let_(Ty::U32, block.clone() * u32c(32) + j);
            b.store(out, o.clone(), d.clone() * cast(Ty::F32, lo));
            b.store(out, o + u32c(16), d.clone() * cast(Ty::F32, hi));
        });
    });
    b.finish()
}

/// The table for `target`: the hand-written kernels (and the team-sum kernel where the target
/// has shuffles), then what the planner makes for it.
fn table(target: &Target) -> Vec<Kernel> {
    let mut kernels = vec![
        operators_kernel(false).0,
        operators_kernel(true).0,
        statements_kernel(),
        elementwise_kernel(),
        reduction_kernel(),
        dequant_kernel(),
    ];
    if target.team_shuffles() {
        kernels.push(team_sum_kernel());
    }
    kernels.extend(planned_kernels(target));
    kernels.extend(tiled_and_split_kernels(target));
    kernels.extend(decode_shaped_kernels(target));
    kernels
}

/// Sums over teams of 8 and of 32 lanes, and shuffles of each word type, exchanged in
/// registers (CUDA only).
fn team_sum_kernel() -> Kernel {
    let mut b = KernelBuilder::new("team_sum", 64);
    let x = b.param("x", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let eight = b.var(Ty::F32, load(x, local_id()));
    let warp = b.var(Ty::F32, Expr::Var(eight));
    b.team_sum(eight, 8);
    b.team_sum(warp, 32);
    let f = b.let_(Ty::F32, shuffle_xor(Expr::Var(eight), 1));
    let u = b.let_(Ty::U32, shuffle_xor(local_id(), 16));
    let i = b.let_(Ty::I32, shuffle_xor(cast(Ty::I32, local_id()), 4));
    let sum = Expr::Var(eight) + Expr::Var(warp) + f + cast(Ty::F32, u) + cast(Ty::F32, i);
    b.store(out, local_id(), sum);
    b.finish()
}

/// The tiled contraction over every weight type (f32 both ways, f16, bf16, every GGUF block
/// format; split along the contraction axis over 512 elements) with its fusions (a norm and a
/// nested row reduction per tile row, siblings, gated and residual epilogues), and the split
/// reductions over long rows (arg-max with an i32 row and a sum sharing its kernels, top-k),
/// renamed apart.
fn tiled_and_split_kernels(target: &Target) -> Vec<Kernel> {
    use poot_graph_ir::{Builder, DType, Outputs, ReduceOp, TensorType, TraceLimits, ops};
    let input = |b: &Builder, name: &str, dtype: DType, dims: &[usize]| {
        b.constant(name, TensorType::new(dtype, dims.to_vec()))
            .unwrap()
    };
    let mut graphs = Vec::new();
    let mut weights: Vec<(DType, usize)> =
        vec![(DType::F32, 70), (DType::F16, 70), (DType::BF16, 70)];
    for f in poot_formats::BlockFormat::ALL {
        weights.push((DType::Packed(f.ggml_type()), 2 * f.block_elems()));
    }
    for (dtype, k) in weights {
        let b = Builder::new(TraceLimits::standard(64));
        let x = input(&b, "x", DType::F32, &[64, k]);
        let w = input(&b, "w", dtype, &[75, k]);
        let mut out = Outputs::new(ops::linear(&b, x, w, None).unwrap());
        if dtype == DType::F32 {
            let wt = input(&b, "wt", DType::F32, &[k, 75]);
            out = out.and(b.matmul(x, wt, false).unwrap());
        }
        graphs.push(b.finish(out).unwrap());
    }
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", DType::F32, &[2, 50, 96]);
    let h = ops::rmsnorm(&b, x, input(&b, "n", DType::F32, &[96]), 1e-6).unwrap();
    let q = ops::linear(&b, h, input(&b, "wq", DType::F32, &[40, 96]), None).unwrap();
    let k = ops::linear(&b, h, input(&b, "wk", DType::F16, &[24, 96]), None).unwrap();
    let g = ops::linear(&b, h, input(&b, "wg", DType::F32, &[150, 96]), None).unwrap();
    let u = ops::linear(&b, h, input(&b, "wu", DType::BF16, &[150, 96]), None).unwrap();
    let f = ops::swiglu(&b, g, u).unwrap();
    let d = ops::linear(&b, f, input(&b, "wd", DType::F32, &[96, 150]), None).unwrap();
    let y = b.add(x, d).unwrap();
    let xs = input(&b, "xs", DType::F32, &[20, 48]);
    let mean = b.reduce(ReduceOp::Sum, xs, 1).unwrap();
    let c = b.sub(xs, b.broadcast(mean, [20, 48]).unwrap()).unwrap();
    let var = b.reduce(ReduceOp::Sum, b.mul(c, c).unwrap(), 1).unwrap();
    let centered = b.mul(c, b.broadcast(var, [20, 48]).unwrap()).unwrap();
    let z = b
        .matmul(centered, input(&b, "wz", DType::F32, &[33, 48]), true)
        .unwrap();
    graphs.push(b.finish(Outputs::new(q).and(k).and(y).and(z)).unwrap());
    let b = Builder::new(TraceLimits::standard(64));
    let l = input(&b, "l", DType::F32, &[2, 30000]);
    let li = b.cast(l, DType::I32).unwrap();
    let out = Outputs::new(b.argmax(l, 1).unwrap())
        .and(b.argmax(li, 1).unwrap())
        .and(b.reduce(ReduceOp::Sum, l, 1).unwrap())
        .and(b.reduce(ReduceOp::Max, li, 1).unwrap())
        .and(b.arg_top_k(l, 20).unwrap());
    graphs.push(b.finish(out).unwrap());
    let mut out: Vec<Kernel> = Vec::new();
    let mut kinds = Vec::new();
    for g in graphs {
        let plan = poot_graph_plan::compile(&g, target).unwrap();
        for mut k in plan.kernels {
            kinds.push(k.kind().to_string());
            k.name = format!("tiled_split_{}_{}", k.name, out.len());
            out.push(k);
        }
    }
    for want in [
        "gemm",
        "gemm_epilogue",
        "gemm_split",
        "gemm_combine",
        "reduce_split",
        "reduce_combine",
        "top_k_split",
        "top_k_combine",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "no {want} kernel in {kinds:?}"
        );
    }
    out
}

/// The decode-shaped contraction kernels of every weight layout (each block format, f32, f16
/// and bf16 of even and odd length) at one row; for a few layouts also at two rows, as Q/K
/// siblings behind a norm, and with a residual add in the epilogue.
fn decode_shaped_kernels(target: &Target) -> Vec<Kernel> {
    use poot_formats::BlockFormat;
    use poot_graph_ir::ops;
    use poot_graph_ir::{Builder, DType, Outputs, TensorType, TraceLimits};
    let mut layouts: Vec<(DType, usize)> = BlockFormat::ALL
        .iter()
        .map(|f| (DType::Packed(f.ggml_type()), 512))
        .collect();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        layouts.extend([(dtype, 512), (dtype, 77)]);
    }
    let fused = [
        DType::Packed(BlockFormat::Q4_K.ggml_type()),
        DType::Packed(BlockFormat::Q5_0.ggml_type()),
        DType::F16,
    ];
    let mut out = Vec::new();
    for (i, (dtype, k)) in layouts.into_iter().enumerate() {
        let all = fused.contains(&dtype);
        for rows in if all { &[1, 2][..] } else { &[1][..] } {
            let rows = *rows;
            let b = Builder::new(TraceLimits::standard(64));
            let constant = |name: &str, dtype: DType, dims: Vec<usize>| {
                b.constant(name, TensorType::new(dtype, dims)).unwrap()
            };
            let x = constant("x", DType::F32, vec![rows, k]);
            let mut outputs =
                Outputs::new(ops::linear(&b, x, constant("w", dtype, vec![9, k]), None).unwrap());
            if all {
                let h = ops::rmsnorm(&b, x, constant("n", DType::F32, vec![k]), 1e-6).unwrap();
                let q = ops::linear(&b, h, constant("wq", dtype, vec![40, k]), None).unwrap();
                let kk = ops::linear(&b, h, constant("wk", dtype, vec![24, k]), None).unwrap();
                let o = ops::linear(&b, x, constant("wo", dtype, vec![k, k]), None).unwrap();
                outputs = outputs.and(q).and(kk).and(b.add(x, o).unwrap());
            }
            let plan = poot_graph_plan::compile(&b.finish(outputs).unwrap(), target).unwrap();
            for mut k in plan.kernels {
                assert!(k.kind().starts_with("gemv"), "{dtype}: {}", k.name);
                k.name = format!("decode_{i}_{rows}_{}", k.name);
                out.push(k);
            }
        }
    }
    out
}

/// Every distinct kernel the planner makes for SmolLM2 and Gemma 3 decode and prefill steps
/// (fused norms, projections with prologues and epilogues, attention and its combine, grouped
/// cache writes), and for a one-layer decoder in each Hugging Face packed layout (GPTQ with
/// act-order, AWQ, FP8 in blocks, FP4), renamed apart.
fn planned_kernels(target: &Target) -> Vec<Kernel> {
    use common::reference_models::{Projections, build, gemma3_270m, one_layer, smollm2_135m};
    use poot_formats::{
        AwqFormat, Fp8Format, Fp8Scaling, GptqFormat, GptqZeros, GroupSize, PackedFormat, ScaleType,
    };
    use poot_graph_ir::TraceLimits;
    use poot_models::{StepShape, StepSpec};
    let g64 = GroupSize::Elems(std::num::NonZeroU32::new(64).unwrap());
    let packed = [
        (
            "gptq",
            PackedFormat::Gptq(GptqFormat {
                group: g64,
                act_order: true,
                zeros: GptqZeros::V1PlusOne,
            }),
        ),
        ("awq", PackedFormat::Awq(AwqFormat { group: g64 })),
        (
            "fp8",
            PackedFormat::Fp8(Fp8Format {
                scaling: Fp8Scaling::Block128,
                scale_type: ScaleType::BF16,
            }),
        ),
        ("fp4", PackedFormat::Fp4E2M1),
    ];
    let mut out: Vec<Kernel> = Vec::new();
    let mut references = vec![smollm2_135m(), gemma3_270m()];
    references.extend(
        packed
            .into_iter()
            .map(|(name, format)| one_layer(name, Projections::Packed(format))),
    );
    for r in references {
        let model = build(&r);
        for tokens in [1, 16] {
            let capacity = model.config().max_positions.min(512);
            let spec = StepSpec::step(StepShape::new(1, tokens, capacity));
            let graph = model.trace(&spec, TraceLimits::standard(64)).unwrap();
            let plan = poot_graph_plan::compile(&graph, target).unwrap();
            for mut k in plan.kernels {
                k.name = format!("{}_{}_{tokens}_{}", r.name, k.name, out.len()).replace('-', "_");
                k.name.retain(|c| c.is_ascii_alphanumeric() || c == '_');
                out.push(k);
            }
        }
    }
    out
}

#[test]
fn the_table_covers_every_variant() {
    let (_, runtime) = operators_kernel(false);
    let (_, literal) = operators_kernel(true);
    // Unary: Neg/Abs on f32 and i32; Not on i32, u32, bool; BitsToU32 of f32, BitsToF32 and
    // F16ToF32 of u32; the other 14 on f32.
    let unary = 2 * 2 + 3 + 3 + 14;
    // Binary: Add/Sub/Mul/Div/Max/Min on f32, i32, u32; Rem on i32, u32; Pow on f32;
    // And/Or/Xor on i32, u32, bool; Shl/Shr of i32 and u32 by u32.
    let binary = 6 * 3 + 2 + 1 + 3 * 3 + 2 * 2;
    // Fused multiply-adds: two on f32.
    let (compare, casts, selects, mul_adds) = (6 * 4, 4 * 4, 4, 2);
    assert_eq!(
        runtime,
        unary + binary + compare + casts + selects + mul_adds
    );
    // With literals, four operand choices each, except comparisons, selects and multiply-adds.
    assert_eq!(
        literal,
        4 * (unary + binary + casts) + compare + selects + mul_adds
    );

    let mut exprs = Vec::new();
    let mut stmts = Vec::new();
    for k in table(&ptx_half()) {
        walk(&k.body, &mut stmts, &mut exprs);
    }
    for want in [
        "F32",
        "I32",
        "U32",
        "Bool",
        "Var",
        "Builtin",
        "Load",
        "LoadByte",
        "LoadHalf",
        "LoadShared",
        "Unary",
        "Binary",
        "Cmp",
        "Select",
        "MulAdd",
        "ShuffleXor",
        "Cast",
    ] {
        assert!(exprs.contains(&want), "no {want} expression");
    }
    for want in [
        "Let",
        "Set",
        "Store",
        "StoreShared",
        "If",
        "For",
        "LetWords",
        "LetShared",
        "TeamSum",
        "MmaTf32",
        "MmaHalf",
        "StoreSharedHalves",
        "Barrier",
        "Fault",
    ] {
        assert!(stmts.contains(&want), "no {want} statement");
    }
}

fn walk(body: &[Stmt], stmts: &mut Vec<&'static str>, exprs: &mut Vec<&'static str>) {
    for s in body {
        let (name, es, blocks): (&str, Vec<&Expr>, Vec<&[Stmt]>) = match s {
            Stmt::Let { value, .. } => ("Let", vec![value], vec![]),
            Stmt::Set { value, .. } => ("Set", vec![value], vec![]),
            Stmt::Store { index, value, .. } => ("Store", vec![index, value], vec![]),
            Stmt::StoreShared { index, value, .. } => ("StoreShared", vec![index, value], vec![]),
            Stmt::If {
                cond,
                then,
                otherwise,
            } => ("If", vec![cond], vec![then, otherwise]),
            Stmt::For {
                start,
                end,
                step,
                body,
                ..
            } => ("For", vec![start, end, step], vec![body]),
            Stmt::LetWords { index, .. } => ("LetWords", vec![index], vec![]),
            Stmt::LetShared { index, .. } => ("LetShared", vec![index], vec![]),
            Stmt::TeamSum { .. } => ("TeamSum", vec![], vec![]),
            Stmt::MmaTf32 { a, b, .. } => ("MmaTf32", a.iter().chain(b).collect(), vec![]),
            Stmt::MmaHalf { a, b, .. } => ("MmaHalf", a.iter().chain(b).collect(), vec![]),
            Stmt::StoreSharedHalves { index, values, .. } => (
                "StoreSharedHalves",
                std::iter::once(index).chain(values).collect(),
                vec![],
            ),
            Stmt::Barrier => ("Barrier", vec![], vec![]),
            Stmt::Fault { .. } => ("Fault", vec![], vec![]),
        };
        stmts.push(name);
        for e in es {
            walk_expr(e, exprs);
        }
        for b in blocks {
            walk(b, stmts, exprs);
        }
    }
}

fn walk_expr(e: &Expr, out: &mut Vec<&'static str>) {
    let (name, kids): (&str, Vec<&Expr>) = match e {
        Expr::F32(_) => ("F32", vec![]),
        Expr::I32(_) => ("I32", vec![]),
        Expr::U32(_) => ("U32", vec![]),
        Expr::Bool(_) => ("Bool", vec![]),
        Expr::Var(_) => ("Var", vec![]),
        Expr::Builtin(_) => ("Builtin", vec![]),
        Expr::Load { index, .. } => ("Load", vec![index]),
        Expr::LoadByte { byte, .. } => ("LoadByte", vec![byte]),
        Expr::LoadHalf { index, .. } => ("LoadHalf", vec![index]),
        Expr::LoadShared { index, .. } => ("LoadShared", vec![index]),
        Expr::Unary(_, x) => ("Unary", vec![x]),
        Expr::Binary(_, a, b) => ("Binary", vec![a, b]),
        Expr::Cmp(_, a, b) => ("Cmp", vec![a, b]),
        Expr::Select {
            cond,
            on_true,
            on_false,
        } => ("Select", vec![cond, on_true, on_false]),
        Expr::MulAdd(a, b, c) => ("MulAdd", vec![a, b, c]),
        Expr::ShuffleXor { value, .. } => ("ShuffleXor", vec![value]),
        Expr::Cast(_, x) => ("Cast", vec![x]),
    };
    out.push(name);
    for k in kids {
        walk_expr(k, out);
    }
}

// ---- WGSL through naga ----

fn naga_validate(name: &str, src: &str) -> naga::Module {
    let module = match naga::front::wgsl::parse_str(src) {
        Ok(m) => m,
        Err(e) => panic!(
            "{name}: naga rejects the WGSL:\n{}\n{src}",
            e.emit_to_string(src)
        ),
    };
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    );
    if let Err(e) = validator.validate(&module) {
        panic!(
            "{name}: naga's validator rejects the WGSL:\n{}\n{src}",
            e.emit_to_string(src)
        );
    }
    module
}

#[test]
fn every_kernel_renders_to_wgsl_naga_accepts() {
    for k in table(&Target::wgpu_preset()) {
        let w = render_wgsl(&k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(
            render_wgsl(&k).ok().as_ref(),
            Some(&w),
            "{}: rendering is not deterministic",
            k.name
        );
        let module = naga_validate(&k.name, &w.source);

        assert_eq!(w.entry, entry_name(&k));
        assert_eq!(module.entry_points.len(), 1);
        let ep = &module.entry_points[0];
        assert_eq!(ep.name, w.entry);
        assert_eq!(ep.stage, naga::ShaderStage::Compute);
        assert_eq!(ep.workgroup_size, [k.workgroup, 1, 1]);

        // The module's storage bindings are exactly the parameters, then the fault word.
        let mut bound: Vec<(u32, String)> = module
            .global_variables
            .iter()
            .filter_map(|(_, g)| {
                g.binding
                    .as_ref()
                    .map(|b| (b.binding, g.name.clone().unwrap_or_default()))
            })
            .collect();
        bound.sort();
        let mut want: Vec<(u32, String)> = w
            .bindings
            .iter()
            .map(|b| (b.binding, b.name.clone()))
            .collect();
        assert_eq!(w.bindings.len(), k.params.len());
        assert_eq!(w.fault_binding.is_some(), can_fault(&k));
        if let Some(f) = w.fault_binding {
            assert_eq!(f as usize, k.params.len());
            want.push((f, "poot_fault".to_string()));
        }
        assert_eq!(bound, want, "{}", k.name);
    }
}

// ---- CUDA through clang ----

/// What NVRTC declares by itself and clang with `-nocudainc -nocudalib` does not: the CUDA
/// attribute macros, the built-in variables, and the device functions the renderer calls
/// (math functions map to libdevice's `__nv_*`, left undefined: PTX only declares them).
const CLANG_PRELUDE: &str = r#"
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline)) inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include "__clang_cuda_builtin_vars.h"
static __device__ __forceinline__ void __trap() { __builtin_trap(); }
static __device__ __forceinline__ void __threadfence_system() { __nvvm_membar_sys(); }
static __device__ __forceinline__ float __uint_as_float(unsigned int x) { return __nvvm_bitcast_i2f((int)x); }
static __device__ __forceinline__ unsigned int __float_as_uint(float x) { return (unsigned int)__nvvm_bitcast_f2i(x); }
static __device__ __forceinline__ unsigned int atomicMax(unsigned int* p, unsigned int v) { return __nvvm_atom_max_gen_ui(p, v); }
static __device__ __forceinline__ unsigned int atomicOr(unsigned int* p, unsigned int v) { return (unsigned int)__nvvm_atom_or_gen_i((int*)p, (int)v); }
#define POOT_LIBDEVICE1(f) extern "C" __device__ float __nv_##f(float); static __device__ __forceinline__ float f(float x) { return __nv_##f(x); }
POOT_LIBDEVICE1(expf) POOT_LIBDEVICE1(logf) POOT_LIBDEVICE1(sqrtf) POOT_LIBDEVICE1(tanhf) POOT_LIBDEVICE1(erff)
POOT_LIBDEVICE1(floorf) POOT_LIBDEVICE1(ceilf) POOT_LIBDEVICE1(rintf) POOT_LIBDEVICE1(sinf) POOT_LIBDEVICE1(cosf) POOT_LIBDEVICE1(fabsf)
static __device__ __forceinline__ unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, unsigned int lanes) { unsigned int r; asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, %3;" : "=r"(r) : "r"(v), "r"(lanes), "r"(mask)); return r; }
static __device__ __forceinline__ int __shfl_xor_sync(unsigned int mask, int v, unsigned int lanes) { return (int)__shfl_xor_sync(mask, (unsigned int)v, lanes); }
static __device__ __forceinline__ float __shfl_xor_sync(unsigned int mask, float v, unsigned int lanes) { return __uint_as_float(__shfl_xor_sync(mask, __float_as_uint(v), lanes)); }
extern "C" __device__ float __nv_fmaf(float, float, float);
static __device__ __forceinline__ float fmaf(float x, float y, float z) { return __nv_fmaf(x, y, z); }
extern "C" __device__ float __nv_powf(float, float);
static __device__ __forceinline__ float powf(float x, float y) { return __nv_powf(x, y); }
"#;

/// The clang to use (`POOT_CLANG`, else `clang`) and the newest PTX target it knows, or why not
/// (probed in `dir`).
fn clang(dir: &std::path::Path) -> Result<(String, &'static str), String> {
    let clang = std::env::var("POOT_CLANG").unwrap_or_else(|_| "clang".to_string());
    let probe = dir.join("probe.cu");
    std::fs::write(&probe, "").map_err(|e| e.to_string())?;
    for arch in ["sm_90", "sm_80"] {
        let out = Command::new(&clang)
            .args([
                "-x",
                "cuda",
                "--cuda-device-only",
                &format!("--cuda-gpu-arch={arch}"),
                "-nocudainc",
                "-nocudalib",
                "-S",
                "-o",
            ])
            .arg(dir.join("probe.ptx"))
            .arg(&probe)
            .output()
            .map_err(|e| format!("`{clang}` does not run ({e})"))?;
        if out.status.success() {
            return Ok((clang, arch));
        }
    }
    Err(format!("`{clang}` compiles no CUDA for sm_90 or sm_80"))
}

/// A scratch directory of test `name` (tests run in parallel, each removes its own).
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-render-cuda-{}-{name}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

#[test]
fn every_kernel_renders_to_cuda_clang_compiles() {
    let dir = scratch_dir("all");
    let (clang, arch) = match clang(&dir) {
        Ok(c) => c,
        Err(why) => {
            println!("SKIP: CUDA rendering not compiled: {why} (apt-get install -y clang)");
            return;
        }
    };
    std::fs::write(dir.join("prelude.h"), CLANG_PRELUDE).expect("write the prelude");
    for (i, k) in table(&ptx_half()).into_iter().enumerate() {
        let src = render_cuda(&k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(
            render_cuda(&k).as_ref(),
            Ok(&src),
            "{}: rendering is not deterministic",
            k.name
        );
        assert!(
            !src.contains("#include"),
            "{}: NVRTC source must not include headers",
            k.name
        );
        let entry = entry_name(&k);
        let bounds = match k.min_resident {
            0 => k.workgroup.to_string(),
            n => format!("{}, {n}", k.workgroup),
        };
        let signature =
            format!("extern \"C\" __global__ void __launch_bounds__({bounds}) {entry}(");
        let opened = src.find(&signature).expect("the entry's signature");
        // Before anything else, the kernel waits for the kernels it may overlap.
        let first = src[opened..].lines().nth(1).unwrap_or_default();
        assert_eq!(first.trim(), "poot_wait_predecessors();", "{}", k.name);
        // The first kernel is also compiled as the device compiles for early launches.
        let early = i == 0;
        let ptx_text = clang_ptx(&clang, arch, &dir, &k, &src, early);
        assert!(
            ptx_text.contains(&format!(".entry {entry}(")),
            "{}: no entry `{entry}` in the PTX",
            k.name
        );
        if can_fault(&k) {
            assert!(ptx_text.contains("trap;"), "{}: no trap in the PTX", k.name);
        }
        if arch == "sm_90" {
            assert!(ptx_text.contains("griddepcontrol.wait;"), "{}", k.name);
            assert_eq!(
                ptx_text.contains("griddepcontrol.launch_dependents;"),
                early,
                "{}",
                k.name
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PTX clang makes of kernel `k` rendered as `src` for `arch` (with the prelude in `dir`),
/// compiled as for early launches when `early`; panics with clang's complaint.
fn clang_ptx(
    clang: &str,
    arch: &str,
    dir: &std::path::Path,
    k: &Kernel,
    src: &str,
    early: bool,
) -> String {
    let entry = entry_name(k);
    let cu = dir.join(format!("{entry}_{arch}.cu"));
    let ptx = dir.join(format!("{entry}_{arch}.ptx"));
    std::fs::write(&cu, src).expect("write the source");
    let out = Command::new(clang)
        .args([
            "-x",
            "cuda",
            "--cuda-device-only",
            &format!("--cuda-gpu-arch={arch}"),
            "-nocudainc",
            "-nocudalib",
            "-O2",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
            // Planned kernels keep index variables some paths do not read.
            "-Wno-unused-variable",
        ])
        .args(early.then_some("-DPOOT_EARLY_LAUNCH"))
        .arg("-include")
        .arg(dir.join("prelude.h"))
        .arg("-S")
        .arg("-o")
        .arg(&ptx)
        .arg(&cu)
        .output()
        .expect("run clang");
    assert!(
        out.status.success(),
        "{}: clang rejects the CUDA for {arch}:\n{}\n{src}",
        k.name,
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&ptx).expect("read the PTX")
}

/// Tiled contractions against f16 and bf16 weights (a norm into sibling projections, a gated
/// feed-forward with its residual; 64 rows, and 16 rows over 512 elements, split) multiply in
/// half precision, and compile to PTX holding those products for sm_80 and for sm_90 (each
/// where this clang knows it).
#[test]
fn half_precision_tiles_compile_for_sm_80_and_sm_90() {
    use poot_graph_ir::{Builder, DType, Outputs, TensorType, TraceLimits, ops};
    let dir = scratch_dir("half");
    let (clang, newest) = match clang(&dir) {
        Ok(c) => c,
        Err(why) => {
            println!("SKIP: CUDA rendering not compiled: {why} (apt-get install -y clang)");
            return;
        }
    };
    std::fs::write(dir.join("prelude.h"), CLANG_PRELUDE).expect("write the prelude");
    let archs: &[&str] = if newest == "sm_90" {
        &["sm_80", "sm_90"]
    } else {
        println!("SKIP: `{clang}` does not compile for sm_90; sm_80 only");
        &["sm_80"]
    };
    for (dtype, kind) in [(DType::F16, "f16"), (DType::BF16, "bf16")] {
        for (rows, k_len) in [(64, 96), (16, 512)] {
            let b = Builder::new(TraceLimits::standard(64));
            let c = |name: &str, dtype: DType, dims: &[usize]| {
                b.constant(name, TensorType::new(dtype, dims.to_vec()))
                    .unwrap()
            };
            let x = c("x", DType::F32, &[rows, k_len]);
            let h = ops::rmsnorm(&b, x, c("n", DType::F32, &[k_len]), 1e-6).unwrap();
            let q = ops::linear(&b, h, c("wq", dtype, &[64, k_len]), None).unwrap();
            let kk = ops::linear(&b, h, c("wk", dtype, &[40, k_len]), None).unwrap();
            let g = ops::linear(&b, h, c("wg", dtype, &[72, k_len]), None).unwrap();
            let u = ops::linear(&b, h, c("wu", dtype, &[72, k_len]), None).unwrap();
            let f = ops::swiglu(&b, g, u).unwrap();
            let d = ops::linear(&b, f, c("wd", dtype, &[k_len, 72]), None).unwrap();
            let y = b.add(x, d).unwrap();
            let graph = b.finish(Outputs::new(q).and(kk).and(y)).unwrap();
            let plan = poot_graph_plan::compile(&graph, &ptx_half()).unwrap();
            let mut products = 0;
            for (i, mut k) in plan.kernels.into_iter().enumerate() {
                k.name = format!("half_{kind}_{rows}_{i}_{}", k.name);
                let src = render_cuda(&k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                if !src.contains("mma.sync") {
                    continue;
                }
                products += 1;
                assert!(!src.contains(".tf32"), "{}: tf32 products", k.name);
                for arch in archs {
                    let ptx = clang_ptx(&clang, arch, &dir, &k, &src, false);
                    for want in [
                        format!("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32"),
                        format!("cvt.rn.{kind}x2.f32"),
                    ] {
                        assert!(ptx.contains(&want), "{} ({arch}): no `{want}`", k.name);
                    }
                }
            }
            assert!(
                products >= 3,
                "{kind}, {rows} rows: {products} kernels multiply"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- Refusals ----

#[test]
fn malformed_kernels_are_refused_not_rendered() {
    let render_both = |k: &Kernel| -> (Result<String, RenderError>, Result<String, RenderError>) {
        (render_cuda(k), render_wgsl(k).map(|w| w.source))
    };
    let base = || {
        let mut b = KernelBuilder::new("bad", 64);
        let out = b.param("out", Word::U32, Access::ReadWrite);
        (b, out)
    };

    // Ill-typed: the validator's error comes back wrapped.
    let (mut b, out) = base();
    b.store(out, u32c(0), f32c(1.0));
    let (c, w) = render_both(&b.finish());
    assert!(matches!(c, Err(RenderError::Invalid(_))) && matches!(w, Err(RenderError::Invalid(_))));

    // A variable read after the block that declared it closed.
    let (mut b, out) = base();
    let mut inner = None;
    b.if_(Expr::Bool(true), |b| inner = Some(b.let_(Ty::U32, u32c(1))));
    b.store(out, u32c(0), inner.expect("declared"));
    let (c, w) = render_both(&b.finish());
    assert!(
        matches!(c, Err(RenderError::Undeclared { var: 0, .. })),
        "{c:?}"
    );
    assert!(matches!(w, Err(RenderError::Undeclared { var: 0, .. })));

    // A loop counter read after its loop.
    let (mut b, out) = base();
    let mut counter = None;
    b.for_(u32c(0), u32c(4), u32c(1), |_, i| counter = Some(i));
    b.store(out, u32c(0), counter.expect("declared"));
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::Undeclared { .. })
    ));

    // A variable declared twice.
    let (b, _) = base();
    let mut k = b.finish();
    k.vars = vec![Ty::U32];
    let decl = Stmt::Let {
        var: poot_kernel::Var(0),
        ty: Ty::U32,
        value: u32c(0),
    };
    k.body = vec![decl.clone(), decl];
    assert!(matches!(
        render_both(&k).1,
        Err(RenderError::Redeclared { var: 0, .. })
    ));

    // A fourth grid axis, an empty workgroup, a constant zero step, an empty shared array.
    let (mut b, out) = base();
    b.store(out, u32c(0), group_id(3));
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::NoSuchAxis { axis: 3, .. })
    ));
    let mut k = base().0.finish();
    k.workgroup = 0;
    assert!(matches!(
        render_both(&k).1,
        Err(RenderError::EmptyWorkgroup { .. })
    ));
    let (mut b, _) = base();
    b.for_(u32c(0), u32c(4), u32c(0), |_, _| {});
    assert!(matches!(
        render_both(&b.finish()).1,
        Err(RenderError::ZeroStep { .. })
    ));
    let (mut b, _) = base();
    b.shared("nothing", Ty::F32, 0);
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::EmptyShared { .. })
    ));

    // WGSL has no team sums; a wide load of 3 words or into a float buffer is ill-typed.
    let (mut b, out) = base();
    let v = b.var(Ty::F32, f32c(1.0));
    b.team_sum(v, 32);
    b.store(out, local_id(), cast(Ty::U32, Expr::Var(v)));
    let (c, w) = render_both(&b.finish());
    assert!(c.is_ok(), "{c:?}");
    assert!(matches!(w, Err(RenderError::Unsupported { .. })), "{w:?}");
    let (mut b, out) = base();
    b.let_words(out, u32c(0), 3);
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::Invalid(_))
    ));
    let mut b = KernelBuilder::new("bad", 64);
    let f = b.param("f", Word::F32, Access::Read);
    b.let_words(f, u32c(0), 4);
    assert!(matches!(
        render_both(&b.finish()).1,
        Err(RenderError::Invalid(_))
    ));
    // A wide shared load of 3 elements, or from a non-f32 array, is ill-typed.
    let (mut b, _) = base();
    let t = b.shared("t", Ty::F32, 16);
    b.let_shared(t, u32c(0), 3);
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::Invalid(_))
    ));
    let (mut b, _) = base();
    let t = b.shared("t", Ty::U32, 16);
    b.let_shared(t, u32c(0), 4);
    assert!(matches!(
        render_both(&b.finish()).1,
        Err(RenderError::Invalid(_))
    ));
    let (mut b, out) = base();
    b.store(out, u32c(0), shuffle_xor(local_id(), 1));
    let (c, w) = render_both(&b.finish());
    assert!(c.is_ok(), "{c:?}");
    assert!(matches!(w, Err(RenderError::Unsupported { .. })), "{w:?}");
    let (mut b, out) = base();
    b.store(out, u32c(0), shuffle_xor(local_id(), 32));
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::Invalid(_))
    ));
    let (mut b, _) = base();
    let v = b.var(Ty::F32, f32c(1.0));
    b.team_sum(v, 12);
    assert!(matches!(
        render_both(&b.finish()).0,
        Err(RenderError::Invalid(_))
    ));
}

#[test]
fn entry_names_are_sanitized_and_distinct() {
    let named = |name: &str| KernelBuilder::new(name, 1).finish();
    assert_eq!(entry_name(&named("rmsnorm_l3")), "k_rmsnorm_l3");
    let dotted = entry_name(&named("attn.l3"));
    assert!(
        dotted.starts_with("k_attn_l3_") && dotted.len() == "k_attn_l3_".len() + 8,
        "{dotted}"
    );
    assert_ne!(dotted, entry_name(&named("attn-l3")));
    assert_eq!(entry_name(&named("")), "k");
    assert!(entry_name(&named("main")).starts_with("k_main"));
}

/// The golden file of [`the_table_renders_as_pinned`].
const TABLE_GOLDEN: &str = "tests/golden/render_table.txt";

/// The exact text each renderer writes for the table of its backend's target (CUDA C for PTX,
/// WGSL for wgpu, host C for the CPU), one line per kernel: the language, the kernel, the
/// source's length and SHA-256. A change to a renderer that moves one byte of any of them fails
/// here; where the change means to, rerun with `POOT_BLESS=1` to rewrite the file and say in
/// the commit why the kernels moved.
#[test]
fn the_table_renders_as_pinned() {
    use sha2::{Digest, Sha256};
    type Render = fn(&Kernel) -> Result<String, RenderError>;
    let languages: [(&str, Target, Render); 3] = [
        ("cuda", ptx_half(), render_cuda),
        ("wgsl", Target::wgpu_preset(), |k| {
            render_wgsl(k).map(|w| w.source)
        }),
        (
            "host_c",
            cpu_kernels_only(),
            poot_kernel::render::render_host_c,
        ),
    ];
    let mut lines = Vec::new();
    for (language, target, render) in languages {
        for k in table(&target) {
            let source = render(&k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let hash: String = Sha256::digest(source.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            lines.push(format!("{language} {} {} {hash}", k.name, source.len()));
        }
    }
    let got = lines.join("\n") + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(TABLE_GOLDEN);
    if std::env::var_os("POOT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    let (want, got): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let moved: Vec<&&str> = got.iter().filter(|l| !want.contains(l)).collect();
    let gone: Vec<&&str> = want.iter().filter(|l| !got.contains(l)).collect();
    assert!(
        moved.is_empty() && gone.is_empty(),
        "rendered table differs from {TABLE_GOLDEN}: new {moved:#?}, gone {gone:#?}"
    );
}

/// The CPU preset with its contraction library turned off, so the table's contractions are
/// kernels there too.
fn cpu_kernels_only() -> Target {
    let mut t = Target::cpu_preset();
    t.tuning.library_gemm = false;
    t
}

/// The PTX preset with the opt-in half-precision tiles (`mma=half`), so the table holds their
/// kernels beside every other.
fn ptx_half() -> Target {
    let mut t = Target::ptx_preset();
    t.tuning.gemm_matrix_units = poot_graph_plan::MatrixUnits::Half;
    // The products under test are the kernels' own, not the library's.
    t.tuning.library_gemm = false;
    t
}
