//! The group oracle: graphs of a tensor-parallel group evaluated in lockstep, summing at each
//! all-reduce in rank order; and the refusals of a collective evaluated alone or by ranks that
//! do not meet.

#![allow(clippy::unwrap_used)]

use poot_eval::{EvalError, EvalOptions, Fault, HostTensor, Inputs, eval, eval_group};
use poot_graph_ir::{Builder, Graph, Outputs, TensorType, TraceLimits};

/// `y = all_reduce(x * w) + 1` over `ranks`, then `z = all_reduce(y)`: two meetings.
fn rank_graph(ranks: usize) -> Graph {
    let b = Builder::new(TraceLimits::standard(16));
    let x = b
        .constant("x", TensorType::new(poot_graph_ir::DType::F32, vec![4]))
        .unwrap();
    let w = b
        .constant("w", TensorType::new(poot_graph_ir::DType::F32, vec![4]))
        .unwrap();
    let p = b.mul(x, w).unwrap();
    let s = b.all_reduce_sum(p, ranks).unwrap();
    let one = b.broadcast(b.lit_f32(1.0).unwrap(), [4]).unwrap();
    let y = b.add(s, one).unwrap();
    let z = b.all_reduce_sum(y, ranks).unwrap();
    b.finish(Outputs::new(z).and(s)).unwrap()
}

fn inputs(x: &[f32], w: &[f32]) -> Inputs<'static> {
    Inputs::new()
        .with_const("x", HostTensor::f32([4], x.to_vec()).unwrap())
        .with_const("w", HostTensor::f32([4], w.to_vec()).unwrap())
}

#[test]
fn a_group_sums_each_all_reduce_in_rank_order() {
    let g = rank_graph(3);
    let xs = [
        [1.0f32, 2.0, 3.0, 1e8],
        [0.5, -2.0, 0.25, 1.0],
        [4.0, 0.0, -3.0, -1e8],
    ];
    let w = [2.0f32, 1.0, 1.0, 1.0];
    let ins: Vec<Inputs> = xs.iter().map(|x| inputs(x, &w)).collect();
    let outs = eval_group(&[&g, &g, &g], &ins, EvalOptions::default()).unwrap();
    // Rank order: ((x0 w + x1 w) + x2 w); the last column loses the 1.0 to rounding in f32
    // (1e8 + 1 = 1e8), then cancels to 0.
    let s = [2.0f32 + 1.0 + 8.0, 2.0 - 2.0 + 0.0, 3.0 + 0.25 - 3.0, 0.0];
    for o in &outs {
        assert_eq!(o.outputs[1].as_f32().unwrap(), &s);
        let z: Vec<f32> = s.iter().map(|v| 3.0 * (v + 1.0)).collect();
        assert_eq!(o.outputs[0].as_f32().unwrap(), z.as_slice());
    }
    // With f64 accumulation the 1.0 survives until the final rounding.
    let outs = eval_group(
        &[&g, &g, &g],
        &ins,
        EvalOptions {
            accumulate_f64: true,
            ..EvalOptions::default()
        },
    )
    .unwrap();
    assert_eq!(outs[2].outputs[1].as_f32().unwrap()[3], 1.0);
}

#[test]
fn a_group_of_one_is_the_plain_evaluation() {
    let g = rank_graph(1);
    let ins = [inputs(&[1.0, 2.0, 3.0, 4.0], &[0.5, 0.5, 2.0, -1.0])];
    let alone = eval(&g, &ins[0], EvalOptions::default()).unwrap();
    let group = eval_group(&[&g], &ins, EvalOptions::default()).unwrap();
    assert_eq!(alone.outputs, group[0].outputs);
    assert_eq!(alone.outputs[1].as_f32().unwrap(), &[0.5, 1.0, 6.0, -4.0]);
}

