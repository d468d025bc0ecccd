//! Binding inputs, carried state, the kept environment, and f64 accumulation.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use poot_eval::{EvalError, EvalOptions, HostTensor, InputKind, Inputs, eval};
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits};

fn ty(dtype: DType, dims: &[usize]) -> TensorType {
    TensorType::new(dtype, dims)
}

/// `out = w[token] + bias`, with one const, one slot and one state pair (`acc += out`).
fn small_graph() -> poot_graph_ir::Graph {
    let b = Builder::new(TraceLimits::standard(1));
    let w = b.constant("w", ty(DType::F32, &[4, 2])).unwrap();
    let tok = b.slot(Slot::Token, ty(DType::I32, &[1])).unwrap();
    let acc = b.state_input("acc", ty(DType::F32, &[1, 2])).unwrap();
    let count = b.state_input("count", ty(DType::I32, &[])).unwrap();
    let row = b.gather(w, tok, 0).unwrap();
    let acc2 = b.add(acc, row).unwrap();
    let one = b.lit_i32(1).unwrap();
    let count2 = b.add(count, one).unwrap();
    b.finish(Outputs::new(row).with_state(&[(count, count2), (acc, acc2)]))
        .unwrap()
}

fn good_inputs() -> Inputs<'static> {
    Inputs::new()
        .with_const(
            "w",
            HostTensor::f32([4, 2], vec![0., 1., 2., 3., 4., 5., 6., 7.]).unwrap(),
        )
        .with_slot(Slot::Token, HostTensor::i32([1], vec![2]).unwrap())
        .with_state("acc", HostTensor::f32([1, 2], vec![10., 20.]).unwrap())
        .with_state("count", HostTensor::i32([], vec![41]).unwrap())
}

#[test]
fn state_outputs_come_back_paired_with_their_names() {
    let g = small_graph();
    let inputs = good_inputs();
    let ev = eval(&g, &inputs, EvalOptions::default()).unwrap();
    assert_eq!(ev.outputs.len(), 1);
    assert_eq!(ev.outputs[0].as_f32().unwrap(), &[4., 5.]);
    let names: Vec<&str> = ev.state.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["count", "acc"],
        "state comes back in the graph's pair order"
    );
    assert_eq!(
        ev.state_value("acc").unwrap().as_f32().unwrap(),
        &[14., 25.]
    );
    assert_eq!(ev.state_value("count").unwrap().as_i32().unwrap(), &[42]);
    assert!(ev.env.is_none());
}

#[test]
fn a_missing_binding_is_named() {
    let g = small_graph();
    let mut inputs = good_inputs();
    inputs = Inputs::new()
        .with_const("w", inputs.constant("w").unwrap().clone())
        .with_state("acc", inputs.state("acc").unwrap().clone())
        .with_state("count", inputs.state("count").unwrap().clone());
    let err = eval(&g, &inputs, EvalOptions::default()).unwrap_err();
    assert_eq!(
        err,
        EvalError::Unbound {
            kind: InputKind::Slot,
            name: "token".into(),
            expected: ty(DType::I32, &[1])
        }
    );
}

