//! Runtime faults are typed errors naming the equation, the op and the offending index.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use poot_eval::{EvalError, EvalOptions, Fault, HostTensor, Inputs, eval};
use poot_graph_ir::{Builder, DType, GgmlType, Graph, OpKind, Outputs, TensorType, TraceLimits};

fn graph(op: OpKind, tys: &[TensorType]) -> Graph {
    let b = Builder::new(TraceLimits::standard(1));
    let ins: Vec<_> = tys
        .iter()
        .enumerate()
        .map(|(i, t)| b.constant(&format!("x{i}"), t.clone()).unwrap())
        .collect();
    let y = b.eqn(op, &ins).unwrap();
    b.finish(Outputs::new(y)).unwrap()
}

/// Runs `op` on `inputs` and returns the fault it raised, checking the error names eqn 0 and op.
fn fault(op: OpKind, inputs: Vec<HostTensor<'static>>) -> Fault {
    let name = op.name();
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty().clone()).collect();
    let g = graph(op, &tys);
    let mut bound = Inputs::new();
    for (i, t) in inputs.into_iter().enumerate() {
        bound.set_const(format!("x{i}"), t);
    }
    match eval(&g, &bound, EvalOptions::default()) {
        Err(EvalError::Fault {
            eqn,
            op,
            value,
            fault,
            ..
        }) => {
            assert_eq!((eqn, op), (0, name));
            assert_eq!(value, g.eqns()[0].out);
            *fault
        }
        other => panic!("{name}: expected a fault, got {other:?}"),
    }
}

fn f32s(dims: &[usize]) -> HostTensor<'static> {
    let n: usize = dims.iter().product();
    HostTensor::f32(dims, (0..n).map(|i| i as f32).collect::<Vec<_>>()).unwrap()
}

fn i32s(dims: &[usize], v: Vec<i32>) -> HostTensor<'static> {
    HostTensor::i32(dims, v).unwrap()
}

#[test]
fn gather_index_out_of_range() {
    let f = fault(
        OpKind::Gather { axis: 0 },
        vec![f32s(&[5, 2]), i32s(&[3], vec![0, 4, 5])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 2,
            index: 5,
            bound: 5
        }
    );
    let f = fault(
        OpKind::Gather { axis: 1 },
        vec![f32s(&[5, 2]), i32s(&[1], vec![-1])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 0,
            index: -1,
            bound: 2
        }
    );
    let big = HostTensor::u32([1], vec![u32::MAX]).unwrap();
    let f = fault(OpKind::Gather { axis: 0 }, vec![f32s(&[5, 2]), big]);
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 0,
            index: i64::from(u32::MAX),
            bound: 5
        }
    );
}

#[test]
fn packed_gather_index_out_of_range() {
    let table = HostTensor::packed(GgmlType::Q8_0, [2, 32], vec![0u8; 68]).unwrap();
    let f = fault(
        OpKind::Gather { axis: 0 },
        vec![table, i32s(&[2], vec![1, 2])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 1,
            index: 2,
            bound: 2
        }
    );
}

#[test]
fn take_along_index_out_of_range() {
    let f = fault(
        OpKind::TakeAlong { axis: 1 },
        vec![f32s(&[2, 3]), i32s(&[2, 2], vec![0, 1, 2, 3])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 3,
            index: 3,
            bound: 3
        }
    );
}

#[test]
fn dynamic_slice_window_out_of_range() {
    let s = |v: i32| i32s(&[], vec![v]);
    let f = fault(
        OpKind::DynamicSlice { sizes: vec![2, 2] },
        vec![f32s(&[4, 5]), s(1), s(4)],
    );
    assert_eq!(
        f,
        Fault::WindowOutOfRange {
            input: 2,
            axis: 1,
            start: 4,
            size: 2,
            dim: 5
        }
    );
    let f = fault(
        OpKind::DynamicSlice { sizes: vec![2, 2] },
        vec![f32s(&[4, 5]), s(-1), s(0)],
    );
    assert_eq!(
        f,
        Fault::WindowOutOfRange {
            input: 1,
            axis: 0,
            start: -1,
            size: 2,
            dim: 4
        }
    );
}

