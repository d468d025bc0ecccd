//! Reference models at their real dimensions plan for the PTX preset: each is built from its
//! published config and a synthetic tensor index (shapes and stored types derived from the
//! config, no bytes), traced for a decode step and a 512-token prefill chunk over a cache of the
//! model's whole context (Gemma 3 27B: half of it, see below), and compiled. A device whose
//! single-buffer limit is below the 8B's embedding table gets the table and the head split into
//! row chunks. What exceeds the device's memory is refused with the numbers: Gemma 3 27B over its
//! whole context on the H200, and a 27B model in F32 on lavapipe.
//!
//! The same models' paged steps (decode of one and eight rows, a prefill chunk, over a pool of
//! the whole context) plan for the PTX and wgpu presets wherever their contiguous steps do.
//!
//! Run with `--nocapture` to see each graph's dispatch and kernel counts and the time spent.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::reference_models::*;
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{BufferRole, DeviceWords, Plan, PlanError, Target, compile};
use poot_models::{KvLayout, KvType, StepShape, StepSpec};

/// Bytes of weights, states and scratch in a plan.
fn buffer_bytes(plan: &Plan) -> (u64, u64, u64) {
    let mut sums = (0, 0, 0);
    for b in &plan.buffers {
        match b.role {
            BufferRole::Const { .. } | BufferRole::ConstPart { .. } | BufferRole::Table { .. } => {
                sums.0 += b.size_bytes
            }
            BufferRole::State { .. } => sums.1 += b.size_bytes,
            BufferRole::Scratch => sums.2 += b.size_bytes,
            BufferRole::Slot { .. } => {}
        }
    }
    sums
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Traces `r`'s decode step and a prefill chunk over `capacity` positions (its whole context when
/// `None`) and plans both for the PTX preset; prints each graph's counts and times.
fn plans_at_real_dimensions(r: Reference, capacity: Option<usize>) {
    let t0 = Instant::now();
    let model = build(&r);
    let build_time = t0.elapsed();
    let capacity = capacity.unwrap_or(model.config().max_positions);
    let target = Target::ptx_preset();
    println!(
        "{}: built in {:.2?} ({} layers, context {capacity})",
        r.name,
        build_time,
        model.config().n_layers
    );
    for (what, tokens) in [("decode", 1), ("prefill", PREFILL_TOKENS)] {
        let spec = StepSpec::step(StepShape::new(1, tokens, capacity));
        let t = Instant::now();
        let graph = model
            .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
            .unwrap_or_else(|e| panic!("{} {what}: trace: {e}", r.name));
        let trace_time = t.elapsed();
        let t = Instant::now();
        let plan = compile(&graph, &target)
            .unwrap_or_else(|e| panic!("{} {what} on {}: {e}", r.name, target.backend));
        let plan_time = t.elapsed();
        for k in &plan.kernels {
            k.validate().unwrap();
        }
        for d in &plan.dispatches {
            assert_eq!(d.args.len(), plan.kernels[d.kernel].params.len());
            assert!(d.grid[0] >= 1 && d.grid[0] <= target.limits.max_groups_x);
        }
        assert_eq!(plan.states.len(), 2 * model.config().n_layers);
        assert_eq!(plan.states.len(), graph.states().count());
        let m = plan.memory();
        println!(
            "{} {what} (tokens {tokens}, capacity {capacity}) on {}: {} eqns, {} dispatches, \
             {} kernels; consts {:.2} GiB, states {:.2} GiB, scratch {:.2} GiB; \
             trace {trace_time:.2?}, plan {plan_time:.2?}",
            r.name,
            target.backend,
            graph.eqns().len(),
            plan.dispatches.len(),
            plan.kernels.len(),
            gib(m.weight_bytes),
            gib(m.state_bytes),
            gib(m.scratch_bytes),
        );
    }
    let total: Duration = t0.elapsed();
    println!("{}: total {total:.2?}", r.name);
}

/// Tokens per block of the paged pools below.
const BLOCK_TOKENS: usize = 16;

/// Traces `r`'s paged steps over a pool of the whole context plus one scratch block (decode of
/// one and of eight rows, a prefill chunk) and plans them for the PTX and wgpu presets. The
/// paged layout plans wherever the contiguous one does for the same rows and tokens (on PTX,
/// every graph). Where a preset refuses the contiguous graph, the paged graph is refused with
/// the same error, or plans because the refusal was the contiguous cache itself (eight rows of
/// a whole-context cache in one buffer), which the shared pool replaces. Each row's cache is
/// read through the block table inside the attention contractions, so paging adds no scratch
/// for the gathered cache.
fn paged_plans_at_real_dimensions(r: Reference) {
    let model = build(&r);
    let capacity = model.config().max_positions;
    let kv = KvLayout::Paged {
        block_tokens: BLOCK_TOKENS,
        blocks: capacity / BLOCK_TOKENS + 1,
    };
    let trace = |shape: StepShape| {
        model
            .trace(
                &StepSpec::step(shape),
                TraceLimits::standard(MAX_STEP_TOKENS),
            )
            .unwrap_or_else(|e| panic!("{} {shape:?}: trace: {e}", r.name))
    };
    for target in [Target::ptx_preset(), Target::wgpu_preset()] {
        for (what, rows, tokens) in [
            ("decode", 1, 1),
            ("8-row decode", 8, 1),
            ("prefill", 1, PREFILL_TOKENS),
        ] {
            let shape = StepShape::new(rows, tokens, capacity);
            let paged = trace(shape.with_kv(kv));
            let t = Instant::now();
            let got = compile(&paged, &target);
            let plan_time = t.elapsed();
            let want = compile(&trace(shape), &target);
            match (&got, &want) {
                (Ok(plan), Ok(contiguous)) => {
                    for k in &plan.kernels {
                        k.validate().unwrap();
                        // The causal mask bounds the prompt's walk over the cache.
                        if k.name.starts_with("attention_mma") {
                            assert!(
                                k.shared.iter().any(|s| s.name == "bound"),
                                "{} paged {what}: {} walks the whole cache",
                                r.name,
                                k.name
                            );
                        }
                    }
                    assert_eq!(plan.states.len(), 2 * model.config().n_layers);
                    let (_, state_bytes, scratch_bytes) = buffer_bytes(plan);
                    let contiguous_scratch = buffer_bytes(contiguous).2;
                    // No gathered copy of the cache: at most a few index words more.
                    assert!(
                        scratch_bytes <= contiguous_scratch + (64 << 10),
                        "{} paged {what} on {}: scratch {scratch_bytes} B, contiguous \
                         {contiguous_scratch} B",
                        r.name,
                        target.backend
                    );
                    println!(
                        "{} paged {what} on {}: {} dispatches; pool {:.2} GiB, scratch {:.2} GiB; \
                         plan {plan_time:.2?}",
                        r.name,
                        target.backend,
                        plan.dispatches.len(),
                        gib(state_bytes),
                        gib(scratch_bytes),
                    );
                }
                (Ok(_), Err(w)) => {
                    // Its per-row cache is over one buffer, or over the device's memory.
                    let contiguous_cache = matches!(
                        w.root(),
                        PlanError::ValueTooLarge { label, .. } if label.starts_with("kv.")
                    ) || matches!(w.root(), PlanError::OutOfMemory { .. });
                    assert!(
                        contiguous_cache,
                        "{} paged {what} on {} plans, contiguous refused for another reason: {w}",
                        r.name, target.backend
                    );
                    println!(
                        "{} paged {what} on {}: plans; the contiguous cache is refused: {w}",
                        r.name, target.backend
                    );
                }
                (Err(g), Err(w)) => {
                    // The same refusal (a memory refusal's totals differ by the two caches), or
                    // a pool over the device's memory where the contiguous cache is over one
                    // buffer.
                    let same = std::mem::discriminant(g.root()) == std::mem::discriminant(w.root());
                    let memory = matches!(g.root(), PlanError::OutOfMemory { .. });
                    assert!(
                        same || memory,
                        "{} paged {what} on {}: {g} / {w}",
                        r.name,
                        target.backend
                    );
                    println!(
                        "{} paged {what} on {}: refused as contiguous is: {g}",
                        r.name, target.backend
                    );
                }
                (Err(g), Ok(_)) => panic!(
                    "{} paged {what} on {} is refused where contiguous plans: {g}",
                    r.name, target.backend
                ),
            }
            if target.backend == Target::ptx_preset().backend {
                // Everything plans on the H200 but a pool over its memory (a 27B model's whole
                // context).
                assert!(
                    match &got {
                        Ok(_) => true,
                        Err(e) => matches!(e.root(), PlanError::OutOfMemory { .. }),
                    },
                    "{} paged {what} on ptx: {:?}",
                    r.name,
                    got.err()
                );
            }
        }
    }
}

#[test]
fn qwen2_5_0_5b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(qwen2_5_0_5b());
}

