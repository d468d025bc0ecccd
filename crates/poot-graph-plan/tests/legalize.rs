//! Splitting constants too large for one buffer into row chunks, checked against the CPU oracle:
//! the legalized graph, its chunks bound to byte ranges of the original constants, computes every
//! output and carried state bit for bit as the original graph does (the rewrite only moves where
//! rows are read from). Every registered family's fixture runs under a buffer limit below its
//! largest constant, and a graph with packed (Q8_0, Q4_K) and f16 tables runs with indices on
//! every chunk boundary. What chunking cannot fix is refused with the numbers.

#![allow(clippy::unwrap_used)]

use poot_eval::{EvalOptions, Evaluation, HostTensor, Inputs, eval};
use poot_graph_ir::ops;
use poot_graph_ir::{
    Builder, ComponentFormat, DType, GgmlType, Graph, Outputs, PackedFormat, Slot, TensorType,
    TraceLimits, component_const_name,
};
use poot_graph_plan::legalize::{Legalized, split_large_constants};
use poot_graph_plan::{BufferRole, PlanError, Target, compile};
use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::weights::ConstData;
use poot_models::{ModelKind, Registry, StepShape, StepSpec};

/// Every constant's stored bytes, by name.
type ConstBytes = Vec<(String, TensorType, Vec<u8>)>;

fn const_bytes(consts: &ConstBytes, name: &str) -> (TensorType, Vec<u8>) {
    let (_, ty, b) = consts.iter().find(|(n, _, _)| n == name).unwrap();
    (ty.clone(), b.clone())
}

