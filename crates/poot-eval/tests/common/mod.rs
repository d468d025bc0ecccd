//! Shared test support: deterministic data, the naive reference, and the runner that evaluates
//! one op with `poot-eval` and compares it with the reference at a stated tolerance.
#![allow(dead_code)]

pub mod naive;

use half::{bf16, f16};
use naive::{Ref, numel, ravel, unravel};
use poot_eval::{EvalOptions, HostTensor, Inputs, TensorData, eval};
use poot_graph_ir::{
    Builder, DType, GgmlType, Graph, OpKind, Outputs, Scalar, TensorType, TraceLimits,
};

/// SplitMix64: deterministic test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// An integer in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

/// How an input's values are drawn.
#[derive(Clone, Debug)]
pub enum Gen {
    Uniform(f64, f64),
    /// Integers in `[lo, hi]`.
    Int(i64, i64),
    /// Values cycled from a list.
    Values(Vec<f64>),
    /// A few small values, so ties are common.
    Ties,
}

#[derive(Clone, Debug)]
pub struct In {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub values: Gen,
}

pub fn inp(dtype: DType, dims: &[usize], values: Gen) -> In {
    In {
        dtype,
        dims: dims.to_vec(),
        values,
    }
}

/// How closely the evaluator must match the reference.
#[derive(Clone, Copy, Debug)]
pub enum Tol {
    /// Equal after rounding the reference to the output type, NaN matching NaN and the sign of
    /// zero included.
    Exact,
    /// Within this many f32 ulps of the reference rounded to f32.
    Ulps(u32),
    /// Within the per-element bound the reference derives for an accumulation (f32 or f64).
    Bound,
}

/// Draws values for `spec` and stores them as its dtype; the reference sees the stored values.
pub fn materialize(spec: &In, rng: &mut Rng) -> (HostTensor<'static>, Ref) {
    let n = numel(&spec.dims);
    let raw: Vec<f64> = (0..n)
        .map(|i| match &spec.values {
            Gen::Uniform(lo, hi) => rng.uniform(*lo, *hi),
            Gen::Int(lo, hi) => rng.int(*lo, *hi) as f64,
            Gen::Values(v) => v[i % v.len()],
            Gen::Ties => [-1.0, 0.0, 1.0, 2.0][rng.int(0, 3) as usize],
        })
        .collect();
    let dims = spec.dims.clone();
    match spec.dtype {
        DType::F32 => {
            let v: Vec<f32> = raw.iter().map(|&x| x as f32).collect();
            let r = v.iter().map(|&x| f64::from(x)).collect();
            (HostTensor::f32(dims.clone(), v).unwrap(), Ref::new(dims, r))
        }
        DType::F16 => {
            let v: Vec<f16> = raw.iter().map(|&x| f16::from_f64(x)).collect();
            let r = v.iter().map(|x| x.to_f64()).collect();
            (HostTensor::f16(dims.clone(), v).unwrap(), Ref::new(dims, r))
        }
        DType::BF16 => {
            let v: Vec<bf16> = raw.iter().map(|&x| bf16::from_f64(x)).collect();
            let r = v.iter().map(|x| x.to_f64()).collect();
            (
                HostTensor::bf16(dims.clone(), v).unwrap(),
                Ref::new(dims, r),
            )
        }
        DType::I32 => {
            let v: Vec<i32> = raw.iter().map(|&x| x as i64 as i32).collect();
            let r = v.iter().map(|&x| f64::from(x)).collect();
            (HostTensor::i32(dims.clone(), v).unwrap(), Ref::new(dims, r))
        }
        DType::U32 => {
            let v: Vec<u32> = raw.iter().map(|&x| x as i64 as u32).collect();
            let r = v.iter().map(|&x| f64::from(x)).collect();
            (HostTensor::u32(dims.clone(), v).unwrap(), Ref::new(dims, r))
        }
        DType::U8 => {
            let v: Vec<u8> = raw.iter().map(|&x| x as i64 as u8).collect();
            let r = v.iter().map(|&x| f64::from(x)).collect();
            (HostTensor::u8(dims.clone(), v).unwrap(), Ref::new(dims, r))
        }
        DType::Bool => {
            let v: Vec<bool> = raw.iter().map(|&x| x != 0.0).collect();
            let r = v.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect();
            (
                HostTensor::bool(dims.clone(), v).unwrap(),
                Ref::new(dims, r),
            )
        }
        DType::Packed(format) => packed(format, &dims, rng),
        // Checked against poot-formats' decode in tests/components.rs instead.
        DType::Components(_) => panic!("the reference table has no component-format rows"),
    }
}