#[test]
fn qwen3_0_6b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(qwen3_0_6b());
}

#[test]
fn llama_3_1_8b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(llama_3_1_8b());
}

#[test]
fn llama_3_1_8b_q4_k_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(llama_3_1_8b_q4_k());
}

#[test]
fn gemma3_27b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(gemma3_27b());
}

#[test]
fn qwen2_5_0_5b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen2_5_0_5b(), None);
}

#[test]
fn qwen3_0_6b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen3_0_6b(), None);
}

#[test]
fn llama_3_1_8b_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b(), None);
}

#[test]
fn llama_3_1_8b_q4_k_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b_q4_k(), None);
}

#[test]
fn qwen3_30b_a3b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen3_30b_a3b(), None);
}

#[test]
fn mixtral_8x7b_plans_at_real_dimensions() {
    plans_at_real_dimensions(mixtral_8x7b(), None);
}

/// MXFP4 expert stacks bound packed (12.9 GiB of weights), over the whole 131072-position
/// context. Its attention adds a learned sink to each softmax, which the fused kernels take: a
/// 512-token prefill never forms its `64 x 512 x 131072` scores (they passed 32-bit indexing,
/// and took 12.1 GiB of scratch over 32768 positions), so its scratch stays under 1 GiB.
#[test]
fn gpt_oss_20b_plans_at_real_dimensions() {
    plans_at_real_dimensions(gpt_oss_20b(), None);
    let model = build(&gpt_oss_20b());
    let graph = trace_step(model.as_ref(), PREFILL_TOKENS, 131072);
    let plan = compile(&graph, &Target::ptx_preset()).unwrap();
    let (_, _, scratch) = buffer_bytes(&plan);
    assert!(scratch < 1 << 30, "scratch {:.2} GiB", gib(scratch));
}

