//! Shape and type inference: examples worked by hand, then properties over random shapes.

use poot_graph_ir::ops::broadcast_shape;
use poot_graph_ir::*;
use proptest::prelude::*;

fn t(d: DType, dims: &[usize]) -> TensorType {
    TensorType::new(d, dims.to_vec())
}

fn infer(op: OpKind, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    let refs: Vec<&TensorType> = inputs.iter().collect();
    op.infer(&refs)
}

#[test]
fn worked_examples() {
    use DType::*;
    let f = |dims: &[usize]| t(F32, dims);
    assert_eq!(
        infer(OpKind::Literal(Scalar::I32(3)), &[]).unwrap(),
        t(I32, &[])
    );
    assert_eq!(
        infer(
            OpKind::Iota {
                shape: Shape::new([2, 5]),
                axis: 1,
                dtype: U32
            },
            &[]
        )
        .unwrap(),
        t(U32, &[2, 5])
    );
    assert_eq!(
        infer(OpKind::Compare(CompareOp::Lt), &[f(&[3]), f(&[3])]).unwrap(),
        t(Bool, &[3])
    );
    assert_eq!(
        infer(OpKind::Cast { to: BF16 }, &[f(&[3])]).unwrap(),
        t(BF16, &[3])
    );
    assert_eq!(
        infer(
            OpKind::Transpose {
                perm: vec![2, 0, 1]
            },
            &[f(&[2, 3, 4])]
        )
        .unwrap(),
        f(&[4, 2, 3])
    );
    assert_eq!(
        infer(OpKind::Concat { axis: 1 }, &[f(&[2, 3]), f(&[2, 5])]).unwrap(),
        f(&[2, 8])
    );
    assert_eq!(
        infer(
            OpKind::Gather { axis: 0 },
            &[t(BF16, &[100, 8]), t(I32, &[2, 3])]
        )
        .unwrap(),
        t(BF16, &[2, 3, 8])
    );
    assert_eq!(
        infer(OpKind::Gather { axis: 1 }, &[f(&[4, 100, 8]), t(U32, &[3])]).unwrap(),
        f(&[4, 3, 8])
    );
    assert_eq!(
        infer(
            OpKind::Gather { axis: 0 },
            &[t(Packed(GgmlType::Q4_K), &[10, 256]), t(I32, &[1, 2])]
        )
        .unwrap(),
        f(&[1, 2, 256])
    );
    assert_eq!(
        infer(
            OpKind::TakeAlong { axis: 1 },
            &[f(&[4, 10]), t(I32, &[4, 2])]
        )
        .unwrap(),
        f(&[4, 2])
    );
    let s = t(I32, &[]);
    assert_eq!(
        infer(
            OpKind::DynamicSlice { sizes: vec![1, 4] },
            &[f(&[3, 8]), s.clone(), s.clone()]
        )
        .unwrap(),
        f(&[1, 4])
    );
    assert_eq!(
        infer(
            OpKind::DynamicUpdateSlice,
            &[f(&[3, 8]), f(&[1, 8]), s.clone(), s.clone()]
        )
        .unwrap(),
        f(&[3, 8])
    );
    assert_eq!(
        infer(
            OpKind::ScatterUpdate { axis: 1 },
            &[f(&[2, 8, 4]), t(I32, &[3]), f(&[2, 3, 4])]
        )
        .unwrap(),
        f(&[2, 8, 4])
    );
    assert_eq!(
        infer(
            OpKind::Reduce {
                op: ReduceOp::Sum,
                axis: 1
            },
            &[f(&[2, 8, 4])]
        )
        .unwrap(),
        f(&[2, 1, 4])
    );
    assert_eq!(
        infer(OpKind::ArgMax { axis: 2 }, &[f(&[2, 8, 4])]).unwrap(),
        t(I32, &[2, 8, 1])
    );
    assert_eq!(
        infer(OpKind::ArgTopK { k: 2 }, &[f(&[5, 8])]).unwrap(),
        t(I32, &[5, 2])
    );
    assert_eq!(
        infer(
            OpKind::MatMul {
                transpose_rhs: false
            },
            &[f(&[2, 3, 4, 5]), f(&[2, 3, 5, 6])]
        )
        .unwrap(),
        f(&[2, 3, 4, 6])
    );
    assert_eq!(
        infer(
            OpKind::MatMul {
                transpose_rhs: true
            },
            &[f(&[7, 1, 64]), t(F16, &[32, 64])]
        )
        .unwrap(),
        f(&[7, 1, 32])
    );
    assert_eq!(
        infer(
            OpKind::MatMul {
                transpose_rhs: true
            },
            &[f(&[1, 64]), t(Packed(GgmlType::Q4_0), &[32, 64])]
        )
        .unwrap(),
        f(&[1, 32])
    );
    assert_eq!(
        infer(
            OpKind::IndexedMatMul,
            &[f(&[6, 64]), t(BF16, &[8, 32, 64]), t(I32, &[6])]
        )
        .unwrap(),
        f(&[6, 32])
    );
}