/// Random ggml blocks of a format simple enough to encode here, independently of any decoder:
/// Q8_0 (f16 scale, 32 signed bytes; value = d * q) and Q4_0 (f16 scale, 16 bytes of nibbles,
/// low nibbles are elements 0..16 and high nibbles 16..32; value = d * (q - 8)).
pub fn packed(format: GgmlType, dims: &[usize], rng: &mut Rng) -> (HostTensor<'static>, Ref) {
    let n = numel(dims);
    assert_eq!(n % 32, 0);
    let (mut bytes, mut vals) = (Vec::new(), Vec::new());
    for _ in 0..n / 32 {
        let d = f16::from_f64(rng.uniform(0.001, 0.05));
        bytes.extend_from_slice(&d.to_bits().to_le_bytes());
        match format {
            GgmlType::Q8_0 => {
                for _ in 0..32 {
                    let q = rng.int(-127, 127);
                    bytes.push(q as i8 as u8);
                    vals.push(d.to_f64() * q as f64);
                }
            }
            GgmlType::Q4_0 => {
                let q: Vec<i64> = (0..32).map(|_| rng.int(0, 15)).collect();
                for j in 0..16 {
                    bytes.push((q[j] | (q[j + 16] << 4)) as u8);
                }
                vals.extend(q.iter().map(|&x| d.to_f64() * (x - 8) as f64));
            }
            other => panic!("no test encoder for {other:?}"),
        }
    }
    (
        HostTensor::packed(format, dims, bytes).unwrap(),
        Ref::new(dims.to_vec(), vals),
    )
}

/// The elements of any host tensor as f64 (packed tensors are not outputs here).
pub fn values(t: &HostTensor<'_>) -> Vec<f64> {
    match t.data() {
        TensorData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        TensorData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::U32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect(),
        TensorData::Packed(_) | TensorData::Components(_) => panic!("packed output"),
    }
}

