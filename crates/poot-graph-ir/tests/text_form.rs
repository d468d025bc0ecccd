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

#[test]
fn component_constants_render_their_layout() {
    let b = Builder::new(TraceLimits::standard(4));
    let awq = ComponentFormat::new(PackedFormat::Awq(poot_formats::AwqFormat {
        group: poot_formats::GroupSize::Elems(std::num::NonZeroU32::new(64).unwrap()),
    }))
    .unwrap();
    let fp8 = ComponentFormat::new(PackedFormat::Fp8(poot_formats::Fp8Format {
        scaling: poot_formats::Fp8Scaling::PerChannel,
        scale_type: poot_formats::ScaleType::F32,
    }))
    .unwrap();
    let x = b
        .slot_named("x", TensorType::new(DType::F32, vec![1, 128]))
        .unwrap();
    let w = b
        .constant(
            "w.a",
            TensorType::new(DType::Components(awq), vec![16, 128]),
        )
        .unwrap();
    let v = b
        .constant("w.b", TensorType::new(DType::Components(fp8), vec![8, 128]))
        .unwrap();
    let y = b.matmul(x, w, true).unwrap();
    let z = b.matmul(x, v, true).unwrap();
    let g = b.finish(Outputs::new(y).and(z)).unwrap();
    let text = g.to_string();
    let want = "const %1=w.a:awq_int4{g64}[16,128] %2=w.b:fp8_e4m3{channel,f32}[8,128]\n\
                slot %0=x:f32[1,128]\n  \
                %3:f32[1,16] = matmul[rhs^T] %0 %1  # matmul\n  \
                %4:f32[1,8] = matmul[rhs^T] %0 %2  # matmul\n\
                out (%3, %4)\n";
    assert_eq!(text, want, "\n{text}");
    assert_eq!(component_const_name("w.a", "qweight"), "w.a:qweight");
}

#[test]
fn collectives_render_their_group() {
    let b = Builder::new(TraceLimits::standard(4));
    let x = b
        .slot_named("x", TensorType::new(DType::I32, vec![1, 2]))
        .unwrap();
    let y = b.broadcast_from(x, 1, 2).unwrap();
    let g = b.finish(Outputs::new(y)).unwrap();
    let text = g.to_string();
    assert!(
        text.contains("%1:i32[1,2] = broadcast_from[root=1 ranks=2] %0"),
        "\n{text}"
    );
}
