//! Every primitive against the naive f64 reference, driven by one table of rows
//! (op, inputs with shapes, dtypes and value generators, tolerance).
//!
//! Tolerances, and why:
//! - `Exact` for movement, indexing, integer, bool, comparison, cast, max/min, and the f32 ops
//!   that IEEE rounds once: add, sub, mul, div, sqrt, recip, neg, abs, floor, ceil. (For +, -, *,
//!   / and sqrt of f32 operands, computing in f64 and rounding to f32 gives the correctly
//!   rounded f32 result, so the f64 reference rounded once must match bit for bit.)
//! - `Ulps(1)` for exp, log, tanh, erf, sin, cos, pow: both sides compute in f64 with different
//!   libraries and round once, so they can straddle a rounding boundary by one ulp.
//! - `Ulps(2)` for rsqrt: `1 / sqrt(x)` in f32 rounds twice (the documented semantics).
//! - `Bound` for sums and contractions: the reference derives, per element, the classical bound
//!   `(n + 1) * 2^-24 * Σ|terms|` for f32 accumulation over `n` terms in any order, and
//!   `2^-24 * |sum|` (the final rounding) plus f64 summation error when accumulating in f64.
//!
//! Every row runs with f32 and with f64 accumulation. A non-finite result where the reference
//! is finite fails at any tolerance.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

mod common;

use common::{Gen, In, Tol, inp};
use poot_graph_ir::{
    BinaryOp, CompareOp, DType, GgmlType, OpKind, ReduceOp, Scalar, Shape, UnaryOp,
};

use DType::{BF16, Bool, F16, F32, I32, U8, U32};

struct Row {
    name: &'static str,
    op: OpKind,
    inputs: Vec<In>,
    tol: Tol,
}

fn row(name: &'static str, op: OpKind, inputs: Vec<In>, tol: Tol) -> Row {
    Row {
        name,
        op,
        inputs,
        tol,
    }
}

fn u(lo: f64, hi: f64) -> Gen {
    Gen::Uniform(lo, hi)
}