#[test]
fn a_rank_alone_is_refused() {
    let g = rank_graph(2);
    let e = eval(&g, &inputs(&[1.0; 4], &[1.0; 4]), EvalOptions::default()).unwrap_err();
    match e {
        EvalError::Fault { op, fault, .. } => {
            assert_eq!(op, "all_reduce_sum");
            assert_eq!(
                *fault,
                Fault::Collective {
                    op: "all_reduce_sum",
                    ranks: 2
                }
            );
        }
        e => panic!("unexpected: {e}"),
    }
}

#[test]
fn ranks_that_do_not_meet_are_refused() {
    let ins = [inputs(&[1.0; 4], &[1.0; 4]), inputs(&[1.0; 4], &[1.0; 4])];
    // A graph for a group of three run by two ranks.
    let three = rank_graph(3);
    let e = eval_group(&[&three, &three], &ins, EvalOptions::default()).unwrap_err();
    assert!(matches!(e, EvalError::GroupDiverged { rank: 0, .. }), "{e}");
    // One rank with no collective at all.
    let b = Builder::new(TraceLimits::standard(16));
    let x = b
        .constant("x", TensorType::new(poot_graph_ir::DType::F32, vec![4]))
        .unwrap();
    let w = b
        .constant("w", TensorType::new(poot_graph_ir::DType::F32, vec![4]))
        .unwrap();
    let y = b.mul(x, w).unwrap();
    let plain = b.finish(Outputs::new(y)).unwrap();
    let two = rank_graph(2);
    let e = eval_group(&[&two, &plain], &ins, EvalOptions::default()).unwrap_err();
    match e {
        EvalError::GroupDiverged { rank, found, .. } => {
            assert_eq!(rank, 1);
            assert_eq!(found, "the end of its graph");
        }
        e => panic!("unexpected: {e}"),
    }
    let e = eval_group(&[&two, &two], &ins[..1], EvalOptions::default()).unwrap_err();
    assert_eq!(
        e,
        EvalError::GroupInputs {
            graphs: 2,
            inputs: 1
        }
    );
}

#[test]
fn a_rank_that_faults_is_named() {
    let g = rank_graph(2);
    let bad = Inputs::new().with_const("x", HostTensor::f32([4], vec![0.0; 4]).unwrap());
    let ins = [inputs(&[1.0; 4], &[1.0; 4]), bad];
    match eval_group(&[&g, &g], &ins, EvalOptions::default()).unwrap_err() {
        EvalError::Rank { rank, source } => {
            assert_eq!(rank, 1);
            assert!(matches!(*source, EvalError::Unbound { .. }), "{source}");
        }
        e => panic!("unexpected: {e}"),
    }
}

/// A three-stage hand-over: each rank adds `w` to what it holds, and broadcasts from rank 0
/// then rank 1 carry the running value along; rank 2's result is `x + 3w` (rank 0 starts from
/// `x`). Ranks pass placeholders (zeros) to broadcasts they are not the root of. Also an i32
/// value broadcast from the last rank.
fn stage_graph(rank: usize, ranks: usize) -> Graph {
    let b = Builder::new(TraceLimits::standard(16));
    let f32x4 = TensorType::new(poot_graph_ir::DType::F32, vec![4]);
    let x = b.constant("x", f32x4.clone()).unwrap();
    let w = b.constant("w", f32x4).unwrap();
    let zeros = || b.broadcast(b.lit_f32(0.0).unwrap(), [4]).unwrap();
    let mut h = if rank == 0 { x } else { zeros() };
    for root in 0..ranks - 1 {
        if root == rank {
            h = b.add(h, w).unwrap();
        }
        let sent = if root == rank { h } else { zeros() };
        let got = b.broadcast_from(sent, root, ranks).unwrap();
        if root + 1 == rank {
            h = got;
        }
    }
    if rank == ranks - 1 {
        h = b.add(h, w).unwrap();
    }
    let id = b.lit_i32(if rank == ranks - 1 { 7 } else { -1 }).unwrap();
    let id = b.broadcast_from(id, ranks - 1, ranks).unwrap();
    let h = b.broadcast_from(h, ranks - 1, ranks).unwrap();
    b.finish(Outputs::new(h).and(id)).unwrap()
}