#[test]
fn packed_values_are_read_only_by_weight_ops() {
    let p = t(DType::Packed(GgmlType::Q4_0), &[4, 32]);
    assert!(infer(OpKind::Unary(UnaryOp::Exp), std::slice::from_ref(&p)).is_err());
    assert!(
        infer(
            OpKind::Reshape {
                shape: Shape::new([128])
            },
            std::slice::from_ref(&p)
        )
        .is_err()
    );
    assert!(infer(OpKind::Cast { to: DType::F32 }, std::slice::from_ref(&p)).is_err());
    // A packed weight must be [N, K] with K whole blocks, read transposed.
    assert!(
        infer(
            OpKind::MatMul {
                transpose_rhs: false
            },
            &[t(DType::F32, &[1, 4]), p.clone()]
        )
        .is_err()
    );
    let ragged = t(DType::Packed(GgmlType::Q4_0), &[4, 48]);
    assert!(matches!(
        infer(
            OpKind::MatMul {
                transpose_rhs: true
            },
            &[t(DType::F32, &[1, 48]), ragged]
        ),
        Err(InferError::PackedBlocks { .. })
    ));
}

fn gptq(group: u32, act_order: bool) -> DType {
    DType::Components(
        ComponentFormat::new(PackedFormat::Gptq(poot_formats::GptqFormat {
            group: poot_formats::GroupSize::Elems(
                std::num::NonZeroU32::new(group).expect("nonzero group"),
            ),
            act_order,
            zeros: poot_formats::GptqZeros::V1PlusOne,
        }))
        .expect("GPTQ is a component format"),
    )
}

#[test]
fn component_formats_are_read_only_by_contractions() {
    let fp4 = DType::Components(ComponentFormat::new(PackedFormat::Fp4E2M1).unwrap());
    let mm = OpKind::MatMul {
        transpose_rhs: true,
    };
    // [N, K] read transposed, batched or not.
    assert_eq!(
        infer(
            mm.clone(),
            &[t(DType::F32, &[3, 64]), t(gptq(32, true), &[16, 64])]
        )
        .unwrap(),
        t(DType::F32, &[3, 16])
    );
    assert_eq!(
        infer(mm.clone(), &[t(DType::F32, &[2, 5, 64]), t(fp4, &[8, 64])]).unwrap(),
        t(DType::F32, &[2, 5, 8])
    );
    // Not transposed, not rank 2, or a shape the format cannot pack: typed refusals.
    assert!(matches!(
        infer(
            OpKind::MatMul {
                transpose_rhs: false
            },
            &[t(DType::F32, &[1, 16]), t(gptq(32, false), &[16, 64])]
        ),
        Err(InferError::DType { input: 1, .. })
    ));
    assert!(matches!(
        infer(
            mm.clone(),
            &[t(DType::F32, &[1, 64]), t(gptq(32, false), &[12, 64])]
        ),
        Err(InferError::ComponentShape { source, .. })
            if matches!(*source, poot_formats::FormatError::ShapeNotDivisible { elems: 12, .. })
    ));
    assert!(matches!(
        infer(mm, &[t(DType::F32, &[1, 48]), t(fp4, &[8, 48])]),
        Err(InferError::ComponentShape { .. })
    ));
    assert!(matches!(
        infer(
            OpKind::IndexedMatMul,
            &[
                t(DType::F32, &[2, 64]),
                t(fp4, &[2, 8, 64]),
                t(DType::I32, &[2])
            ]
        ),
        Err(InferError::ComponentShape { .. })
    ));
    // No gather, cast, reshape or arithmetic reads it.
    let w = t(gptq(32, false), &[16, 64]);
    assert!(matches!(
        infer(
            OpKind::Gather { axis: 0 },
            &[w.clone(), t(DType::I32, &[2])]
        ),
        Err(InferError::DType { input: 0, .. })
    ));
    assert!(infer(OpKind::Cast { to: DType::F32 }, std::slice::from_ref(&w)).is_err());
    assert!(
        infer(
            OpKind::Reshape {
                shape: Shape::new([1024])
            },
            std::slice::from_ref(&w)
        )
        .is_err()
    );
    assert!(infer(OpKind::Binary(BinaryOp::Add), &[w.clone(), w.clone()]).is_err());
    assert!(
        infer(
            OpKind::Cast {
                to: gptq(32, false)
            },
            &[t(DType::F32, &[16, 64])]
        )
        .is_err()
    );
    // Stored size: every required component (no g_idx without act-order).
    assert_eq!(w.size_bytes(), Some(8 * 16 * 4 + 2 * 2 * 4 + 2 * 16 * 2));
    assert_eq!(
        t(gptq(32, true), &[16, 64]).size_bytes(),
        Some(8 * 16 * 4 + 2 * 2 * 4 + 2 * 16 * 2 + 64 * 4)
    );
}

#[test]
fn a_block_format_is_not_a_component_format() {
    assert!(ComponentFormat::new(PackedFormat::Block(poot_formats::BlockFormat::Q4_0)).is_none());
}