#[test]
fn a_mistyped_binding_is_named() {
    let g = small_graph();
    let inputs = good_inputs().with_state("acc", HostTensor::f32([2], vec![0., 0.]).unwrap());
    let err = eval(&g, &inputs, EvalOptions::default()).unwrap_err();
    assert_eq!(
        err,
        EvalError::InputType {
            kind: InputKind::State,
            name: "acc".into(),
            expected: ty(DType::F32, &[1, 2]),
            found: ty(DType::F32, &[2])
        }
    );
    let inputs = good_inputs().with_const(
        "w",
        HostTensor::f16([4, 2], vec![half::f16::ZERO; 8]).unwrap(),
    );
    let err = eval(&g, &inputs, EvalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            EvalError::InputType {
                kind: InputKind::Const,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_extra_binding_is_named() {
    let g = small_graph();
    let inputs = good_inputs().with_const("w_typo", HostTensor::f32([1], vec![0.]).unwrap());
    assert_eq!(
        eval(&g, &inputs, EvalOptions::default()).unwrap_err(),
        EvalError::UnknownBinding {
            kind: InputKind::Const,
            name: "w_typo".into()
        }
    );
    let inputs = good_inputs().with_slot(Slot::Pos, HostTensor::i32([], vec![0]).unwrap());
    assert_eq!(
        eval(&g, &inputs, EvalOptions::default()).unwrap_err(),
        EvalError::UnknownBinding {
            kind: InputKind::Slot,
            name: "pos".into()
        }
    );
    let inputs = good_inputs().with_state("v_cache", HostTensor::f32([1], vec![0.]).unwrap());
    assert_eq!(
        eval(&g, &inputs, EvalOptions::default()).unwrap_err(),
        EvalError::UnknownBinding {
            kind: InputKind::State,
            name: "v_cache".into()
        }
    );
}

#[test]
fn the_kept_environment_holds_every_value_and_borrows_inputs() {
    let g = small_graph();
    let w: Vec<u8> = [0f32, 1., 2., 3., 4., 5., 6., 7.]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut inputs = good_inputs();
    inputs.set_const(
        "w",
        HostTensor::from_le_bytes(ty(DType::F32, &[4, 2]), &w[..]).unwrap(),
    );
    let ev = eval(
        &g,
        &inputs,
        EvalOptions {
            keep_env: true,
            accumulate_f64: false,
        },
    )
    .unwrap();
    let env = ev.env.as_ref().unwrap();
    assert_eq!(env.len(), g.values().len());
    for (i, v) in g.values().iter().enumerate() {
        assert_eq!(env[i].ty(), &v.ty);
    }
    let (w_id, _, _) = g.consts().next().unwrap();
    assert_eq!(
        ev.value(w_id).unwrap().to_f32_vec().unwrap(),
        vec![0., 1., 2., 3., 4., 5., 6., 7.]
    );
    assert!(
        ev.value(w_id).unwrap().is_borrowed(),
        "inputs are views of their bindings"
    );
    let out = g.outputs().primary[0];
    assert_eq!(ev.value(out).unwrap().as_f32().unwrap(), &[4., 5.]);
}

#[test]
fn updating_a_value_that_is_read_later_leaves_the_reader_unchanged() {
    // s2 = dus(s, u) and t = reshape(s) are both taken from `s`; the later reader of `s` must see
    // the original, and the graph may return an input directly, twice.
    let b = Builder::new(TraceLimits::standard(1));
    let s = b.state_input("s", ty(DType::F32, &[4])).unwrap();
    let u = b.constant("u", ty(DType::F32, &[1])).unwrap();
    let i = b.lit_i32(1).unwrap();
    let s2 = b.dynamic_update_slice(s, u, &[i]).unwrap();
    let t = b.reshape(s, [2, 2]).unwrap();
    let sum = b.reduce_sum(s, 0).unwrap();
    let g = b
        .finish(
            Outputs::new(sum)
                .and(t)
                .and(u)
                .and(u)
                .with_state(&[(s, s2)]),
        )
        .unwrap();
    let inputs = Inputs::new()
        .with_state("s", HostTensor::f32([4], vec![1., 2., 3., 4.]).unwrap())
        .with_const("u", HostTensor::f32([1], vec![9.]).unwrap());
    let ev = eval(&g, &inputs, EvalOptions::default()).unwrap();
    assert_eq!(ev.outputs[0].as_f32().unwrap(), &[10.]);
    assert_eq!(ev.outputs[1].as_f32().unwrap(), &[1., 2., 3., 4.]);
    assert_eq!(ev.outputs[1].dims(), &[2, 2]);
    assert_eq!(ev.outputs[2].as_f32().unwrap(), &[9.]);
    assert_eq!(ev.outputs[3].as_f32().unwrap(), &[9.]);
    assert_eq!(
        ev.state_value("s").unwrap().as_f32().unwrap(),
        &[1., 9., 3., 4.]
    );
    assert_eq!(
        inputs.state("s").unwrap().as_f32().unwrap(),
        &[1., 2., 3., 4.],
        "bindings are never written"
    );
}

#[test]
fn f64_accumulation_keeps_small_terms() {
    // 1e8 followed by 1000 ones: in f32 each +1 is below half an ulp of 1e8 (ulp 8) and is lost;
    // accumulated in f64 the sum is exact, 100001000, which f32 represents.
    let n = 1001;
    let mut v = vec![1.0f32; n];
    v[0] = 1e8;
    let b = Builder::new(TraceLimits::standard(1));
    let cols = b.constant("cols", ty(DType::F32, &[n, 2])).unwrap();
    let col_sum = b.reduce_sum(cols, 0).unwrap();
    let xt = b.constant("x", ty(DType::F32, &[1, n])).unwrap();
    let ones = b.constant("ones", ty(DType::F32, &[1, n])).unwrap();
    let dot = b.matmul(xt, ones, true).unwrap();
    let row_sum = b.reduce_sum(xt, 1).unwrap();
    let g = b
        .finish(Outputs::new(col_sum).and(dot).and(row_sum))
        .unwrap();
    let both: Vec<f32> = v.iter().flat_map(|&a| [a, a]).collect();
    let inputs = Inputs::new()
        .with_const("cols", HostTensor::f32([n, 2], both).unwrap())
        .with_const("x", HostTensor::f32([1, n], v).unwrap())
        .with_const("ones", HostTensor::f32([1, n], vec![1.0; n]).unwrap());
    let f32_run = eval(&g, &inputs, EvalOptions::default()).unwrap();
    let f64_run = eval(
        &g,
        &inputs,
        EvalOptions {
            accumulate_f64: true,
            keep_env: false,
        },
    )
    .unwrap();
    assert_eq!(f64_run.outputs[0].as_f32().unwrap(), &[100_001_000.0; 2]);
    assert_eq!(f64_run.outputs[1].as_f32().unwrap(), &[100_001_000.0]);
    assert_eq!(f64_run.outputs[2].as_f32().unwrap(), &[100_001_000.0]);
    // Summed left to right (a strided axis) in f32, every +1 is lost.
    assert_eq!(f32_run.outputs[0].as_f32().unwrap(), &[1e8; 2]);
    // Along a contiguous axis the eight f32 partial sums keep some of them, but not all.
    for out in &f32_run.outputs[1..] {
        let got = out.as_f32().unwrap()[0];
        assert!(got != 100_001_000.0 && (got - 1e8).abs() <= 1000.0, "{got}");
    }
}
