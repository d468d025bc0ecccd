//! The text form of a small graph, checked line by line.

use poot_graph_ir::*;

#[test]
fn a_small_graph_renders_like_a_jaxpr() {
    let b = Builder::new(TraceLimits::standard(4));
    let w = b
        .constant("w.q", TensorType::new(DType::BF16, vec![4, 8]))
        .unwrap();
    let pos = b
        .slot(Slot::Pos, TensorType::new(DType::I32, vec![1, 1]))
        .unwrap();
    let kv = b
        .state_input("kv.l0", TensorType::new(DType::F32, vec![2, 8]))
        .unwrap();
    let y = b
        .scope("l0", |b| {
            let x = b.reshape(kv, [2, 8])?;
            let y = b.matmul(x, w, true)?;
            b.name(y, "q")
        })
        .unwrap();
    let kv2 = b.exp(kv).unwrap();
    let g = b
        .finish(Outputs::new(y).and(pos).with_state(&[(kv, kv2)]))
        .unwrap();
    let text = g.to_string();
    let want = "const %0=w.q:bf16[4,8]\n\
                slot %1=pos:i32[1,1]\n\
                state %2=kv.l0:f32[2,8]\n  \
                %3:f32[2,8] = reshape[[2,8]] %2  # l0.reshape\n  \
                %4:f32[2,4] = matmul[rhs^T] %3 %0  # l0.q\n  \
                %5:f32[2,8] = exp %2  # exp\n\
                out (%4, %1) state %2 <- %5\n";
    assert_eq!(text, want, "\n{text}");
    assert_eq!(analysis::dispatch_count(&g), 2);
    assert_eq!(
        analysis::op_histogram(&g),
        vec![("exp", 1), ("matmul", 1), ("reshape", 1)]
    );
}