/// Mixtral-8x22B's expert stacks (8 x 16384 x 6144 BF16, 1.5 GiB each) are over wgpu's
/// single-buffer limit (1.25 GiB): refused there, naming the stack, as the spec says.
#[test]
fn mixtral_8x22b_is_refused_on_wgpus_buffer_limit() {
    let r = mixtral_8x22b();
    let model = build(&r);
    let graph = trace_decode(model.as_ref());
    let err = compile(&graph, &Target::wgpu_preset()).unwrap_err();
    println!("{}: {err}", r.name);
    assert!(
        matches!(
            err.root(),
            PlanError::ConstantNotRowSplittable { name, needed_bytes, .. }
                if name.contains("experts") && *needed_bytes == 8 * 16384 * 6144 * 2
        ),
        "{err}"
    );
}

/// GPTQ int4 (group 128, act-order) projections with zero-byte components: every projection is
/// one component-format constant decoded inside its contraction, and the weights take about a
/// third of the BF16 8B's.
#[test]
fn llama_3_1_8b_gptq_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b_gptq(), None);
    let model = build(&llama_3_1_8b_gptq());
    let graph = model
        .trace(
            &StepSpec::step(StepShape::new(1, 1, 4096)),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap();
    let plan = compile(&graph, &Target::ptx_preset()).unwrap();
    // Four buffers (qweight, qzeros, scales, g_idx) for each of 7 x 32 projections.
    let components = plan
        .buffers
        .iter()
        .filter(|b| matches!(&b.role, BufferRole::Const { name } if name.contains(':')))
        .count();
    assert_eq!(components, 4 * 7 * 32);
    let down = plan
        .buffers
        .iter()
        .find(|b| matches!(&b.role, BufferRole::Const { name } if name == "w.l0.ffn.down:qweight"))
        .unwrap();
    // qweight [14336 / 8, 4096] i32.
    assert_eq!(down.size_bytes, 14336 / 8 * 4096 * 4);
    let bf16 = compile(
        &trace_decode(build(&llama_3_1_8b()).as_ref()),
        &Target::ptx_preset(),
    )
    .unwrap();
    let (packed_bytes, dense_bytes) = (plan.memory().weight_bytes, bf16.memory().weight_bytes);
    println!(
        "Llama-3.1-8B-GPTQ weights {:.2} GiB (BF16: {:.2} GiB)",
        gib(packed_bytes),
        gib(dense_bytes)
    );
    assert!(
        packed_bytes < dense_bytes / 2,
        "{packed_bytes} vs {dense_bytes}"
    );
}