fn vals(v: &[f64]) -> Gen {
    Gen::Values(v.to_vec())
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;
const I32_MIN: f64 = -2147483648.0;
const I32_MAX: f64 = 2147483647.0;
const U32_MAX: f64 = 4294967295.0;

/// Special f32 values, and a second list of another length so pairs vary.
const SPECIAL: &[f64] = &[
    0.0, -0.0, 1.0, -1.0, 2.5, -2.5, INF, -INF, NAN, 1e-40, -3e38, 65520.0, 0.5,
];
const SPECIAL2: &[f64] = &[-0.0, 0.0, NAN, 1.0, -INF, 2.5, 3.0, -1.0, INF, 0.5, -2.5];

fn rows() -> Vec<Row> {
    let mut r = Vec::new();
    let f = |d: &[usize], g: Gen| inp(F32, d, g);

    // Sources.
    for (name, s) in [
        ("lit f32", Scalar::F32(-1.5)),
        ("lit i32", Scalar::I32(-7)),
        ("lit u32", Scalar::U32(7)),
        ("lit bool", Scalar::Bool(true)),
    ] {
        r.push(row(name, OpKind::Literal(s), vec![], Tol::Exact));
    }
    for (shape, axis, dtype) in [
        (vec![3, 4], 0, I32),
        (vec![3, 4], 1, I32),
        (vec![5], 0, U32),
        (vec![2, 3, 4], 1, F32),
        (vec![0, 3], 1, I32),
    ] {
        r.push(row(
            "iota",
            OpKind::Iota {
                shape: Shape::new(shape),
                axis,
                dtype,
            },
            vec![],
            Tol::Exact,
        ));
    }

    // Unary f32.
    let un = |op| OpKind::Unary(op);
    for (op, g, tol) in [
        (UnaryOp::Neg, u(-4.0, 4.0), Tol::Exact),
        (UnaryOp::Abs, u(-4.0, 4.0), Tol::Exact),
        (UnaryOp::Floor, u(-4.0, 4.0), Tol::Exact),
        (UnaryOp::Ceil, u(-4.0, 4.0), Tol::Exact),
        (UnaryOp::Round, u(-4.0, 4.0), Tol::Exact),
        (UnaryOp::Sqrt, u(0.0, 100.0), Tol::Exact),
        (UnaryOp::Recip, u(-100.0, 100.0), Tol::Exact),
        (UnaryOp::Rsqrt, u(1e-3, 1e3), Tol::Ulps(2)),
        (UnaryOp::Exp, u(-20.0, 20.0), Tol::Ulps(1)),
        (UnaryOp::Log, u(1e-3, 1e3), Tol::Ulps(1)),
        (UnaryOp::Tanh, u(-10.0, 10.0), Tol::Ulps(1)),
        (UnaryOp::Erf, u(-6.0, 6.0), Tol::Ulps(1)),
        (UnaryOp::Sin, u(-10.0, 10.0), Tol::Ulps(1)),
        (UnaryOp::Cos, u(-10.0, 10.0), Tol::Ulps(1)),
    ] {
        r.push(row("unary f32", un(op), vec![f(&[4, 33], g)], tol));
        let tol_special = if matches!(tol, Tol::Exact) {
            Tol::Exact
        } else {
            tol
        };
        r.push(row(
            "unary f32 special values",
            un(op),
            vec![f(&[13], vals(SPECIAL))],
            tol_special,
        ));
        r.push(row(
            "unary f32 rank 0",
            un(op),
            vec![f(&[], vals(&[0.75]))],
            tol,
        ));
        r.push(row(
            "unary f32 empty",
            un(op),
            vec![f(&[0, 5], vals(&[1.0]))],
            tol,
        ));
    }
    r.push(row(
        "exp overflow/underflow",
        un(UnaryOp::Exp),
        vec![f(&[6], vals(&[88.7, 89.0, -103.0, -104.0, 1e-7, -87.0]))],
        Tol::Ulps(1),
    ));
    r.push(row(
        "erf tails",
        un(UnaryOp::Erf),
        vec![f(&[8], vals(&[1e-8, -1e-8, 0.5, 2.4, 2.6, 3.9, -4.5, 9.0]))],
        Tol::Ulps(1),
    ));
    // Unary integers and bool.
    let ints = vals(&[I32_MIN, -1.0, 0.0, 1.0, I32_MAX, -12345.0, 777.0]);
    for op in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Not] {
        r.push(row(
            "unary i32",
            un(op),
            vec![inp(I32, &[7], ints.clone())],
            Tol::Exact,
        ));
    }
    r.push(row(
        "not u32",
        un(UnaryOp::Not),
        vec![inp(U32, &[3, 4], Gen::Int(0, U32_MAX as i64))],
        Tol::Exact,
    ));
    r.push(row(
        "not bool",
        un(UnaryOp::Not),
        vec![inp(Bool, &[2, 5], Gen::Int(0, 1))],
        Tol::Exact,
    ));

    // Binary f32.
    let bin = |op| OpKind::Binary(op);
    for (op, a, b, tol) in [
        (BinaryOp::Add, u(-5.0, 5.0), u(-5.0, 5.0), Tol::Exact),
        (BinaryOp::Sub, u(-5.0, 5.0), u(-5.0, 5.0), Tol::Exact),
        (BinaryOp::Mul, u(-5.0, 5.0), u(-5.0, 5.0), Tol::Exact),
        (BinaryOp::Div, u(-5.0, 5.0), u(-5.0, 5.0), Tol::Exact),
        (BinaryOp::Max, Gen::Ties, Gen::Ties, Tol::Exact),
        (BinaryOp::Min, Gen::Ties, Gen::Ties, Tol::Exact),
        (BinaryOp::Pow, u(0.1, 10.0), u(-3.0, 3.0), Tol::Ulps(1)),
    ] {
        r.push(row(
            "binary f32",
            bin(op),
            vec![f(&[3, 5, 7], a), f(&[3, 5, 7], b)],
            tol,
        ));
        r.push(row(
            "binary f32 special values",
            bin(op),
            vec![f(&[143], vals(SPECIAL)), f(&[143], vals(SPECIAL2))],
            tol,
        ));
        r.push(row(
            "binary f32 rank 0",
            bin(op),
            vec![f(&[], vals(&[1.5])), f(&[], vals(&[-0.25]))],
            tol,
        ));
    }
    // Binary integers: wrapping, truncating division, shifts modulo 32.
    let any_i32 = || Gen::Int(I32_MIN as i64, I32_MAX as i64);
    let divisors = vals(&[-7.0, -3.0, 3.0, 7.0, -1.0, 1.0, 2.0]);
    let dividends = vals(&[I32_MIN, -20.0, -7.0, -1.0, 0.0, 5.0, 22.0, I32_MAX, 13.0]);
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
    ] {
        r.push(row(
            "binary i32",
            bin(op),
            vec![inp(I32, &[4, 9], any_i32()), inp(I32, &[4, 9], any_i32())],
            Tol::Exact,
        ));
        r.push(row(
            "binary u32",
            bin(op),
            vec![
                inp(U32, &[4, 9], Gen::Int(0, U32_MAX as i64)),
                inp(U32, &[4, 9], Gen::Int(0, U32_MAX as i64)),
            ],
            Tol::Exact,
        ));
    }
    for op in [BinaryOp::Div, BinaryOp::Rem] {
        r.push(row(
            "div/rem i32",
            bin(op),
            vec![
                inp(I32, &[63], dividends.clone()),
                inp(I32, &[63], divisors.clone()),
            ],
            Tol::Exact,
        ));
        r.push(row(
            "div/rem u32",
            bin(op),
            vec![
                inp(U32, &[5, 8], Gen::Int(0, U32_MAX as i64)),
                inp(U32, &[5, 8], Gen::Int(1, 1000)),
            ],
            Tol::Exact,
        ));
    }
    for op in [BinaryOp::Shl, BinaryOp::Shr] {
        r.push(row(
            "shift i32",
            bin(op),
            vec![
                inp(I32, &[6, 7], any_i32()),
                inp(I32, &[6, 7], Gen::Int(-40, 40)),
            ],
            Tol::Exact,
        ));
        r.push(row(
            "shift u32",
            bin(op),
            vec![
                inp(U32, &[6, 7], Gen::Int(0, U32_MAX as i64)),
                inp(U32, &[6, 7], Gen::Int(0, 70)),
            ],
            Tol::Exact,
        ));
    }
    for op in [BinaryOp::And, BinaryOp::Or, BinaryOp::Xor] {
        r.push(row(
            "logic bool",
            bin(op),
            vec![
                inp(Bool, &[4, 4], Gen::Int(0, 1)),
                inp(Bool, &[4, 4], Gen::Int(0, 1)),
            ],
            Tol::Exact,
        ));
    }

    // Comparison and selection.
    for op in [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ] {
        let c = OpKind::Compare(op);
        r.push(row(
            "compare f32",
            c.clone(),
            vec![f(&[143], vals(SPECIAL)), f(&[143], vals(SPECIAL2))],
            Tol::Exact,
        ));
        r.push(row(
            "compare i32",
            c.clone(),
            vec![
                inp(I32, &[5, 6], Gen::Int(-3, 3)),
                inp(I32, &[5, 6], Gen::Int(-3, 3)),
            ],
            Tol::Exact,
        ));
        r.push(row(
            "compare u32",
            c.clone(),
            vec![
                inp(U32, &[30], Gen::Int(0, 3)),
                inp(U32, &[30], Gen::Int(0, 3)),
            ],
            Tol::Exact,
        ));
        r.push(row(
            "compare bool",
            c,
            vec![
                inp(Bool, &[2, 2], vals(&[0.0, 0.0, 1.0, 1.0])),
                inp(Bool, &[2, 2], vals(&[0.0, 1.0, 0.0, 1.0])),
            ],
            Tol::Exact,
        ));
    }
    for dtype in [F32, I32, U32, F16, BF16, U8, Bool] {
        r.push(row(
            "select",
            OpKind::Select,
            vec![
                inp(Bool, &[3, 7], Gen::Int(0, 1)),
                inp(dtype, &[3, 7], Gen::Int(0, 1)),
                inp(dtype, &[3, 7], Gen::Int(0, 1)),
            ],
            Tol::Exact,
        ));
    }
    r.push(row(
        "select rank 0",
        OpKind::Select,
        vec![
            inp(Bool, &[], vals(&[1.0])),
            f(&[], vals(&[2.0])),
            f(&[], vals(&[3.0])),
        ],
        Tol::Exact,
    ));

    // Casts.
    let casts_from_f32 = vals(&[
        0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 2.7, -2.7, INF, -INF, NAN, 1e10, -1e10, 65519.0, 65520.0,
        1e-8, 300.0, -300.0, 255.9, 3.0e9, 1.0000001,
    ]);
    for to in [F16, BF16, I32, U32, U8, Bool, F32] {
        r.push(row(
            "cast from f32",
            OpKind::Cast { to },
            vec![f(&[21], casts_from_f32.clone())],
            Tol::Exact,
        ));
    }
    for to in [F32, BF16, I32, Bool] {
        r.push(row(
            "cast from f16",
            OpKind::Cast { to },
            vec![inp(F16, &[21], casts_from_f32.clone())],
            Tol::Exact,
        ));
        r.push(row(
            "cast from bf16",
            OpKind::Cast { to },
            vec![inp(BF16, &[21], casts_from_f32.clone())],
            Tol::Exact,
        ));
    }
    let big_ints = vals(&[
        I32_MIN,
        -16777217.0,
        -300.0,
        -1.0,
        0.0,
        1.0,
        255.0,
        256.0,
        16777217.0,
        33554435.0,
        I32_MAX,
    ]);
    for to in [F32, F16, BF16, U32, U8, Bool, I32] {
        r.push(row(
            "cast from i32",
            OpKind::Cast { to },
            vec![inp(I32, &[11], big_ints.clone())],
            Tol::Exact,
        ));
    }
    for to in [F32, I32, U8, Bool] {
        r.push(row(
            "cast from u32",
            OpKind::Cast { to },
            vec![inp(U32, &[4, 5], Gen::Int(0, U32_MAX as i64))],
            Tol::Exact,
        ));
        r.push(row(
            "cast from u8",
            OpKind::Cast { to },
            vec![inp(U8, &[4, 5], Gen::Int(0, 255))],
            Tol::Exact,
        ));
        r.push(row(
            "cast from bool",
            OpKind::Cast { to },
            vec![inp(Bool, &[4, 5], Gen::Int(0, 1))],
            Tol::Exact,
        ));
    }

    // Movement.
    let any = || u(-100.0, 100.0);
    // A collective over a group of one: the identity, special values included.
    r.push(row(
        "all_reduce_sum over one rank",
        OpKind::AllReduceSum { ranks: 1 },
        vec![f(&[13], vals(SPECIAL))],
        Tol::Exact,
    ));
    r.push(row(
        "broadcast_from over one rank",
        OpKind::BroadcastFrom { root: 0, ranks: 1 },
        vec![f(&[13], vals(SPECIAL))],
        Tol::Exact,
    ));
    r.push(row(
        "broadcast_from over one rank, i32",
        OpKind::BroadcastFrom { root: 0, ranks: 1 },
        vec![inp(I32, &[3, 5], Gen::Int(-1000, 1000))],
        Tol::Exact,
    ));
    r.push(row(
        "reshape",
        OpKind::Reshape {
            shape: Shape::new([6, 4]),
        },
        vec![f(&[2, 3, 4], any())],
        Tol::Exact,
    ));
    r.push(row(
        "reshape to rank 0",
        OpKind::Reshape {
            shape: Shape::scalar(),
        },
        vec![inp(I32, &[1, 1], any())],
        Tol::Exact,
    ));
    r.push(row(
        "reshape empty",
        OpKind::Reshape {
            shape: Shape::new([3, 0]),
        },
        vec![f(&[0, 2], any())],
        Tol::Exact,
    ));
    for (from, to) in [
        (vec![], vec![2, 3]),
        (vec![3, 1], vec![2, 3, 4]),
        (vec![1, 4], vec![3, 4]),
        (vec![4], vec![2, 1, 4]),
        (vec![2, 1, 3], vec![2, 5, 3]),
        (vec![1], vec![0, 4]),
    ] {
        r.push(row(
            "broadcast",
            OpKind::Broadcast {
                shape: Shape::new(to),
            },
            vec![f(&from, any())],
            Tol::Exact,
        ));
    }
    r.push(row(
        "broadcast f16",
        OpKind::Broadcast {
            shape: Shape::new([3, 2]),
        },
        vec![inp(F16, &[1, 2], any())],
        Tol::Exact,
    ));
    for (dims, perm) in [
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![2, 3, 4], vec![0, 2, 1]),
        (vec![5], vec![0]),
        (vec![1, 3, 1, 2], vec![3, 1, 0, 2]),
        (vec![3, 0], vec![1, 0]),
        (vec![], vec![]),
    ] {
        r.push(row(
            "transpose",
            OpKind::Transpose { perm },
            vec![inp(I32, &dims, Gen::Int(-9, 9))],
            Tol::Exact,
        ));
    }
    for (dims, starts, ends) in [
        (vec![5, 6], vec![1, 2], vec![4, 6]),
        (vec![5, 6], vec![2, 3], vec![2, 5]),
        (vec![3, 4, 5], vec![0, 1, 4], vec![3, 3, 5]),
        (vec![], vec![], vec![]),
    ] {
        r.push(row(
            "slice",
            OpKind::Slice { starts, ends },
            vec![f(&dims, any())],
            Tol::Exact,
        ));
    }
    r.push(row(
        "concat axis 1",
        OpKind::Concat { axis: 1 },
        vec![
            f(&[2, 3, 2], any()),
            f(&[2, 0, 2], any()),
            f(&[2, 1, 2], any()),
        ],
        Tol::Exact,
    ));
    r.push(row(
        "concat axis 0 bf16",
        OpKind::Concat { axis: 0 },
        vec![inp(BF16, &[1, 3], any()), inp(BF16, &[2, 3], any())],
        Tol::Exact,
    ));
    r.push(row(
        "concat one input",
        OpKind::Concat { axis: 0 },
        vec![inp(Bool, &[3], Gen::Int(0, 1))],
        Tol::Exact,
    ));

    // Indexing.
    r.push(row(
        "gather rows",
        OpKind::Gather { axis: 0 },
        vec![f(&[6, 5], any()), inp(I32, &[4], Gen::Int(0, 5))],
        Tol::Exact,
    ));
    r.push(row(
        "gather axis 1, 2-d index",
        OpKind::Gather { axis: 1 },
        vec![f(&[2, 6, 3], any()), inp(U32, &[2, 3], Gen::Int(0, 5))],
        Tol::Exact,
    ));
    r.push(row(
        "gather rank-0 index",
        OpKind::Gather { axis: 0 },
        vec![inp(F16, &[7, 4], any()), inp(I32, &[], vals(&[6.0]))],
        Tol::Exact,
    ));
    r.push(row(
        "gather empty index",
        OpKind::Gather { axis: 0 },
        vec![f(&[3, 2], any()), inp(I32, &[0], vals(&[0.0]))],
        Tol::Exact,
    ));
    r.push(row(
        "take_along",
        OpKind::TakeAlong { axis: 1 },
        vec![f(&[3, 5, 2], any()), inp(I32, &[3, 4, 2], Gen::Int(0, 4))],
        Tol::Exact,
    ));
    r.push(row(
        "take_along axis 0",
        OpKind::TakeAlong { axis: 0 },
        vec![
            inp(I32, &[4, 3], Gen::Int(-9, 9)),
            inp(U32, &[2, 3], Gen::Int(0, 3)),
        ],
        Tol::Exact,
    ));
    let idx = |v: f64| inp(I32, &[], vals(&[v]));
    r.push(row(
        "dynamic_slice",
        OpKind::DynamicSlice { sizes: vec![2, 3] },
        vec![f(&[5, 6], any()), idx(3.0), idx(0.0)],
        Tol::Exact,
    ));
    r.push(row(
        "dynamic_slice full",
        OpKind::DynamicSlice { sizes: vec![5, 6] },
        vec![f(&[5, 6], any()), idx(0.0), idx(0.0)],
        Tol::Exact,
    ));
    r.push(row(
        "dynamic_slice empty at end",
        OpKind::DynamicSlice { sizes: vec![0, 2] },
        vec![f(&[5, 6], any()), idx(5.0), inp(U32, &[], vals(&[4.0]))],
        Tol::Exact,
    ));
    r.push(row(
        "dynamic_update_slice",
        OpKind::DynamicUpdateSlice,
        vec![
            f(&[1, 3, 8, 4], any()),
            f(&[1, 3, 1, 4], any()),
            idx(0.0),
            idx(0.0),
            idx(7.0),
            idx(0.0),
        ],
        Tol::Exact,
    ));
    r.push(row(
        "dynamic_update_slice i32 middle",
        OpKind::DynamicUpdateSlice,
        vec![
            inp(I32, &[5, 6], any()),
            inp(I32, &[2, 3], any()),
            idx(1.0),
            idx(2.0),
        ],
        Tol::Exact,
    ));
    r.push(row(
        "dynamic_update_slice empty",
        OpKind::DynamicUpdateSlice,
        vec![f(&[5, 6], any()), f(&[0, 3], any()), idx(5.0), idx(3.0)],
        Tol::Exact,
    ));
    r.push(row(
        "scatter axis 0 with repeats",
        OpKind::ScatterUpdate { axis: 0 },
        vec![
            f(&[6, 3], any()),
            inp(I32, &[4], vals(&[5.0, 1.0, 5.0, 0.0])),
            f(&[4, 3], any()),
        ],
        Tol::Exact,
    ));
    r.push(row(
        "scatter axis 1",
        OpKind::ScatterUpdate { axis: 1 },
        vec![
            inp(F16, &[2, 5, 3], any()),
            inp(U32, &[2], vals(&[4.0, 0.0])),
            inp(F16, &[2, 2, 3], any()),
        ],
        Tol::Exact,
    ));
    r.push(row(
        "scatter nothing",
        OpKind::ScatterUpdate { axis: 0 },
        vec![
            f(&[3, 2], any()),
            inp(I32, &[0], vals(&[0.0])),
            f(&[0, 2], any()),
        ],
        Tol::Exact,
    ));

    // Reductions.
    for axis in 0..3 {
        r.push(row(
            "reduce_sum f32",
            OpKind::Reduce {
                op: ReduceOp::Sum,
                axis,
            },
            vec![f(&[3, 5, 17], u(-1.0, 1.0))],
            Tol::Bound,
        ));
        for op in [ReduceOp::Max, ReduceOp::Min] {
            r.push(row(
                "reduce max/min f32",
                OpKind::Reduce { op, axis },
                vec![f(&[3, 5, 7], u(-10.0, 10.0))],
                Tol::Exact,
            ));
            r.push(row(
                "reduce max/min i32",
                OpKind::Reduce { op, axis },
                vec![inp(I32, &[3, 5, 7], any_i32())],
                Tol::Exact,
            ));
            r.push(row(
                "reduce max/min u32",
                OpKind::Reduce { op, axis },
                vec![inp(U32, &[3, 5, 7], Gen::Int(0, U32_MAX as i64))],
                Tol::Exact,
            ));
        }
        r.push(row(
            "reduce_sum i32 wraps",
            OpKind::Reduce {
                op: ReduceOp::Sum,
                axis,
            },
            vec![inp(I32, &[3, 5, 7], any_i32())],
            Tol::Exact,
        ));
        r.push(row(
            "reduce_sum u32 wraps",
            OpKind::Reduce {
                op: ReduceOp::Sum,
                axis,
            },
            vec![inp(U32, &[3, 5, 7], Gen::Int(0, U32_MAX as i64))],
            Tol::Exact,
        ));
    }
    let sum = |axis| OpKind::Reduce {
        op: ReduceOp::Sum,
        axis,
    };
    r.push(row(
        "reduce_sum long row",
        sum(1),
        vec![f(&[2, 4099], u(-1.0, 1.0))],
        Tol::Bound,
    ));
    r.push(row(
        "reduce_sum positive long row",
        sum(0),
        vec![f(&[10007], u(0.0, 1.0))],
        Tol::Bound,
    ));
    r.push(row(
        "reduce_sum size-1 axis",
        sum(1),
        vec![f(&[4, 1, 3], any())],
        Tol::Bound,
    ));
    r.push(row(
        "reduce_sum empty axis",
        sum(0),
        vec![f(&[0, 3], any())],
        Tol::Bound,
    ));
    r.push(row(
        "reduce_max empty axis",
        OpKind::Reduce {
            op: ReduceOp::Max,
            axis: 1,
        },
        vec![f(&[2, 0], any())],
        Tol::Exact,
    ));
    r.push(row(
        "reduce_min empty axis i32",
        OpKind::Reduce {
            op: ReduceOp::Min,
            axis: 1,
        },
        vec![inp(I32, &[2, 0], any())],
        Tol::Exact,
    ));
    r.push(row(
        "reduce_max with NaN and zeros",
        OpKind::Reduce {
            op: ReduceOp::Max,
            axis: 1,
        },
        vec![f(
            &[3, 4],
            vals(&[
                1.0, NAN, 3.0, 2.0, -0.0, 0.0, -0.0, -1.0, -INF, -INF, -INF, -INF,
            ]),
        )],
        Tol::Exact,
    ));
    r.push(row(
        "reduce_min with NaN and zeros",
        OpKind::Reduce {
            op: ReduceOp::Min,
            axis: 1,
        },
        vec![f(
            &[3, 4],
            vals(&[1.0, NAN, 3.0, 2.0, 0.0, -0.0, 0.0, 1.0, INF, INF, INF, INF]),
        )],
        Tol::Exact,
    ));
    for axis in 0..2 {
        r.push(row(
            "argmax ties",
            OpKind::ArgMax { axis },
            vec![f(&[6, 7], Gen::Ties)],
            Tol::Exact,
        ));
        r.push(row(
            "argmax i32",
            OpKind::ArgMax { axis },
            vec![inp(I32, &[6, 7], Gen::Int(-3, 3))],
            Tol::Exact,
        ));
        r.push(row(
            "argmax u32",
            OpKind::ArgMax { axis },
            vec![inp(U32, &[6, 7], Gen::Int(0, 3))],
            Tol::Exact,
        ));
    }
    r.push(row(
        "argmax NaN first wins",
        OpKind::ArgMax { axis: 1 },
        vec![f(
            &[3, 4],
            vals(&[
                1.0, NAN, 3.0, NAN, -INF, -INF, -INF, -INF, 0.0, -0.0, 0.0, -0.0,
            ]),
        )],
        Tol::Exact,
    ));
    r.push(row(
        "argmax size-1 axis",
        OpKind::ArgMax { axis: 0 },
        vec![f(&[1, 5], any())],
        Tol::Exact,
    ));
    r.push(row(
        "argmax empty outer",
        OpKind::ArgMax { axis: 1 },
        vec![f(&[0, 5], any())],
        Tol::Exact,
    ));
    for k in [1, 3, 7] {
        r.push(row(
            "top_k ties",
            OpKind::ArgTopK { k },
            vec![f(&[5, 7], Gen::Ties)],
            Tol::Exact,
        ));
        r.push(row(
            "top_k i32",
            OpKind::ArgTopK { k },
            vec![inp(I32, &[2, 3, 7], Gen::Int(-3, 3))],
            Tol::Exact,
        ));
        r.push(row(
            "top_k u32",
            OpKind::ArgTopK { k },
            vec![inp(U32, &[4, 7], Gen::Int(0, 3))],
            Tol::Exact,
        ));
    }
    r.push(row(
        "top_k k = n with NaN",
        OpKind::ArgTopK { k: 6 },
        vec![f(
            &[2, 6],
            vals(&[
                1.0, NAN, -INF, INF, NAN, 0.0, -0.0, 0.0, 2.0, 2.0, -1.0, -0.0,
            ]),
        )],
        Tol::Exact,
    ));
    r.push(row(
        "top_k rank 1",
        OpKind::ArgTopK { k: 4 },
        vec![f(&[1000], u(-1.0, 1.0))],
        Tol::Exact,
    ));
    r.push(row(
        "top_k empty outer",
        OpKind::ArgTopK { k: 2 },
        vec![f(&[0, 3], any())],
        Tol::Exact,
    ));

    // Contractions.
    let mm = |t| OpKind::MatMul { transpose_rhs: t };
    let w = || u(-1.0, 1.0);
    r.push(row(
        "matmul",
        mm(false),
        vec![f(&[3, 5], w()), f(&[5, 4], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul rhs^T",
        mm(true),
        vec![f(&[3, 5], w()), f(&[4, 5], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul batched",
        mm(false),
        vec![f(&[2, 3, 5], w()), f(&[2, 5, 4], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul batched rhs^T",
        mm(true),
        vec![f(&[2, 2, 3, 9], w()), f(&[2, 2, 4, 9], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul shared rhs",
        mm(false),
        vec![f(&[2, 3, 5], w()), f(&[5, 4], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul shared rhs^T",
        mm(true),
        vec![f(&[2, 3, 5], w()), f(&[4, 5], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul 1x1",
        mm(true),
        vec![f(&[1, 1], w()), f(&[1, 1], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul K = 0",
        mm(false),
        vec![f(&[3, 0], w()), f(&[0, 2], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul M = 0",
        mm(true),
        vec![f(&[0, 4], w()), f(&[3, 4], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul rhs^T wide (quads and tails)",
        mm(true),
        vec![f(&[7, 301], w()), f(&[260, 301], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul wide",
        mm(false),
        vec![f(&[6, 130], w()), f(&[130, 301], w())],
        Tol::Bound,
    ));
    r.push(row(
        "matmul long K",
        mm(true),
        vec![f(&[2, 5000], u(0.0, 1.0)), f(&[3, 5000], u(0.0, 1.0))],
        Tol::Bound,
    ));
    for dtype in [F16, BF16] {
        r.push(row(
            "matmul stored rhs^T",
            mm(true),
            vec![f(&[5, 70], w()), inp(dtype, &[9, 70], w())],
            Tol::Bound,
        ));
        r.push(row(
            "matmul stored rhs",
            mm(false),
            vec![f(&[2, 5, 70], w()), inp(dtype, &[70, 9], w())],
            Tol::Bound,
        ));
        r.push(row(
            "matmul stored batched rhs^T",
            mm(true),
            vec![f(&[2, 5, 33], w()), inp(dtype, &[2, 9, 33], w())],
            Tol::Bound,
        ));
    }
    let im = OpKind::IndexedMatMul;
    r.push(row(
        "indexed_matmul",
        im.clone(),
        vec![
            f(&[6, 40], w()),
            f(&[3, 5, 40], w()),
            inp(I32, &[6], vals(&[2.0, 0.0, 2.0, 1.0, 2.0, 0.0])),
        ],
        Tol::Bound,
    ));
    r.push(row(
        "indexed_matmul one expert",
        im.clone(),
        vec![
            f(&[9, 17], w()),
            inp(F16, &[4, 3, 17], w()),
            inp(U32, &[9], vals(&[3.0])),
        ],
        Tol::Bound,
    ));
    r.push(row(
        "indexed_matmul bf16",
        im.clone(),
        vec![
            f(&[4, 64], w()),
            inp(BF16, &[2, 7, 64], w()),
            inp(I32, &[4], Gen::Int(0, 1)),
        ],
        Tol::Bound,
    ));
    r.push(row(
        "indexed_matmul no rows",
        im,
        vec![
            f(&[0, 8], w()),
            f(&[2, 3, 8], w()),
            inp(I32, &[0], vals(&[0.0])),
        ],
        Tol::Bound,
    ));
    r
}

/// Rows that read packed (ggml block) weights; they need `poot-formats`' decodes.
fn packed_rows() -> Vec<Row> {
    let w = || u(-1.0, 1.0);
    let mut r = Vec::new();
    for format in [GgmlType::Q8_0, GgmlType::Q4_0] {
        let p = |dims: &[usize]| inp(DType::Packed(format), dims, Gen::Ties);
        r.push(row(
            "gather packed rows",
            OpKind::Gather { axis: 0 },
            vec![
                p(&[7, 64]),
                inp(I32, &[5], vals(&[6.0, 0.0, 3.0, 3.0, 1.0])),
            ],
            Tol::Exact,
        ));
        r.push(row(
            "gather packed 2-d index",
            OpKind::Gather { axis: 0 },
            vec![p(&[4, 32]), inp(U32, &[2, 2], Gen::Int(0, 3))],
            Tol::Exact,
        ));
        r.push(row(
            "matmul packed rhs^T",
            OpKind::MatMul {
                transpose_rhs: true,
            },
            vec![inp(F32, &[5, 96], w()), p(&[11, 96])],
            Tol::Bound,
        ));
        r.push(row(
            "matmul packed rhs^T batched lhs",
            OpKind::MatMul {
                transpose_rhs: true,
            },
            vec![inp(F32, &[2, 3, 64], w()), p(&[6, 64])],
            Tol::Bound,
        ));
        r.push(row(
            "indexed_matmul packed",
            OpKind::IndexedMatMul,
            vec![
                inp(F32, &[5, 64], w()),
                p(&[3, 4, 64]),
                inp(I32, &[5], vals(&[1.0, 2.0, 1.0, 0.0, 1.0])),
            ],
            Tol::Bound,
        ));
    }
    r
}

fn run(rows: Vec<Row>) -> usize {
    let n = rows.len();
    for (i, row) in rows.into_iter().enumerate() {
        common::check_op(row.name, &row.op, &row.inputs, row.tol, 1000 + i as u64);
    }
    n
}

#[test]
fn every_primitive_matches_the_naive_reference() {
    let n = run(rows());
    eprintln!("{n} reference rows passed");
}

#[test]
fn packed_weights_match_the_naive_reference() {
    let n = run(packed_rows());
    eprintln!("{n} packed reference rows passed");
}

/// Every `OpKind` appears in the table (the reference's own match is exhaustive, so a new op
/// needs a reference; this checks it also gets a row).
#[test]
fn the_table_covers_every_op() {
    let names: std::collections::BTreeSet<&str> = rows().iter().map(|r| r.op.name()).collect();
    for op in [
        "literal",
        "iota",
        "neg",
        "abs",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "recip",
        "tanh",
        "erf",
        "floor",
        "ceil",
        "sin",
        "cos",
        "not",
        "add",
        "sub",
        "mul",
        "div",
        "rem",
        "max",
        "min",
        "pow",
        "and",
        "or",
        "xor",
        "shl",
        "shr",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "select",
        "cast",
        "reshape",
        "broadcast",
        "transpose",
        "slice",
        "concat",
        "gather",
        "take_along",
        "dynamic_slice",
        "dynamic_update_slice",
        "scatter_update",
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "argmax",
        "arg_top_k",
        "matmul",
        "indexed_matmul",
    ] {
        assert!(names.contains(op), "no reference row for {op}");
    }
}
