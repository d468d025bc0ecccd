//! Every way model code can misuse the builder returns its typed error, and records nothing.

use poot_graph_ir::*;

fn f32t(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F32, dims.to_vec())
}

fn limits() -> TraceLimits {
    TraceLimits::standard(64)
}

#[test]
fn foreign_handle_is_refused() {
    let a = Builder::new(limits());
    let b = Builder::new(limits());
    let x = a.constant("x", f32t(&[2])).unwrap();
    let y = b.constant("y", f32t(&[2])).unwrap();
    let err = b.add(x, y).unwrap_err();
    assert!(matches!(err, BuilderError::ForeignHandle { .. }), "{err}");
    assert!(matches!(b.aval(x), Err(BuilderError::ForeignHandle { .. })));
    // The refused call recorded nothing.
    assert_eq!(b.usage().equations, 0);
    let err = b.finish(Outputs::new(x)).unwrap_err();
    assert!(matches!(err, BuilderError::ForeignHandle { .. }));
}

#[test]
fn shape_and_dtype_mismatches_are_typed() {
    let b = Builder::new(limits());
    let x = b.constant("x", f32t(&[2, 3])).unwrap();
    let y = b.constant("y", f32t(&[3, 2])).unwrap();
    let i = b
        .constant("i", TensorType::new(DType::I32, vec![2, 3]))
        .unwrap();
    match b.add(x, y).unwrap_err() {
        BuilderError::Infer {
            source: InferError::ShapeMismatch { op: "add", .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.add(x, i).unwrap_err() {
        BuilderError::Infer {
            source: InferError::DType { op: "add", .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.exp(i).unwrap_err() {
        BuilderError::Infer {
            source:
                InferError::DType {
                    op: "exp",
                    found: DType::I32,
                    ..
                },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.matmul(x, x, false).unwrap_err() {
        BuilderError::Infer {
            source: InferError::Contraction { .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.reshape(x, [5]).unwrap_err() {
        BuilderError::Infer {
            source: InferError::Reshape { .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.broadcast(x, [2, 4]).unwrap_err() {
        BuilderError::Infer {
            source: InferError::Broadcast { .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.transpose(x, vec![0, 0]).unwrap_err() {
        BuilderError::Infer {
            source: InferError::Permutation { .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.slice(x, vec![0, 2], vec![2, 4]).unwrap_err() {
        BuilderError::Infer {
            source: InferError::SliceBounds { axis: 1, .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.arg_top_k(x, 4).unwrap_err() {
        BuilderError::Infer {
            source: InferError::TopK { k: 4, dim: 3 },
            ..
        } => {}
        e => panic!("{e}"),
    }
    match b.select(x, x, x).unwrap_err() {
        BuilderError::Infer {
            source: InferError::DType { op: "select", .. },
            ..
        } => {}
        e => panic!("{e}"),
    }
    assert_eq!(
        b.usage().equations,
        0,
        "no refused call may record an equation"
    );
}

#[test]
fn axis_out_of_range_is_typed() {
    let b = Builder::new(limits());
    let x = b.constant("x", f32t(&[2, 3])).unwrap();
    for err in [
        b.reduce_sum(x, 2).unwrap_err(),
        b.argmax(x, 7).unwrap_err(),
        b.concat(&[x, x], 2).unwrap_err(),
        b.iota([2, 3], 2, DType::I32).unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                BuilderError::Infer {
                    source: InferError::Axis { .. },
                    ..
                }
            ),
            "{err}"
        );
    }
    let idx = b
        .constant("idx", TensorType::new(DType::I32, vec![4]))
        .unwrap();
    assert!(matches!(
        b.gather(x, idx, 2).unwrap_err(),
        BuilderError::Infer {
            source: InferError::Axis {
                op: "gather",
                axis: 2,
                rank: 2
            },
            ..
        }
    ));
}

#[test]
fn every_budget_resource_is_enforced_before_anything_is_built() {
    let tight = |f: fn(&mut TraceLimits)| {
        let mut l = TraceLimits::standard(8);
        f(&mut l);
        Builder::new(l)
    };
    // Tokens.
    let b = tight(|_| {});
    b.admit_tokens(8).unwrap();
    assert_eq!(
        b.admit_tokens(1).unwrap_err(),
        BuilderError::Budget {
            resource: Resource::Tokens,
            limit: 8,
            attempted: 9
        }
    );
    // Values.
    let b = tight(|l| l.max_values = 2);
    let x = b.constant("x", f32t(&[1])).unwrap();
    b.exp(x).unwrap();
    let err = b.exp(x).unwrap_err();
    assert_eq!(
        err,
        BuilderError::Budget {
            resource: Resource::Values,
            limit: 2,
            attempted: 3
        }
    );
    assert_eq!(b.usage().values, 2);
    assert_eq!(b.usage().equations, 1);
    // Equations.
    let b = tight(|l| l.max_equations = 1);
    let x = b.constant("x", f32t(&[1])).unwrap();
    b.exp(x).unwrap();
    assert!(matches!(
        b.exp(x).unwrap_err(),
        BuilderError::Budget {
            resource: Resource::Equations,
            ..
        }
    ));
    // Literal bytes.
    let b = tight(|l| l.max_literal_bytes = 4);
    b.lit_f32(1.0).unwrap();
    assert!(matches!(
        b.lit_f32(2.0).unwrap_err(),
        BuilderError::Budget {
            resource: Resource::LiteralBytes,
            ..
        }
    ));
    // Owned bytes.
    let b = tight(|l| l.max_owned_bytes = 64);
    let err = b.constant(&"n".repeat(100), f32t(&[1])).unwrap_err();
    assert!(matches!(
        err,
        BuilderError::Budget {
            resource: Resource::OwnedBytes,
            ..
        }
    ));
    assert_eq!(b.usage().values, 0);
}

#[test]
fn duplicate_input_names_are_refused() {
    let b = Builder::new(limits());
    b.constant("w", f32t(&[1])).unwrap();
    assert!(matches!(
        b.constant("w", f32t(&[2])).unwrap_err(),
        BuilderError::DuplicateName { kind: "const", .. }
    ));
    b.slot(Slot::Pos, TensorType::new(DType::I32, vec![1, 1]))
        .unwrap();
    assert!(matches!(
        b.slot_named("pos", TensorType::new(DType::I32, vec![1]))
            .unwrap_err(),
        BuilderError::DuplicateName { kind: "slot", .. }
    ));
    b.state_input("kv", f32t(&[4])).unwrap();
    assert!(matches!(
        b.state_input("kv", f32t(&[4])).unwrap_err(),
        BuilderError::DuplicateName { kind: "state", .. }
    ));
    // Kinds have separate namespaces.
    b.state_input("w", f32t(&[1])).unwrap();
}

#[test]
fn unpaired_or_mistyped_state_fails_validation() {
    let b = Builder::new(limits());
    let s = b.state_input("kv", f32t(&[4])).unwrap();
    let y = b.exp(s).unwrap();
    let err = b.finish(Outputs::new(y)).unwrap_err();
    assert!(
        matches!(
            err,
            BuilderError::Validation(ValidationError::StatePairing { pairs: 0, .. })
        ),
        "{err}"
    );

    let b = Builder::new(limits());
    let s = b.state_input("kv", f32t(&[4])).unwrap();
    let y = b.reduce_sum(s, 0).unwrap();
    let err = b.finish(Outputs::new(y).with_state(&[(s, y)])).unwrap_err();
    assert!(
        matches!(
            err,
            BuilderError::Validation(ValidationError::StatePair { .. })
        ),
        "{err}"
    );

    let b = Builder::new(limits());
    let s = b.state_input("kv", f32t(&[4])).unwrap();
    let y = b.exp(s).unwrap();
    let err = b.finish(Outputs::new(y).with_state(&[(y, y)])).unwrap_err();
    assert!(
        matches!(
            err,
            BuilderError::Validation(ValidationError::StatePair { .. })
        ),
        "{err}"
    );

    let b = Builder::new(limits());
    let s = b.state_input("kv", f32t(&[4])).unwrap();
    let y = b.exp(s).unwrap();
    let g = b.finish(Outputs::new(y).with_state(&[(s, y)])).unwrap();
    assert_eq!(g.state_out(s.id()), Some(y.id()));
}

#[test]
fn checked_edits_revalidate() {
    let b = Builder::new(limits());
    let w = b.constant("w", f32t(&[4, 8])).unwrap();
    let x = b.constant("x", f32t(&[2, 8])).unwrap();
    let y = b.matmul(x, w, true).unwrap();
    let g = b.finish(Outputs::new(y)).unwrap();

    // Binding the weight as packed Q8_0 blocks keeps the graph valid once re-inferred.
    let q8 = TensorType::new(DType::Packed(GgmlType::Q8_0), vec![4, 32]);
    let mut e = g.clone().edit();
    e.retype_input(w.id(), q8.clone()).unwrap();
    // [2, 8] x [4, 32]^T no longer contracts: the edit is refused at finish.
    assert!(matches!(e.reinfer(), Err(ValidationError::Infer { .. })));

    let mut e = g.clone().edit();
    e.retype_input(w.id(), TensorType::new(DType::BF16, vec![4, 8]))
        .unwrap();
    let g2 = e.finish().unwrap();
    assert_eq!(g2.ty(y.id()), Some(&f32t(&[2, 4])));

    // An edit that breaks the types is refused rather than published.
    let mut e = g.edit();
    e.retype_input(x.id(), f32t(&[2, 9])).unwrap();
    assert!(matches!(e.finish(), Err(ValidationError::Infer { .. })));
}

#[test]
fn component_constants_are_checked_when_declared() {
    let fp8 = DType::Components(
        ComponentFormat::new(PackedFormat::Fp8(poot_formats::Fp8Format {
            scaling: poot_formats::Fp8Scaling::Block128,
            scale_type: poot_formats::ScaleType::BF16,
        }))
        .unwrap(),
    );
    let b = Builder::new(limits());
    // Any [N, K] stores as FP8; a rank-3 one does not.
    b.constant("w", TensorType::new(fp8, vec![130, 70]))
        .unwrap();
    assert!(matches!(
        b.constant("w3", TensorType::new(fp8, vec![2, 130, 70])),
        Err(BuilderError::Infer {
            source: InferError::ComponentShape { .. },
            ..
        })
    ));
    // Only constants have components to bind.
    assert!(matches!(
        b.slot_named("x", TensorType::new(fp8, vec![4, 4])),
        Err(BuilderError::Infer {
            source: InferError::DType { .. },
            ..
        })
    ));
    assert!(matches!(
        b.state_input("s", TensorType::new(fp8, vec![4, 4])),
        Err(BuilderError::Infer { .. })
    ));
}