#[test]
fn a_broadcast_hands_every_rank_the_roots_value() {
    let ranks = 3;
    let graphs: Vec<Graph> = (0..ranks).map(|r| stage_graph(r, ranks)).collect();
    let x = [1.0f32, -2.0, f32::NAN, 1e30];
    let w = [0.5f32, 0.25, 1.0, 1e30];
    // Only rank 0's x and each rank's w are read; other ranks hold other values of x.
    let ins: Vec<Inputs> = (0..ranks)
        .map(|r| {
            if r == 0 {
                inputs(&x, &w)
            } else {
                inputs(&[9.0; 4], &w)
            }
        })
        .collect();
    let refs: Vec<&Graph> = graphs.iter().collect();
    let outs = eval_group(&refs, &ins, EvalOptions::default()).unwrap();
    let want: Vec<f32> = x.iter().zip(&w).map(|(x, w)| x + w + w + w).collect();
    for o in &outs {
        let got = o.outputs[0].as_f32().unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{got:?} != {want:?}"
        );
        assert_eq!(o.outputs[1].as_i32().unwrap(), &[7]);
    }
    // A group of one: every broadcast is the identity, alone or as a group.
    let one = stage_graph(0, 1);
    let ins = [inputs(&x, &w)];
    let alone = eval(&one, &ins[0], EvalOptions::default()).unwrap();
    let group = eval_group(&[&one], &ins, EvalOptions::default()).unwrap();
    assert_eq!(alone.outputs[0].as_f32().unwrap()[0], 1.5);
    assert_eq!(
        alone.outputs[0].as_f32().unwrap()[..2],
        group[0].outputs[0].as_f32().unwrap()[..2]
    );
    // A rank of the group alone is refused.
    match eval(&graphs[1], &ins[0], EvalOptions::default()).unwrap_err() {
        EvalError::Fault { op, fault, .. } => {
            assert_eq!(op, "broadcast_from");
            assert_eq!(
                *fault,
                Fault::Collective {
                    op: "broadcast_from",
                    ranks: 3
                }
            );
        }
        e => panic!("unexpected: {e}"),
    }
}

#[test]
fn ranks_that_broadcast_from_different_roots_or_types_are_refused() {
    let one_root = |root: usize, dtype| {
        let b = Builder::new(TraceLimits::standard(16));
        let x = b.constant("x", TensorType::new(dtype, vec![4])).unwrap();
        let y = b.broadcast_from(x, root, 2).unwrap();
        b.finish(Outputs::new(y)).unwrap()
    };
    let f32s = || Inputs::new().with_const("x", HostTensor::f32([4], vec![1.0; 4]).unwrap());
    let ins = [f32s(), f32s()];
    let (a, b) = (
        one_root(0, poot_graph_ir::DType::F32),
        one_root(1, poot_graph_ir::DType::F32),
    );
    match eval_group(&[&a, &b], &ins, EvalOptions::default()).unwrap_err() {
        EvalError::GroupDiverged {
            rank,
            expected,
            found,
        } => {
            assert_eq!(rank, 1);
            assert_eq!(expected, "a broadcast from rank 0 over 2 ranks of f32[4]");
            assert_eq!(found, "a broadcast from rank 1 over 2 ranks of f32[4]");
        }
        e => panic!("unexpected: {e}"),
    }
    // A graph for a group of two run by three ranks.
    let ins3 = [f32s(), f32s(), f32s()];
    let e = eval_group(&[&a, &a, &a], &ins3, EvalOptions::default()).unwrap_err();
    assert!(matches!(e, EvalError::GroupDiverged { rank: 0, .. }), "{e}");
    // An all-reduce where a peer broadcasts.
    let g = rank_graph(2);
    let e = eval_group(
        &[&a, &g],
        &[f32s(), inputs(&[1.0; 4], &[1.0; 4])],
        EvalOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::GroupDiverged { rank: 1, .. }), "{e}");
}