/// The reference rounded to the output's stored type.
fn stored(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let bits = x.to_bits() as i64;
        if bits < 0x8000_0000 {
            bits
        } else {
            0x8000_0000 - bits
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Compares one output with the reference; `Err` describes the first mismatch.
pub fn compare(got: &HostTensor<'_>, want: &Ref, tol: Tol, f64_mode: bool) -> Result<(), String> {
    if got.dims() != want.dims.as_slice() {
        return Err(format!("shape {:?}, reference {:?}", got.dims(), want.dims));
    }
    let g = values(got);
    let dtype = got.dtype();
    for (i, (&x, &w)) in g.iter().zip(&want.v).enumerate() {
        let ws = stored(w, dtype);
        let at = || {
            format!(
                "element {i} {:?}: got {x:e}, reference {w:e}",
                unravel(i, &want.dims)
            )
        };
        if ws.is_finite() && !x.is_finite() {
            return Err(format!(
                "non-finite where the reference is finite: {}",
                at()
            ));
        }
        if ws.is_nan() != x.is_nan() {
            return Err(format!("NaN mismatch: {}", at()));
        }
        if ws.is_nan() {
            continue;
        }
        let ok = match tol {
            Tol::Exact => x == ws && (x != 0.0 || x.is_sign_negative() == ws.is_sign_negative()),
            Tol::Ulps(n) => x == ws || ulps(x as f32, ws as f32) <= u64::from(n),
            Tol::Bound => {
                let bounds = if f64_mode {
                    want.bound_f64.as_ref()
                } else {
                    want.bound.as_ref()
                };
                let b = bounds.expect("a Bound tolerance needs a reference that derives one")[i];
                x == ws || (x - w).abs() <= b
            }
        };
        if !ok {
            return Err(format!("{tol:?} (f64 accumulation: {f64_mode}): {}", at()));
        }
    }
    Ok(())
}

/// A one-equation graph over constants `x0`, `x1`, ... of the given types.
pub fn one_op_graph(op: &OpKind, tys: &[TensorType]) -> Graph {
    let b = Builder::new(TraceLimits::standard(1));
    let ins: Vec<_> = tys
        .iter()
        .enumerate()
        .map(|(i, t)| b.constant(&format!("x{i}"), t.clone()).unwrap())
        .collect();
    let out = b.eqn(op.clone(), &ins).unwrap();
    b.finish(Outputs::new(out)).unwrap()
}

/// Evaluates `op` on `specs` (drawn with `seed`) in both accumulation modes and compares each
/// with the reference.
pub fn check_op(name: &str, op: &OpKind, specs: &[In], tol: Tol, seed: u64) {
    let mut rng = Rng(seed);
    let drawn: Vec<(HostTensor<'static>, Ref)> =
        specs.iter().map(|s| materialize(s, &mut rng)).collect();
    check_drawn(name, op, &drawn, tol);
}

pub fn check_drawn(name: &str, op: &OpKind, drawn: &[(HostTensor<'static>, Ref)], tol: Tol) {
    let tys: Vec<TensorType> = drawn.iter().map(|(t, _)| t.ty().clone()).collect();
    let graph = one_op_graph(op, &tys);
    let mut inputs = Inputs::new();
    for (i, (t, _)) in drawn.iter().enumerate() {
        inputs.set_const(format!("x{i}"), t.clone());
    }
    let refs: Vec<(DType, Ref)> = drawn.iter().map(|(t, r)| (t.dtype(), r.clone())).collect();
    let want = reference(op, &refs);
    for f64_mode in [false, true] {
        let ev = eval(
            &graph,
            &inputs,
            EvalOptions {
                accumulate_f64: f64_mode,
                keep_env: false,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: eval failed: {e}"));
        if let Err(msg) = compare(&ev.outputs[0], &want, tol, f64_mode) {
            panic!("{name} ({op:?}): {msg}");
        }
    }
}

/// The reference meaning of `op` on inputs of the given types and values. Exhaustive over
/// `OpKind`: a new primitive does not compile here until it has a reference.
pub fn reference(op: &OpKind, ins: &[(DType, Ref)]) -> Ref {
    let x = |i: usize| &ins[i].1;
    let dt = |i: usize| ins[i].0;
    let scalar = |i: usize| ins[i].1.v[0] as usize;
    match op {
        OpKind::Literal(s) => Ref::new(
            vec![],
            vec![match *s {
                Scalar::F32(v) => f64::from(v),
                Scalar::I32(v) => f64::from(v),
                Scalar::U32(v) => f64::from(v),
                Scalar::Bool(v) => f64::from(u8::from(v)),
            }],
        ),
        OpKind::Iota { shape, axis, .. } => {
            let dims = shape.dims().to_vec();
            let v = (0..numel(&dims))
                .map(|f| unravel(f, &dims)[*axis] as f64)
                .collect();
            Ref::new(dims, v)
        }
        OpKind::Unary(u) => naive::unary(*u, dt(0), x(0)),
        OpKind::Binary(b) => naive::binary(*b, dt(0), x(0), x(1)),
        OpKind::Compare(c) => naive::compare(*c, x(0), x(1)),
        OpKind::Select => naive::select(x(0), x(1), x(2)),
        OpKind::Cast { to } => naive::cast(dt(0), *to, x(0)),
        OpKind::Reshape { shape } => Ref::new(shape.dims().to_vec(), x(0).v.clone()),
        OpKind::Broadcast { shape } => naive::broadcast(x(0), shape.dims()),
        OpKind::Transpose { perm } => naive::transpose(x(0), perm),
        OpKind::Slice { starts, ends } => {
            let sizes: Vec<usize> = starts.iter().zip(ends).map(|(s, e)| e - s).collect();
            naive::slice(x(0), starts, &sizes)
        }
        OpKind::Concat { axis } => naive::concat(
            &ins.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            *axis,
        ),
        OpKind::Gather { axis } => naive::gather(x(0), x(1), *axis),
        OpKind::TakeAlong { axis } => naive::take_along(x(0), x(1), *axis),
        OpKind::DynamicSlice { sizes } => {
            let starts: Vec<usize> = (1..ins.len()).map(scalar).collect();
            naive::slice(x(0), &starts, sizes)
        }
        OpKind::DynamicUpdateSlice => {
            let starts: Vec<usize> = (2..ins.len()).map(scalar).collect();
            naive::dynamic_update_slice(x(0), x(1), &starts)
        }
        OpKind::ScatterUpdate { axis } => naive::scatter(x(0), x(1), x(2), *axis),
        OpKind::Reduce { op, axis } => naive::reduce(*op, dt(0), x(0), *axis),
        OpKind::ArgMax { axis } => naive::argmax(x(0), *axis),
        OpKind::ArgTopK { k } => naive::top_k(x(0), *k),
        OpKind::MatMul { transpose_rhs } => naive::matmul(x(0), x(1), *transpose_rhs),
        OpKind::IndexedMatMul => naive::indexed_matmul(x(0), x(1), x(2)),
        // A group of one (the table's rows are single graphs; groups are tested in `group.rs`).
        OpKind::AllReduceSum { .. } | OpKind::BroadcastFrom { .. } => x(0).clone(),
    }
}

/// Flat position helper re-exported for tests that build indices by hand.
pub fn flat(idx: &[usize], dims: &[usize]) -> usize {
    ravel(idx, dims)
}