fn dims_strategy(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1usize..5, 0..=max_rank)
}

proptest! {
    #[test]
    fn reshape_accepts_exactly_equal_counts(a in dims_strategy(4), b in dims_strategy(4)) {
        let r = infer(OpKind::Reshape { shape: Shape::new(b.clone()) }, &[t(DType::F32, &a)]);
        let same = a.iter().product::<usize>() == b.iter().product::<usize>();
        prop_assert_eq!(r.is_ok(), same);
    }

    #[test]
    fn transpose_then_inverse_restores_shape(a in dims_strategy(5), seed in any::<u64>()) {
        let mut perm: Vec<usize> = (0..a.len()).collect();
        let mut s = seed;
        for i in (1..perm.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            perm.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() { inv[p] = i; }
        let mid = infer(OpKind::Transpose { perm }, &[t(DType::F32, &a)]).unwrap();
        let back = infer(OpKind::Transpose { perm: inv }, &[mid]).unwrap();
        prop_assert_eq!(back, t(DType::F32, &a));
    }

    #[test]
    fn broadcast_agrees_with_broadcast_shape(a in dims_strategy(3), b in dims_strategy(4)) {
        let common = broadcast_shape(&a, &b);
        let direct = infer(OpKind::Broadcast { shape: Shape::new(b.clone()) }, &[t(DType::F32, &a)]);
        // Broadcasting a to b succeeds exactly when b is the common shape of a and b.
        prop_assert_eq!(direct.is_ok(), common.as_deref() == Some(b.as_slice()));
    }

    #[test]
    fn slice_shape_is_window_size(a in dims_strategy(4), picks in proptest::collection::vec((0usize..5, 0usize..5), 4)) {
        let starts: Vec<usize> = a.iter().zip(&picks).map(|(&d, &(s, _))| s.min(d)).collect();
        let ends: Vec<usize> = a.iter().zip(&picks).zip(&starts).map(|((&d, &(_, e)), &s)| (s + e).min(d)).collect();
        let out = infer(OpKind::Slice { starts: starts.clone(), ends: ends.clone() }, &[t(DType::F32, &a)]).unwrap();
        let want: Vec<usize> = starts.iter().zip(&ends).map(|(s, e)| e - s).collect();
        prop_assert_eq!(out.dims(), want.as_slice());
    }

    #[test]
    fn concat_sums_the_axis(a in dims_strategy(3).prop_filter("rank>0", |v| !v.is_empty()), extra in 1usize..4, axis_pick in 0usize..3) {
        let axis = axis_pick % a.len();
        let mut b2 = a.clone();
        b2[axis] = extra;
        let out = infer(OpKind::Concat { axis }, &[t(DType::F32, &a), t(DType::F32, &b2)]).unwrap();
        prop_assert_eq!(out.dims()[axis], a[axis] + extra);
    }

    #[test]
    fn matmul_shapes(bt in dims_strategy(2), m in 1usize..5, k in 1usize..5, n in 1usize..5, tr in any::<bool>()) {
        let mut l = bt.clone(); l.extend([m, k]);
        let mut r = bt.clone(); r.extend(if tr { [n, k] } else { [k, n] });
        let out = infer(OpKind::MatMul { transpose_rhs: tr }, &[t(DType::F32, &l), t(DType::F32, &r)]).unwrap();
        let mut want = bt; want.extend([m, n]);
        prop_assert_eq!(out.dims(), want.as_slice());
    }
}

#[test]
fn collectives_keep_their_operands_type() {
    use DType::*;
    let bcast = |root, ranks| OpKind::BroadcastFrom { root, ranks };
    for d in [F32, I32, U32] {
        assert_eq!(infer(bcast(1, 3), &[t(d, &[2, 4])]).unwrap(), t(d, &[2, 4]));
    }
    assert_eq!(infer(bcast(0, 1), &[t(F32, &[])]).unwrap(), t(F32, &[]));
    assert_eq!(
        infer(bcast(3, 3), &[t(F32, &[2])]).unwrap_err(),
        InferError::GroupRoot { root: 3, ranks: 3 }
    );
    assert_eq!(
        infer(bcast(0, 0), &[t(F32, &[2])]).unwrap_err(),
        InferError::GroupSize {
            op: "broadcast_from",
            ranks: 0
        }
    );
    // Words move as they are: a type stored in fewer bits is refused, not widened.
    for d in [F16, BF16, U8, Bool] {
        assert!(matches!(
            infer(bcast(0, 2), &[t(d, &[2])]),
            Err(InferError::DType {
                op: "broadcast_from",
                ..
            })
        ));
    }
    assert!(matches!(
        infer(bcast(0, 2), &[t(F32, &[2]), t(F32, &[2])]),
        Err(InferError::Arity { .. })
    ));
    assert_eq!(
        infer(OpKind::AllReduceSum { ranks: 0 }, &[t(F32, &[2])]).unwrap_err(),
        InferError::GroupSize {
            op: "all_reduce_sum",
            ranks: 0
        }
    );
}