/// Evaluates `graph` on the oracle with its constants (whole, or a chunk's byte range of a whole
/// one), the given slots and zero states.
fn run(
    graph: &Graph,
    legal: Option<&Legalized<'_>>,
    consts: &ConstBytes,
    slots: &[(Slot, HostTensor<'static>)],
) -> Evaluation<'static> {
    let mut inputs = Inputs::new();
    // A chunk's bytes, or the whole constant's.
    let bytes_of = |name: &str| match legal.and_then(|l| l.chunks.iter().find(|c| c.name == name)) {
        Some(c) => {
            let (_, whole) = const_bytes(consts, &c.source);
            whole[c.offset_bytes as usize..(c.offset_bytes + c.len_bytes) as usize].to_vec()
        }
        None => const_bytes(consts, name).1,
    };
    for (_, name, ty) in graph.consts() {
        if let DType::Components(format) = ty.dtype {
            let parts = format
                .components(ty.dims())
                .unwrap()
                .iter()
                .map(|c| {
                    let bytes = bytes_of(&component_const_name(name, c.name));
                    (c.name.to_string(), std::borrow::Cow::Owned(bytes))
                })
                .collect();
            inputs.set_const(
                name,
                HostTensor::components(format, ty.shape.clone(), parts).unwrap(),
            );
            continue;
        }
        let chunk = legal.and_then(|l| l.chunks.iter().find(|c| c.name == name));
        let bytes = match chunk {
            Some(c) => {
                let (_, whole) = const_bytes(consts, &c.source);
                let (a, b) = (
                    c.offset_bytes as usize,
                    (c.offset_bytes + c.len_bytes) as usize,
                );
                whole[a..b].to_vec()
            }
            None => const_bytes(consts, name).1,
        };
        inputs.set_const(name, HostTensor::from_le_bytes(ty.clone(), bytes).unwrap());
    }
    for (s, t) in slots {
        inputs.set_slot(s.clone(), t.clone());
    }
    for (_, name, ty) in graph.states() {
        let n = ty.shape.n_elems().unwrap();
        inputs.set_state(
            name,
            HostTensor::f32(ty.shape.clone(), vec![0.25f32; n]).unwrap(),
        );
    }
    let out = eval(graph, &inputs, EvalOptions::default()).unwrap();
    Evaluation {
        outputs: out.outputs,
        state: out.state,
        env: None,
    }
}

/// The original and the legalized graph agree bit for bit on every output and state.
fn assert_same(what: &str, a: &Evaluation<'_>, b: &Evaluation<'_>) {
    assert_eq!(a.outputs.len(), b.outputs.len(), "{what}: output count");
    for (i, (x, y)) in a.outputs.iter().zip(&b.outputs).enumerate() {
        assert_eq!(x.ty(), y.ty(), "{what}: output {i} type");
        assert!(
            x.to_le_bytes() == y.to_le_bytes(),
            "{what}: output {i} differs"
        );
    }
    assert_eq!(a.state.len(), b.state.len(), "{what}: state count");
    for ((n, x), (m, y)) in a.state.iter().zip(&b.state) {
        assert_eq!(n, m);
        assert!(
            x.to_le_bytes() == y.to_le_bytes(),
            "{what}: state `{n}` differs"
        );
    }
}

/// Splits `graph`'s constants under `limit_bytes`, checks the oracle agrees, and plans the
/// legalized graph: every chunk is a byte range of its constant within the limit.
fn check_split(
    what: &str,
    graph: &Graph,
    consts: &ConstBytes,
    slots: &[(Slot, HostTensor<'static>)],
    limit_bytes: u64,
) -> usize {
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = limit_bytes;
    let legal = split_large_constants(graph, &target).unwrap();
    assert!(!legal.chunks.is_empty(), "{what}: nothing was split");
    let want = run(graph, None, consts, slots);
    let got = run(&legal.graph, Some(&legal), consts, slots);
    assert_same(what, &want, &got);
    let plan = compile(graph, &target).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut parts = 0;
    for b in &plan.buffers {
        assert!(
            b.size_bytes <= limit_bytes,
            "{what}: a buffer of {} B",
            b.size_bytes
        );
        if let BufferRole::ConstPart {
            name,
            offset_bytes,
            len_bytes,
        } = &b.role
        {
            let (_, whole) = const_bytes(consts, name);
            assert!(offset_bytes + len_bytes <= whole.len() as u64);
            assert_eq!(b.size_bytes, len_bytes.div_ceil(4) * 4);
            parts += 1;
        }
    }
    assert_eq!(parts, legal.chunks.len(), "{what}: chunk buffers");
    parts
}

/// Token ids that hit the first and last rows and both sides of every chunk boundary of a
/// table split in two or three.
fn ids(vocab: usize, n: usize) -> Vec<i32> {
    let v = vocab as i32;
    let mut all = vec![
        0,
        v - 1,
        v / 2,
        v / 2 - 1,
        v / 3,
        v / 3 - 1,
        2 * v / 3,
        2 * v / 3 + 1,
        7,
    ];
    all.truncate(n);
    all
}

#[test]
fn every_fixture_family_computes_the_same_with_its_largest_constants_split() {
    let registry = Registry::builtin().unwrap();
    for f in FIXTURES {
        let ck = poot_load::load(&f.path(), &LoadOptions::default()).unwrap();
        let model = (registry.resolve(ck.config()).unwrap().build)(ck.config(), ck.store())
            .unwrap()
            .model;
        let (spec, tokens) = match model.config().kind {
            ModelKind::Decoder => (StepSpec::step(StepShape::new(1, 6, 16)), 6),
            ModelKind::Encoder => (StepSpec::encode(1, 6), 6),
        };
        let graph = model.trace(&spec, TraceLimits::standard(256)).unwrap();
        let mut consts: ConstBytes = Vec::new();
        for (_, name, ty) in graph.consts() {
            let bytes = match model.weights().const_data(name, ck.store()).unwrap() {
                ConstData::Bytes(b) => b.to_vec(),
                ConstData::Gathered(b) => b,
                ConstData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ConstData::Components(parts) => {
                    // Each component under its own name, as an executor binds it.
                    for (role, b) in parts {
                        let n = b.len();
                        consts.push((
                            poot_graph_ir::component_const_name(name, role),
                            TensorType::new(DType::U8, vec![n]),
                            b.to_vec(),
                        ));
                    }
                    continue;
                }
            };
            consts.push((name.to_string(), ty.clone(), bytes));
        }
        let vocab = model.config().vocab_size;
        let mut slots = Vec::new();
        for (_, slot, ty) in graph.slots() {
            let values: Vec<i32> = match slot.name() {
                "token" => ids(vocab, tokens),
                "pos" => (0..tokens as i32).collect(),
                "token_type" => (0..tokens as i32).map(|i| i % 2).collect(),
                _ => vec![1; tokens],
            };
            slots.push((
                slot.clone(),
                HostTensor::i32(ty.shape.clone(), values).unwrap(),
            ));
        }
        // Below the embedding table (the largest constant): it and any other table as large are
        // split in two or three.
        let largest = consts.iter().map(|(_, _, b)| b.len() as u64).max().unwrap();
        let limit = (largest / 2 + 64).div_ceil(4) * 4;
        // An expert stack is read by an indexed contraction (gpt-oss's `[E, in, out]` stacks by
        // the transpose feeding it), which the planner does not split: a stack over the limit is
        // refused, naming it.
        if let Some((stack, _, _)) = consts
            .iter()
            .find(|(n, _, b)| n.contains(".ffn.experts.") && b.len() as u64 > limit)
        {
            let mut target = Target::lavapipe_preset();
            target.limits.max_buffer_bytes = limit;
            match split_large_constants(&graph, &target) {
                Err(PlanError::ConstantNotRowSplittable { name, reader, .. }) => {
                    assert!(name.contains(".ffn.experts."), "{}: {name}", f.family);
                    assert!(
                        reader.starts_with("indexed_matmul") || reader.starts_with("transpose"),
                        "{}: {reader}",
                        f.family
                    );
                }
                Err(e) => panic!("{}: {stack} over the limit: {e}", f.family),
                Ok(_) => panic!("{}: {stack} over the limit was split", f.family),
            }
            println!("{}: expert stacks over {limit} B are refused", f.family);
            continue;
        }
        let parts = check_split(f.family, &graph, &consts, &slots, limit);
        println!(
            "{}: largest constant {largest} B, limit {limit} B, {parts} chunk buffers",
            f.family
        );
    }
}

/// A graph reading packed and f16 tables both ways: a contraction against each (the head) and a
/// row gather from each (the embedding), with indices on every chunk boundary.
#[test]
fn packed_and_half_tables_compute_the_same_split() {
    let b = Builder::new(TraceLimits::standard(64));
    let mut consts: ConstBytes = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    // Each table with rows on both sides of its chunk boundaries (chunks of 100, 32 and 100 rows).
    let tables = [
        (
            "q8",
            DType::Packed(GgmlType::Q8_0),
            300usize,
            64usize,
            [0i32, 99, 100, 199, 200, 299, 150],
        ),
        (
            "q4k",
            DType::Packed(GgmlType::Q4_K),
            64,
            256,
            [0, 31, 32, 63, 5, 40, 20],
        ),
        ("f16", DType::F16, 200, 40, [0, 99, 100, 199, 50, 150, 7]),
    ];
    let token_ids: Vec<i32> = vec![199, 0, 100, 99, 1, 198, 101];
    let token = b
        .slot(
            Slot::Token,
            TensorType::new(DType::I32, vec![token_ids.len()]),
        )
        .unwrap();
    let mut outs = Vec::new();
    let mut ws = Vec::new();
    for (name, dtype, rows, k, sel) in tables {
        let ty = TensorType::new(dtype, vec![rows, k]);
        let n_bytes = ty.size_bytes().unwrap() as usize;
        let bytes: Vec<u8> = match dtype {
            // f16 fields (block scales, and every element of an f16 table) as small finite values.
            DType::F16 => (0..rows * k)
                .flat_map(|_| {
                    half::f16::from_f32((next() % 2000) as f32 / 1000.0 - 1.0).to_le_bytes()
                })
                .collect(),
            DType::Packed(g) => {
                let mut v: Vec<u8> = (0..n_bytes).map(|_| next() as u8).collect();
                let fields = if g == GgmlType::Q4_K { 2 } else { 1 };
                for blk in v.chunks_mut(g.block_bytes()) {
                    for j in 0..fields {
                        let h = half::f16::from_f32((next() % 100) as f32 / 2000.0).to_le_bytes();
                        blk[2 * j..2 * j + 2].copy_from_slice(&h);
                    }
                }
                v
            }
            _ => unreachable!(),
        };
        consts.push((name.to_string(), ty.clone(), bytes));
        let w = b.constant(name, ty).unwrap();
        ws.push(w);
        let xs: Vec<f32> = (0..3 * k)
            .map(|_| (next() % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let x_name = format!("x_{name}");
        consts.push((
            x_name.clone(),
            TensorType::new(DType::F32, vec![3, k]),
            xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
        let x = b
            .constant(&x_name, TensorType::new(DType::F32, vec![3, k]))
            .unwrap();
        outs.push(ops::linear(&b, x, w, None).unwrap());
        let sel_name = format!("ids_{name}");
        consts.push((
            sel_name.clone(),
            TensorType::new(DType::I32, vec![sel.len()]),
            sel.iter().flat_map(|x: &i32| x.to_le_bytes()).collect(),
        ));
        let sel = b
            .constant(&sel_name, TensorType::new(DType::I32, vec![sel.len()]))
            .unwrap();
        outs.push(ops::embed(&b, w, sel).unwrap());
    }
    // The f16 table once more, through the token slot.
    outs.push(ops::embed(&b, ws[2], token).unwrap());
    let mut o = Outputs::new(outs[0]);
    for &t in &outs[1..] {
        o = o.and(t);
    }
    let graph = b.finish(o).unwrap();
    let slots = vec![(
        Slot::Token,
        HostTensor::i32(vec![token_ids.len()], token_ids).unwrap(),
    )];
    // 8 KiB: Q8_0 300x64 (20400 B) in 3 chunks, Q4_K 64x256 (9216 B) in 2, f16 200x40 (16000 B)
    // in 2.
    let parts = check_split("packed and f16 tables", &graph, &consts, &slots, 8192);
    assert_eq!(parts, 3 + 2 + 2);
}

/// FP8 (per-channel, per-tensor, and 128x128 blocks in whole 128-row tiles) and FP4 weights
/// split by rows:
/// each chunk's components are byte ranges of the whole weight's components.
#[test]
fn row_major_component_formats_compute_the_same_split() {
    let b = Builder::new(TraceLimits::standard(64));
    let mut consts: ConstBytes = Vec::new();
    let fp8 = |scaling, scale_type| {
        PackedFormat::Fp8(poot_formats::Fp8Format {
            scaling,
            scale_type,
        })
    };
    let weights = [
        (
            "fp8_block",
            fp8(
                poot_formats::Fp8Scaling::Block128,
                poot_formats::ScaleType::F32,
            ),
            300usize,
            64usize,
        ),
        (
            "fp8_channel",
            fp8(
                poot_formats::Fp8Scaling::PerChannel,
                poot_formats::ScaleType::BF16,
            ),
            200,
            64,
        ),
        ("fp4", PackedFormat::Fp4E2M1, 256, 128),
        (
            "fp8_tensor",
            fp8(
                poot_formats::Fp8Scaling::PerTensor,
                poot_formats::ScaleType::F32,
            ),
            200,
            64,
        ),
    ];
    let mut outs = Vec::new();
    for (i, (name, format, rows, k)) in weights.into_iter().enumerate() {
        let cf = ComponentFormat::new(format).unwrap();
        let parts = poot_formats::sample::components(
            format,
            poot_formats::MatrixShape::new(rows, k),
            i as u64,
        )
        .unwrap();
        for (role, bytes) in parts {
            let n = bytes.len();
            consts.push((
                component_const_name(name, role),
                TensorType::new(DType::U8, vec![n]),
                bytes,
            ));
        }
        let w = b
            .constant(name, TensorType::new(DType::Components(cf), vec![rows, k]))
            .unwrap();
        let x_name = format!("x_{name}");
        let xs: Vec<f32> = (0..2 * k).map(|j| (j % 17) as f32 / 8.0 - 1.0).collect();
        consts.push((
            x_name.clone(),
            TensorType::new(DType::F32, vec![2, k]),
            xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
        let x = b
            .constant(&x_name, TensorType::new(DType::F32, vec![2, k]))
            .unwrap();
        outs.push(ops::linear(&b, x, w, None).unwrap());
    }
    let graph = b
        .finish(Outputs::new(outs[0]).and(outs[1]).and(outs[2]).and(outs[3]))
        .unwrap();
    // 8 KiB: FP8 blocks 300x64 in tiles of 128 rows (3 chunks), FP8 per-channel 200x64 in 2,
    // FP4 256x128 (16 KiB packed) in 2, FP8 per-tensor 200x64 in 2 (each reading the one
    // scale); two components each.
    let parts = check_split("component formats", &graph, &consts, &[], 8192);
    assert_eq!(parts, 2 * (3 + 2 + 2 + 2));
}

/// GPTQ packs 8 output rows into each word: a GPTQ weight over the limit is refused by name.
#[test]
fn an_over_limit_gptq_weight_is_refused() {
    let b = Builder::new(TraceLimits::standard(64));
    let gptq = ComponentFormat::new(PackedFormat::Gptq(poot_formats::GptqFormat {
        group: poot_formats::GroupSize::Elems(std::num::NonZeroU32::new(32).unwrap()),
        act_order: false,
        zeros: poot_formats::GptqZeros::V1PlusOne,
    }))
    .unwrap();
    let w = b
        .constant(
            "w.head",
            TensorType::new(DType::Components(gptq), vec![512, 64]),
        )
        .unwrap();
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![1, 64]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = 8192;
    match compile(&graph, &target) {
        Err(PlanError::ConstantNotRowSplittable {
            name,
            needed_bytes,
            limit_bytes,
            ..
        }) => {
            assert_eq!(name, "w.head");
            // qweight: [64 / 8, 512] i32.
            assert_eq!((needed_bytes, limit_bytes), (16384, 8192));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_row_over_the_limit_is_refused_with_its_size() {
    let b = Builder::new(TraceLimits::standard(64));
    let w = b
        .constant("w", TensorType::new(DType::F32, vec![4, 1024]))
        .unwrap();
    // The slot is over the limit too, but the constants are legalized before values are placed.
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![1, 1024]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = 2048;
    let err = compile(&graph, &target).unwrap_err();
    assert_eq!(
        err,
        PlanError::ConstantRowTooLarge {
            backend: target.backend,
            name: "w".into(),
            row_bytes: 4096,
            limit_bytes: 2048,
        }
    );
    let message = err.to_string();
    println!("{message}");
    for part in ["`w`", "4096", "2048"] {
        assert!(message.contains(part), "`{message}` lacks `{part}`");
    }
}

#[test]
fn a_reader_that_is_not_by_rows_is_refused() {
    let b = Builder::new(TraceLimits::standard(64));
    // `x @ w` reads the stored rows of `w [64, 32]` as the contraction's K axis.
    let w = b
        .constant("w", TensorType::new(DType::F32, vec![64, 32]))
        .unwrap();
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![2, 64]),
        )
        .unwrap();
    let y = b.matmul(x, w, false).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = 4096;
    let err = compile(&graph, &target).unwrap_err();
    let PlanError::ConstantNotRowSplittable {
        name,
        needed_bytes,
        limit_bytes,
        reader,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(
        (name.as_str(), *needed_bytes, *limit_bytes),
        ("w", 8192, 4096)
    );
    assert!(reader.starts_with("matmul"), "{reader}");
    println!("{err}");
}

#[test]
fn a_refusal_in_an_entry_names_the_entry() {
    let b = Builder::new(TraceLimits::standard(64));
    let w = b
        .constant("w", TensorType::new(DType::F32, vec![4, 1024]))
        .unwrap();
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![1, 1024]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = 2048;
    let entry = "step (rows 1, tokens 1, capacity 64)";
    let err = poot_graph_plan::compile_entry(&graph, &target, entry).unwrap_err();
    let PlanError::InEntry { entry: e, source } = &err else {
        panic!("{err}");
    };
    assert_eq!(e, entry);
    assert!(matches!(**source, PlanError::ConstantRowTooLarge { .. }));
    assert_eq!(err.root(), source.as_ref());
    let message = err.to_string();
    assert!(
        message.starts_with(entry) && message.contains("4096"),
        "{message}"
    );
}

#[test]
fn an_index_outside_a_split_table_still_faults() {
    let b = Builder::new(TraceLimits::standard(64));
    let ty = TensorType::new(DType::F32, vec![100, 16]);
    let w = b.constant("w", ty.clone()).unwrap();
    let idx = b
        .slot(Slot::Token, TensorType::new(DType::I32, vec![3]))
        .unwrap();
    let y = ops::embed(&b, w, idx).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let mut target = Target::lavapipe_preset();
    target.limits.max_buffer_bytes = 2048; // 32 rows a chunk: 4 chunks of 25
    let legal = split_large_constants(&graph, &target).unwrap();
    assert_eq!(legal.chunks.len(), 4);
    let bytes: Vec<u8> = (0..1600).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let consts: ConstBytes = vec![("w".into(), ty, bytes)];
    for (ids, faults) in [
        (vec![0, 99, 50], false),
        (vec![0, 100, 1], true),
        (vec![-1, 3, 1], true),
        (vec![24, 25, 75], false),
    ] {
        let mut results = Vec::new();
        for (g, l) in [(&graph, None), (legal.graph.as_ref(), Some(&legal))] {
            let mut inputs = Inputs::new();
            for (_, name, ty) in g.consts() {
                let chunk =
                    l.and_then(|l: &Legalized<'_>| l.chunks.iter().find(|c| c.name == name));
                let (_, whole) = const_bytes(&consts, chunk.map_or(name, |c| c.source.as_str()));
                let range = chunk.map_or(0..whole.len(), |c| {
                    c.offset_bytes as usize..(c.offset_bytes + c.len_bytes) as usize
                });
                inputs.set_const(
                    name,
                    HostTensor::from_le_bytes(ty.clone(), whole[range].to_vec()).unwrap(),
                );
            }
            inputs.set_slot(Slot::Token, HostTensor::i32(vec![3], ids.clone()).unwrap());
            results
                .push(eval(g, &inputs, EvalOptions::default()).map(|o| o.outputs[0].to_le_bytes()));
        }
        assert_eq!(results[0].is_err(), faults, "{ids:?}: original");
        assert_eq!(results[1].is_err(), faults, "{ids:?}: split");
        if !faults {
            assert_eq!(
                results[0].as_ref().unwrap(),
                results[1].as_ref().unwrap(),
                "{ids:?}"
            );
        }
    }
}

/// A table cut into 20 chunks: the contraction's concatenation and the gather's select combine
/// them in trees, and the planner computes inner nodes apart so no kernel binds more buffers
/// than the target allows (16).
#[test]
fn a_table_in_many_chunks_plans_within_the_bindings() {
    let b = Builder::new(TraceLimits::standard(64));
    let ty = TensorType::new(DType::F32, vec![160, 256]);
    let w = b.constant("w", ty.clone()).unwrap();
    let x = b
        .constant("x", TensorType::new(DType::F32, vec![2, 256]))
        .unwrap();
    let idx = b
        .slot(Slot::Token, TensorType::new(DType::I32, vec![4]))
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let rows = ops::embed(&b, w, idx).unwrap();
    let graph = b.finish(Outputs::new(y).and(rows)).unwrap();
    let w_bytes: Vec<u8> = (0..160 * 256)
        .flat_map(|i| ((i % 97) as f32 / 97.0 - 0.5).to_le_bytes())
        .collect();
    let x_bytes: Vec<u8> = (0..512)
        .flat_map(|i| ((i % 13) as f32 * 0.1).to_le_bytes())
        .collect();
    let consts: ConstBytes = vec![
        ("w".into(), ty, w_bytes),
        (
            "x".into(),
            TensorType::new(DType::F32, vec![2, 256]),
            x_bytes,
        ),
    ];
    let slots = vec![(
        Slot::Token,
        HostTensor::i32(vec![4], vec![159, 0, 80, 79]).unwrap(),
    )];
    // 8 rows (8 KiB) a chunk.
    let parts = check_split("20 chunks", &graph, &consts, &slots, 8192);
    assert_eq!(parts, 20);
}