#[test]
fn dynamic_update_slice_window_out_of_range() {
    let s = |v: i32| i32s(&[], vec![v]);
    let f = fault(
        OpKind::DynamicUpdateSlice,
        vec![
            f32s(&[1, 3, 8, 4]),
            f32s(&[1, 3, 1, 4]),
            s(0),
            s(0),
            s(8),
            s(0),
        ],
    );
    assert_eq!(
        f,
        Fault::WindowOutOfRange {
            input: 4,
            axis: 2,
            start: 8,
            size: 1,
            dim: 8
        }
    );
}

#[test]
fn scatter_index_out_of_range() {
    let f = fault(
        OpKind::ScatterUpdate { axis: 0 },
        vec![f32s(&[3, 2]), i32s(&[2], vec![2, 3]), f32s(&[2, 2])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 1,
            element: 1,
            index: 3,
            bound: 3
        }
    );
}

#[test]
fn indexed_matmul_expert_out_of_range() {
    let f = fault(
        OpKind::IndexedMatMul,
        vec![f32s(&[3, 4]), f32s(&[2, 5, 4]), i32s(&[3], vec![1, 0, 2])],
    );
    assert_eq!(
        f,
        Fault::IndexOutOfRange {
            input: 2,
            element: 2,
            index: 2,
            bound: 2
        }
    );
}

#[test]
fn integer_division_by_zero() {
    let f = fault(
        OpKind::Binary(poot_graph_ir::BinaryOp::Div),
        vec![i32s(&[3], vec![1, 2, 3]), i32s(&[3], vec![1, 0, 1])],
    );
    assert_eq!(
        f,
        Fault::DivisionByZero {
            op: "div",
            element: 1
        }
    );
    let u = |v: Vec<u32>| HostTensor::u32([2], v).unwrap();
    let f = fault(
        OpKind::Binary(poot_graph_ir::BinaryOp::Rem),
        vec![u(vec![1, 2]), u(vec![3, 0])],
    );
    assert_eq!(
        f,
        Fault::DivisionByZero {
            op: "rem",
            element: 1
        }
    );
}

#[test]
fn argmax_over_an_empty_axis() {
    let f = fault(OpKind::ArgMax { axis: 1 }, vec![f32s(&[2, 0])]);
    assert_eq!(f, Fault::EmptyArgMax { axis: 1 });
}

#[test]
fn a_fault_names_the_value_label() {
    let b = Builder::new(TraceLimits::standard(1));
    let t = b
        .constant("table", TensorType::new(DType::F32, [2, 2]))
        .unwrap();
    let i = b.constant("ids", TensorType::new(DType::I32, [1])).unwrap();
    let y = b.scope("l3", |b| b.gather(t, i, 0)).unwrap();
    let g = b.finish(Outputs::new(y)).unwrap();
    let inputs = Inputs::new()
        .with_const("table", f32s(&[2, 2]))
        .with_const("ids", i32s(&[1], vec![9]));
    let err = eval(&g, &inputs, EvalOptions::default()).unwrap_err();
    let EvalError::Fault { label, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(label, "l3.gather");
    let msg = err.to_string();
    assert!(
        msg.contains("gather") && msg.contains("index 9") && msg.contains("[0, 2)"),
        "{msg}"
    );
}

#[test]
fn a_packed_format_without_decode() {
    let table = HostTensor::packed(GgmlType::Q8_1, [2, 32], vec![0u8; 80]).unwrap();
    let f = fault(
        OpKind::Gather { axis: 0 },
        vec![table.clone(), i32s(&[1], vec![1])],
    );
    assert_eq!(
        f,
        Fault::Decode(poot_eval::DecodeError::NoDecode {
            format: GgmlType::Q8_1
        })
    );
    assert!(matches!(
        table.to_f32_vec(),
        Err(poot_eval::TensorError::Decode { .. })
    ));
}

#[test]
fn packed_tensors_decode_to_f32() {
    // One Q8_0 block: scale 0.5 (f16 0x3800), values -2..=29.
    let mut bytes = vec![0x00, 0x38];
    bytes.extend((-2i8..30).map(|q| q as u8));
    let t = HostTensor::packed(GgmlType::Q8_0, [1, 32], bytes).unwrap();
    let want: Vec<f32> = (-2..30).map(|q| q as f32 * 0.5).collect();
    assert_eq!(t.to_f32_vec().unwrap(), want);
}