fn trace_decode(model: &dyn poot_models::Model) -> poot_graph_ir::Graph {
    trace_step(model, 1, 4096)
}

/// One row's step of `tokens` over `capacity` positions.
fn trace_step(
    model: &dyn poot_models::Model,
    tokens: usize,
    capacity: usize,
) -> poot_graph_ir::Graph {
    model
        .trace(
            &StepSpec::step(StepShape::new(1, tokens, capacity)),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap()
}

/// Half the context: the whole 131072-position f32 KV cache does not fit the H200 (the next
/// test).
#[test]
fn gemma3_27b_plans_at_real_dimensions() {
    plans_at_real_dimensions(gemma3_27b(), Some(65536));
}

/// Gemma 3 27B over its whole context: 62 layers of f32 keys and values for 131072 positions
/// (124 GiB) beside 53 GiB of BF16 weights exceed the H200's 139 GiB; refused before anything
/// is allocated, with each part's size.
#[test]
fn gemma3_27b_over_its_whole_context_is_refused_for_memory() {
    let model = build(&gemma3_27b());
    let capacity = model.config().max_positions;
    let graph = model
        .trace(
            &StepSpec::step(StepShape::new(1, 1, capacity)),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap();
    let target = Target::ptx_preset();
    let err = compile(&graph, &target).unwrap_err();
    println!("Gemma-3-27B decode over {capacity} positions: {err}");
    let PlanError::OutOfMemory {
        needed_bytes,
        weight_bytes,
        state_bytes,
        memory_bytes,
        ..
    } = err
    else {
        panic!("{err}");
    };
    // Keys and values: 62 layers x 2 x 16 heads x 128 x 131072 positions x 4 B.
    assert_eq!(state_bytes, 62 * 2 * 16 * 128 * 131072 * 4);
    assert_eq!(memory_bytes, 139 << 30);
    assert!(needed_bytes > memory_bytes && weight_bytes > 50 << 30);
    for part in [state_bytes, memory_bytes, needed_bytes] {
        assert!(err.to_string().contains(&part.to_string()));
    }
}

/// A 27B model stored in F32 (its seven projections; embedding and norms BF16) on lavapipe:
/// every large weight is split into row chunks that fit the 128 MiB binding, and the whole is
/// refused against the 2 GiB heap lavapipe reports.
#[test]
fn a_27b_model_in_f32_is_refused_for_memory_on_lavapipe() {
    let mut r = gemma3_27b();
    r.projections = poot_formats::StoredType::Dense(poot_formats::DenseType::F32).into();
    let model = build(&r);
    let graph = model
        .trace(
            &StepSpec::step(StepShape::new(1, 1, 4096)),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap();
    let target = Target::lavapipe_preset();
    let err = compile(&graph, &target).unwrap_err();
    println!("Gemma-3-27B F32 decode on lavapipe: {err}");
    let PlanError::OutOfMemory {
        weight_bytes,
        memory_bytes,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(*memory_bytes, 2 << 30);
    assert!(*weight_bytes > 100 << 30, "{weight_bytes}");
}

/// The 8B's decode graph on a device whose largest buffer (512 MiB) is below its BF16 embedding
/// table and head (128256 x 4096 x 2 B each): both are split into two row chunks of 64128 rows,
/// each a byte range of the stored table. The full-context KV cache of one layer is exactly
/// 512 MiB and fits.
#[test]
fn llama_3_1_8b_splits_its_embedding_and_head_below_the_buffer_limit() {
    let model = build(&llama_3_1_8b());
    let capacity = model.config().max_positions;
    let spec = StepSpec::step(StepShape::new(1, 1, capacity));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let limit_bytes: u64 = 512 << 20;
    let chunk_bytes: u64 = 64_128 * 4096 * 2;
    for mut target in [Target::ptx_preset(), Target::wgpu_preset()] {
        target.limits.max_buffer_bytes = limit_bytes;
        // The 8B does not fit a 16 GiB card at this context: memory is another test's subject.
        target.limits.memory_bytes = None;
        let plan = compile(&graph, &target).unwrap_or_else(|e| panic!("{}: {e}", target.backend));
        for b in &plan.buffers {
            assert!(
                b.size_bytes <= limit_bytes,
                "{:?}: {} B",
                b.role,
                b.size_bytes
            );
        }
        for table in ["w.embed", "w.head"] {
            let mut parts: Vec<(u64, u64)> = plan
                .buffers
                .iter()
                .filter_map(|b| match &b.role {
                    BufferRole::ConstPart {
                        name,
                        offset_bytes,
                        len_bytes,
                    } if name == table => Some((*offset_bytes, *len_bytes)),
                    _ => None,
                })
                .collect();
            parts.sort();
            assert_eq!(
                parts,
                vec![(0, chunk_bytes), (chunk_bytes, chunk_bytes)],
                "{}: {table}",
                target.backend
            );
        }
        assert!(
            !plan
                .buffers
                .iter()
                .any(|b| matches!(&b.role, BufferRole::Const { name } if name == "w.embed" || name == "w.head"))
        );
    }
}

/// An f16 KV cache at real dimensions: Qwen3 0.6B (keys through a norm before the write) and
/// Llama 3.1 8B (GQA 4; on PTX only, its bf16 weights alone fill the wgpu preset's memory), a
/// paged decode of 8 rows and a prefill chunk. The pool is half the f32 pool's bytes, the state words are f16 pairs, the steps
/// keep the f32 cache's dispatch count and add no scratch (no widened copy of the cache:
/// attention reads the halves in place), each layer writes its keys and values a word (two
/// halves) per thread, and on PTX the decode attention's lanes read a word per two features.
#[test]
fn an_f16_kv_cache_halves_the_pool_and_adds_no_dispatch() {
    let both = vec![Target::ptx_preset(), Target::wgpu_preset()];
    for (r, targets) in [
        (qwen3_0_6b(), both),
        (llama_3_1_8b(), vec![Target::ptx_preset()]),
    ] {
        let model = build(&r);
        let capacity = 4096;
        let kv = KvLayout::Paged {
            block_tokens: BLOCK_TOKENS,
            blocks: 8 * capacity / BLOCK_TOKENS + 1,
        };
        for target in targets {
            for (rows, tokens) in [(8, 1), (1, PREFILL_TOKENS)] {
                let plan = |kv_type: KvType| {
                    let shape = StepShape::new(rows, tokens, capacity)
                        .with_kv(kv)
                        .with_kv_type(kv_type);
                    let graph = model
                        .trace(
                            &StepSpec::step(shape),
                            TraceLimits::standard(MAX_STEP_TOKENS),
                        )
                        .unwrap();
                    compile(&graph, &target).unwrap()
                };
                let (full, half) = (plan(KvType::F32), plan(KvType::F16));
                let what = format!("{} {rows}x{tokens} on {}", r.name, target.backend);
                let (_, full_states, full_scratch) = buffer_bytes(&full);
                let (_, half_states, half_scratch) = buffer_bytes(&half);
                assert_eq!(2 * half_states, full_states, "{what}");
                assert!(
                    half_scratch <= full_scratch,
                    "{what}: scratch {half_scratch} vs {full_scratch}"
                );
                assert_eq!(half.dispatches.len(), full.dispatches.len(), "{what}");
                assert!(
                    half.states
                        .iter()
                        .all(|(_, v)| v.words == DeviceWords::F16Pairs),
                    "{what}"
                );
                let writes = half
                    .kernels
                    .iter()
                    .filter(|k| k.name.starts_with("scatter"))
                    .count();
                assert!(writes >= 1, "{what}: no scatter kernel");
                // The decode attention's lanes each read both halves of a stored word: its
                // second feature of a pair is the first's neighbour (`2 * lane + 1`).
                if rows > 1 && target.backend == Target::ptx_preset().backend {
                    let decode = half
                        .kernels
                        .iter()
                        .find(|k| k.name.starts_with("attention_decode"))
                        .unwrap_or_else(|| panic!("{what}: no decode attention"));
                    let cuda = poot_kernel::render::render_cuda(decode).unwrap();
                    assert!(
                        cuda.contains("poot_load_f16") && cuda.contains("* 2u) + 1u)"),
                        "{what}: the decode attention does not read word pairs"
                    );
                }
                for k in half
                    .kernels
                    .iter()
                    .filter(|k| k.name.starts_with("scatter"))
                {
                    assert!(
                        k.params.iter().any(|p| p.word == poot_kernel::Word::U32
                            && p.access == poot_kernel::Access::ReadWrite),
                        "{what}: {} writes no u32 words",
                        k.name
                    );
                }
            }
        }
    }
}

/// Every statement of `body`, nested ones included.
fn statements(body: &[poot_kernel::Stmt]) -> Vec<&poot_kernel::Stmt> {
    use poot_kernel::Stmt;
    let mut out = Vec::new();
    for s in body {
        out.push(s);
        match s {
            Stmt::If {
                then, otherwise, ..
            } => {
                out.extend(statements(then));
                out.extend(statements(otherwise));
            }
            Stmt::For { body, .. } => out.extend(statements(body)),
            _ => {}
        }
    }
    out
}

#[test]
fn batched_steps_multiply_block_weights_in_f16_tiles_decoded_per_slice() {
    use poot_kernel::Stmt;
    let r = llama_3_1_8b_q4_k();
    let model = build(&r);
    let capacity = 1024;
    let kv = KvLayout::Paged {
        block_tokens: BLOCK_TOKENS,
        blocks: 64 * capacity / BLOCK_TOKENS + 1,
    };
    // The library from 128 rows, so 64 rows are tiled too (by default they are the library's).
    let mut on = Target::ptx_preset();
    on.tuning.library_packed_rows = 128;
    let mut off = on.clone();
    off.tuning.block_tiles = poot_graph_plan::BlockTiles::Off;
    // 16 rows take 32-row tiles, 64 rows 64-row tiles: staged as pairs of halves, both fit
    // slices of 64 elements beside two weight slices.
    for (rows, gate_up_slice) in [(16, 64), (64, 64)] {
        let shape = StepShape::new(rows, 1, capacity).with_kv(kv);
        let graph = model
            .trace(
                &StepSpec::step(shape),
                TraceLimits::standard(MAX_STEP_TOKENS),
            )
            .unwrap();
        let plan = compile(&graph, &on).unwrap();
        let before = compile(&graph, &off).unwrap();
        let what = format!("{} {rows} rows", r.name);
        // No decoded copy of any weight (the largest would be 1.9 GB of f32 words): the new
        // scratch is the left sides computed once and the partial sums of split tiles.
        let (weights, _, scratch) = buffer_bytes(&plan);
        let (before_weights, _, before_scratch) = buffer_bytes(&before);
        assert_eq!(weights, before_weights, "{what}");
        assert!(
            scratch <= before_scratch + (64 << 20),
            "{what}: scratch {scratch} B against {before_scratch} B"
        );
        // At most a left side's kernel and a combining kernel more per projection.
        assert!(
            plan.dispatches.len() <= before.dispatches.len() + 8 * model.config().n_layers + 4,
            "{what}: {} dispatches against {}",
            plan.dispatches.len(),
            before.dispatches.len()
        );
        let tiled: Vec<_> = plan
            .kernels
            .iter()
            .filter(|k| k.name.starts_with("gemm") && !k.name.starts_with("gemm_combine"))
            .collect();
        // Q, K and V; the output projection; gate and up; down: per layer.
        let launches = plan
            .dispatches
            .iter()
            .filter(|d| plan.kernels[d.kernel].name.starts_with("gemm_split"))
            .count()
            + plan
                .dispatches
                .iter()
                .filter(|d| plan.kernels[d.kernel].name.starts_with("gemm_epilogue"))
                .count();
        assert!(
            launches >= 4 * model.config().n_layers,
            "{what}: {launches} tiled launches"
        );
        for k in &tiled {
            k.validate().unwrap();
            let body = statements(&k.body);
            assert!(
                body.iter().any(|s| matches!(
                    s,
                    Stmt::MmaHalf {
                        half: poot_kernel::Half::F16,
                        ..
                    }
                )),
                "{what}: {} multiplies no f16 products",
                k.name
            );
            assert!(
                !body.iter().any(|s| matches!(s, Stmt::MmaTf32 { .. })),
                "{what}: {} still takes tf32 products",
                k.name
            );
            // Slices of `tk` elements packed in pairs and 4 words of padding a weight column.
            let slice = k
                .shared
                .iter()
                .find(|a| a.name == "tile_b1")
                .map(|a| (a.len / 64 - 4) * 2);
            if let Some(tk) = slice {
                assert_eq!(tk, gate_up_slice, "{what}: {}", k.name);
            }
            poot_kernel::render::render_cuda(k).unwrap();
        }
        println!(
            "{what}: {} tiled kernels, scratch {:.1} MiB (tf32 tiles: {:.1} MiB)",
            tiled.len(),
            scratch as f64 / f64::from(1 << 20),
            before_scratch as f64 / f64::from(1 << 20)
        );
    }
}

/// Qwen3's queries are normed per head (a row reduction inside the query): the prompt's
/// attention still runs over tiles of queries on the matrix units, the normed queries stored
/// once, not a workgroup per query row (which took 6.9 ms a layer of the 30B-A3B shape's
/// 512-token chunk on an H100).
#[test]
fn queries_normed_per_head_prefill_on_the_matrix_units() {
    let r = qwen3_0_6b();
    let model = build(&r);
    let spec = StepSpec::step(StepShape::new(1, PREFILL_TOKENS, 1024));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let plan = compile(&graph, &Target::ptx_preset()).unwrap();
    let kind = |name: &str| {
        name.trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string()
    };
    let kinds: Vec<String> = plan.kernels.iter().map(|k| kind(&k.name)).collect();
    assert!(kinds.iter().any(|k| k == "attention_mma_"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "attention_"), "{kinds:?}");
}
