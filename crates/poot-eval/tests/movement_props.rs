//! Property tests: movement and indexing ops over random shapes (rank 0 to 4, dims 0 to 3,
//! every dense dtype) match the naive reference bit for bit.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

mod common;

use common::{Gen, Rng, Tol, check_drawn, inp, materialize};
use poot_graph_ir::{DType, OpKind, Shape};
use proptest::prelude::*;

const DTYPES: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::U8,
    DType::Bool,
];

fn dims(min_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, min_rank..=4)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DTYPES.to_vec())
}

fn data(
    dtype: DType,
    dims: &[usize],
    rng: &mut Rng,
) -> (poot_eval::HostTensor<'static>, common::naive::Ref) {
    let g = match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Gen::Uniform(-100.0, 100.0),
        DType::Bool => Gen::Int(0, 1),
        DType::U8 => Gen::Int(0, 255),
        _ => Gen::Int(-1000, 1000),
    };
    materialize(&inp(dtype, dims, g), rng)
}

fn index(
    dims: &[usize],
    bound: usize,
    rng: &mut Rng,
    unsigned: bool,
) -> (poot_eval::HostTensor<'static>, common::naive::Ref) {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n.max(1))
        .map(|_| rng.int(0, bound.max(1) as i64 - 1) as f64)
        .collect();
    let dtype = if unsigned { DType::U32 } else { DType::I32 };
    materialize(&inp(dtype, dims, Gen::Values(v)), rng)
}

fn scalar(v: usize, rng: &mut Rng) -> (poot_eval::HostTensor<'static>, common::naive::Ref) {
    materialize(&inp(DType::I32, &[], Gen::Values(vec![v as f64])), rng)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn reshape(d in dims(0), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = data(dt, &d, &mut rng);
        let n: usize = d.iter().product();
        check_drawn("reshape flat", &OpKind::Reshape { shape: Shape::new([n]) }, std::slice::from_ref(&x), Tol::Exact);
        let rev: Vec<usize> = d.iter().rev().copied().collect();
        check_drawn("reshape reversed", &OpKind::Reshape { shape: Shape::new(rev) }, &[x], Tol::Exact);
    }

    #[test]
    fn transpose(d in dims(0), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let mut perm: Vec<usize> = (0..d.len()).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.int(0, i as i64) as usize);
        }
        let x = data(dt, &d, &mut rng);
        check_drawn("transpose", &OpKind::Transpose { perm }, &[x], Tol::Exact);
    }

    #[test]
    fn broadcast(d in dims(0), lead in prop::collection::vec(0usize..3, 0..=2), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        // Make some source dims 1 so they stretch.
        let from: Vec<usize> = d.iter().map(|&x| if rng.int(0, 2) == 0 { 1 } else { x }).collect();
        let mut to = lead.clone();
        to.extend(from.iter().map(|&x| if x == 1 { rng.int(0, 3) as usize } else { x }));
        let x = data(dt, &from, &mut rng);
        check_drawn("broadcast", &OpKind::Broadcast { shape: Shape::new(to) }, &[x], Tol::Exact);
    }

    #[test]
    fn slice(d in dims(0), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let starts: Vec<usize> = d.iter().map(|&x| rng.int(0, x as i64) as usize).collect();
        let ends: Vec<usize> = d.iter().zip(&starts).map(|(&x, &s)| rng.int(s as i64, x as i64) as usize).collect();
        let x = data(dt, &d, &mut rng);
        check_drawn("slice", &OpKind::Slice { starts, ends }, &[x], Tol::Exact);
    }

    #[test]
    fn concat(d in dims(1), parts in 1usize..4, dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axis = rng.int(0, d.len() as i64 - 1) as usize;
        let xs: Vec<_> = (0..parts).map(|_| {
            let mut di = d.clone();
            di[axis] = rng.int(0, 3) as usize;
            data(dt, &di, &mut rng)
        }).collect();
        check_drawn("concat", &OpKind::Concat { axis }, &xs, Tol::Exact);
    }

    #[test]
    fn gather(d in dims(1), idx_dims in dims(0), dt in dtype(), unsigned in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axis = rng.int(0, d.len() as i64 - 1) as usize;
        let mut idx_dims: Vec<usize> = idx_dims.into_iter().take(2).collect();
        if d[axis] == 0 && idx_dims.iter().product::<usize>() != 0 {
            idx_dims.push(0);
        }
        let x = data(dt, &d, &mut rng);
        let i = index(&idx_dims, d[axis], &mut rng, unsigned);
        check_drawn("gather", &OpKind::Gather { axis }, &[x, i], Tol::Exact);
    }

    #[test]
    fn take_along(d in dims(1), n in 0usize..4, dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axis = rng.int(0, d.len() as i64 - 1) as usize;
        let mut idx_dims = d.clone();
        idx_dims[axis] = if d[axis] == 0 { 0 } else { n };
        let x = data(dt, &d, &mut rng);
        let i = index(&idx_dims, d[axis], &mut rng, false);
        check_drawn("take_along", &OpKind::TakeAlong { axis }, &[x, i], Tol::Exact);
    }

    #[test]
    fn dynamic_slice(d in dims(0), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let sizes: Vec<usize> = d.iter().map(|&x| rng.int(0, x as i64) as usize).collect();
        let mut drawn = vec![data(dt, &d, &mut rng)];
        for (&x, &s) in d.iter().zip(&sizes) {
            let start = rng.int(0, (x - s) as i64) as usize;
            drawn.push(scalar(start, &mut rng));
        }
        check_drawn("dynamic_slice", &OpKind::DynamicSlice { sizes }, &drawn, Tol::Exact);
    }

    #[test]
    fn dynamic_update_slice(d in dims(0), dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let sizes: Vec<usize> = d.iter().map(|&x| rng.int(0, x as i64) as usize).collect();
        let mut drawn = vec![data(dt, &d, &mut rng), data(dt, &sizes, &mut rng)];
        for (&x, &s) in d.iter().zip(&sizes) {
            let start = rng.int(0, (x - s) as i64) as usize;
            drawn.push(scalar(start, &mut rng));
        }
        check_drawn("dynamic_update_slice", &OpKind::DynamicUpdateSlice, &drawn, Tol::Exact);
    }

    #[test]
    fn scatter_update(d in dims(1), n in 0usize..5, dt in dtype(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axis = rng.int(0, d.len() as i64 - 1) as usize;
        let n = if d[axis] == 0 { 0 } else { n };
        let mut upd_dims = d.clone();
        upd_dims[axis] = n;
        let x = data(dt, &d, &mut rng);
        let unsigned = rng.int(0, 1) == 1;
        let i = index(&[n], d[axis], &mut rng, unsigned);
        let u = data(dt, &upd_dims, &mut rng);
        check_drawn("scatter_update", &OpKind::ScatterUpdate { axis }, &[x, i, u], Tol::Exact);
    }
}
