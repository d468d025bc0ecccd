//! Which fusions fire: small graphs planned for the PTX preset, checked by the kinds of kernel
//! their plans launch. The device suite checks what the fused kernels compute.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;

use poot_formats::BlockFormat;
use poot_graph_ir::ops::{self, AttentionOptions};
use poot_graph_ir::{
    Builder, DType, GgmlType, Graph, Outputs, Slot, TensorType, TraceLimits, Traced,
};
use poot_graph_ir::{OpKind, UnaryOp};
use poot_graph_plan::activation_blocks::round_activation_blocks;
use poot_graph_plan::precision::round_half_operands;
use poot_graph_plan::{
    BlockTiles, BufferRole, HalfType, LibraryOperands, MatrixUnits, Plan, StoredWeights, Target,
    Tuning, WeightWords, compile,
};
use poot_kernel::{Expr, Half, Stmt};

fn input(b: &Builder, name: &str, dims: &[usize]) -> Traced {
    b.constant(name, TensorType::new(DType::F32, dims.to_vec()))
        .unwrap()
}

fn plan(g: &Graph) -> Plan {
    compile(g, &Target::ptx_preset()).unwrap()
}

/// The plan's dispatches as kernel kinds, in order.
fn kinds(p: &Plan) -> Vec<&str> {
    p.dispatches
        .iter()
        .map(|d| p.kernels[d.kernel].kind())
        .collect()
}

#[test]
fn a_norm_is_one_row_kernel() {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[3, 700]);
    let w = input(&b, "w", &[700]);
    let y = ops::rmsnorm(&b, x, w, 1e-6).unwrap();
    let p = plan(&b.finish(Outputs::new(y)).unwrap());
    assert_eq!(kinds(&p), ["row_map"]);
    // Three short rows, each cut into ten parts of 70 (see the next test).
    assert_eq!(p.dispatches[0].grid[0], 30);
}

#[test]
fn a_few_short_rows_are_cut_into_parts_a_workgroup_each() {
    let norm_grid = |rows: usize, len: usize| {
        let b = Builder::new(TraceLimits::standard(64));
        let x = input(&b, "x", &[rows, len]);
        let w = input(&b, "w", &[len]);
        let y = ops::rmsnorm(&b, x, w, 1e-6).unwrap();
        let p = plan(&b.finish(Outputs::new(y)).unwrap());
        assert_eq!(kinds(&p), ["row_map"]);
        p.dispatches[0].grid[0]
    };
    // A decode step's row of 2048: eight parts of 256 elements, each recomputing the sum of
    // squares; two rows take eight parts each too (16 workgroups), 64 rows one workgroup each.
    assert_eq!(norm_grid(1, 2048), 8);
    assert_eq!(norm_grid(2, 2048), 16);
    assert_eq!(norm_grid(64, 2048), 64);
    // Parts are whole strides of the workgroup where the row is: 6 strides cut into 6. A row
    // that is not whole strides is cut into equal parts of at least 32 elements: gpt-oss's
    // 2880 into 32 of 90, 1000 into 25 of 40; two rows of 2880 into 16 parts each.
    assert_eq!(norm_grid(1, 1536), 6);
    assert_eq!(norm_grid(1, 2880), 32);
    assert_eq!(norm_grid(2, 2880), 32);
    assert_eq!(norm_grid(1, 1000), 25);
    assert_eq!(norm_grid(1, 40), 1);
}

#[test]
fn a_norm_runs_inside_the_projections_that_read_it() {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[1, 1, 64]);
    let w = input(&b, "w", &[64]);
    let h = ops::rmsnorm(&b, x, w, 1e-6).unwrap();
    let q = ops::linear(&b, h, input(&b, "wq", &[96, 64]), None).unwrap();
    let k = ops::linear(&b, h, input(&b, "wk", &[32, 64]), None).unwrap();
    let p = plan(&b.finish(Outputs::new(q).and(k)).unwrap());
    // Both projections in one decode-shaped kernel (siblings), the norm in its prologue: teams
    // of 16 lanes (64 elements, four per lane), four teams per workgroup of 64 threads.
    assert_eq!(kinds(&p), ["gemv"]);
    assert_eq!(p.kernels[p.dispatches[0].kernel].workgroup, 64);
    assert_eq!(p.dispatches[0].grid[0], (96 + 32) / 4);
}

#[test]
fn only_decode_shaped_contractions_take_the_gemv_kernel() {
    let b = Builder::new(TraceLimits::standard(64));
    // Two rows, transposed constant weights: decode-shaped.
    let x2 = input(&b, "x2", &[2, 64]);
    let y2 = ops::linear(&b, x2, input(&b, "w2", &[40, 64]), None).unwrap();
    // Nine rows (a prefill chunk): the tiled kernel. Weights not transposed, or computed by
    // the step: the general kernel.
    let x9 = input(&b, "x9", &[9, 64]);
    let y9 = ops::linear(&b, x9, input(&b, "w9", &[40, 64]), None).unwrap();
    let plain = b.matmul(x2, input(&b, "wp", &[64, 40]), false).unwrap();
    let computed = b.exp(input(&b, "wc", &[40, 64])).unwrap();
    let yc = b.matmul(x2, computed, true).unwrap();
    let p = plan(
        &b.finish(Outputs::new(y2).and(y9).and(plain).and(yc))
            .unwrap(),
    );
    let k = kinds(&p);
    assert_eq!(k.iter().filter(|&&k| k == "gemv").count(), 1, "{k:?}");
    assert_eq!(k.iter().filter(|&&k| k == "gemm").count(), 1, "{k:?}");
    assert_eq!(k.iter().filter(|&&k| k == "matmul").count(), 2, "{k:?}");
}

/// A residual gated feed-forward over `rows` tokens of 64 features, planned.
fn gated_feed_forward(rows: usize) -> Plan {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[1, rows, 64]);
    let g = ops::linear(&b, x, input(&b, "wg", &[128, 64]), None).unwrap();
    let u = ops::linear(&b, x, input(&b, "wu", &[128, 64]), None).unwrap();
    let h = ops::swiglu(&b, g, u).unwrap();
    let d = ops::linear(&b, h, input(&b, "wd", &[64, 128]), None).unwrap();
    let y = b.add(x, d).unwrap();
    plan(&b.finish(Outputs::new(y)).unwrap())
}

/// A decode step's projection of one row against Q4_0 weights `[n, 256]`, planned for the PTX
/// preset (132 multiprocessors) with the tuning overrides `tuning`.
fn q4_0_projection(n: usize, tuning: &str) -> Plan {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[1, 256]);
    let w = b
        .constant(
            "w",
            TensorType::new(DType::Packed(GgmlType::Q4_0), vec![n, 256]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let mut target = Target::ptx_preset();
    target.tuning = Tuning::parse(tuning).unwrap();
    let p = compile(&b.finish(Outputs::new(y)).unwrap(), &target).unwrap();
    assert_eq!(kinds(&p), ["gemv"]);
    p
}

/// `rows` rows against Q4_0 weights `[512, 256]`, planned for the PTX preset with `tuning`.
fn q4_0_rows(rows: usize, tuning: &str) -> Vec<String> {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[rows, 256]);
    let w = b
        .constant(
            "w",
            TensorType::new(DType::Packed(GgmlType::Q4_0), vec![512, 256]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let mut target = Target::ptx_preset();
    target.tuning = Tuning::parse(tuning).unwrap();
    let p = compile(&b.finish(Outputs::new(y)).unwrap(), &target).unwrap();
    kinds(&p).into_iter().map(str::to_string).collect()
}

/// `rows` rows of a mixture of experts' contraction, each against its expert's rows of a
/// `[8, 96, 256]` Q4_K stack, planned for the PTX preset.
fn indexed_rows(rows: usize) -> Vec<String> {
    indexed_rows_tuned(rows, "")
}

fn indexed_rows_tuned(rows: usize, tuning: &str) -> Vec<String> {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[rows, 256]);
    let stack = b
        .constant(
            "experts",
            TensorType::new(DType::Packed(GgmlType::Q4_K), vec![8, 96, 256]),
        )
        .unwrap();
    let ids = b
        .slot_named("ids", TensorType::new(DType::I32, vec![rows]))
        .unwrap();
    let y = b.indexed_matmul(x, stack, ids).unwrap();
    let mut target = Target::ptx_preset();
    target.tuning = Tuning::parse(tuning).unwrap();
    let p = compile(&b.finish(Outputs::new(y)).unwrap(), &target).unwrap();
    kinds(&p).into_iter().map(str::to_string).collect()
}

#[test]
fn routed_expert_rows_read_their_experts_in_units() {
    // A decode step's 8 (token, expert) rows and a few tokens' 32: the decode-shaped kernel,
    // each row against its expert's weight rows only.
    assert_eq!(indexed_rows(8), ["indexed_gemv"]);
    assert_eq!(indexed_rows(32), ["indexed_gemv"]);
    // More rows: listed by expert, then each expert's weight rows read once for eight of its
    // rows.
    assert_eq!(indexed_rows(33), ["expert_rows", "grouped_gemv"]);
    assert_eq!(indexed_rows(63), ["expert_rows", "grouped_gemv"]);
    let grouped = indexed_rows_tuned(512, "routed_tiles=0");
    assert_eq!(grouped, ["expert_rows", "grouped_gemv"]);
    // From 64 rows (a prompt chunk's): tiles over each expert's rows, the stack decoded per
    // staged slice (its left side rounded to f16 for them first).
    assert_eq!(indexed_rows(64), ["map", "expert_rows", "routed_gemm"]);
    assert_eq!(indexed_rows(512), ["map", "expert_rows", "routed_gemm"]);
    let later = indexed_rows_tuned(512, "routed_tiles=1024");
    assert_eq!(later, ["expert_rows", "grouped_gemv"]);
}

#[test]
fn a_routed_prompt_chunk_tiles_each_experts_rows_reading_only_the_stored_blocks() {
    let p = routed_layer(64);
    let routed: Vec<_> = p
        .dispatches
        .iter()
        .filter(|d| p.kernels[d.kernel].name.starts_with("routed_gemm"))
        .collect();
    // Gate and up as one kernel, then down.
    assert_eq!(routed.len(), 2, "{:?}", kinds(&p));
    // 512 rows over 128 experts, 4 each on average: 16-row tiles, at most (512 + 128 * 15) /
    // 16 = 152 of them holding rows, for each of the 2 * 4 column tiles of gate and up.
    assert_eq!(routed[0].grid[0], 152 * 8);
    // No kernel decodes the stacks into a buffer.
    let decoding = p
        .buffers
        .iter()
        .filter(|b| b.size_bytes >= 128 * 256 * 256 * 4)
        .count();
    assert_eq!(decoding, 0, "{:?}", kinds(&p));
}

/// A routed layer over `tokens` tokens of 256 features (a 128-expert router, top 8, Q4_K gate,
/// up and down stacks of 256), added to its input, planned for the PTX preset.
fn routed_layer(tokens: usize) -> Plan {
    routed_layer_tuned(tokens, "")
}

fn routed_layer_tuned(tokens: usize, tuning: &str) -> Plan {
    let (d, ff, experts, top) = (256, 256, 128, 8);
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[tokens, d]);
    let router = input(&b, "router", &[experts, d]);
    let stack = |name: &str, dims: [usize; 3]| {
        b.constant(
            name,
            TensorType::new(DType::Packed(GgmlType::Q4_K), dims.to_vec()),
        )
        .unwrap()
    };
    let (gate, up) = (
        stack("gate", [experts, ff, d]),
        stack("up", [experts, ff, d]),
    );
    let down = stack("down", [experts, d, ff]);
    let scores = ops::softmax(&b, ops::linear(&b, x, router, None).unwrap(), 1).unwrap();
    let ids = b.arg_top_k(scores, top).unwrap();
    let weights = b.take_along(scores, ids, 1).unwrap();
    let weights = ops::binary_bcast(
        &b,
        poot_graph_ir::BinaryOp::Div,
        weights,
        b.reduce_sum(weights, 1).unwrap(),
    )
    .unwrap();
    let n = tokens * top;
    let rows = b
        .reshape(
            b.broadcast(b.reshape(x, [tokens, 1, d]).unwrap(), [tokens, top, d])
                .unwrap(),
            [n, d],
        )
        .unwrap();
    let row_ids = b.reshape(ids, [n]).unwrap();
    let h = b
        .mul(
            b.indexed_matmul(rows, gate, row_ids).unwrap(),
            b.indexed_matmul(rows, up, row_ids).unwrap(),
        )
        .unwrap();
    let y = b.indexed_matmul(h, down, row_ids).unwrap();
    let weighted = ops::binary_bcast(
        &b,
        poot_graph_ir::BinaryOp::Mul,
        y,
        b.reshape(weights, [n, 1]).unwrap(),
    )
    .unwrap();
    let summed = b
        .reduce_sum(b.reshape(weighted, [tokens, top, d]).unwrap(), 1)
        .unwrap();
    let out = b.add(x, b.reshape(summed, [tokens, d]).unwrap()).unwrap();
    let mut target = Target::ptx_preset();
    target.tuning = Tuning::parse(tuning).unwrap();
    compile(&b.finish(Outputs::new(out)).unwrap(), &target).unwrap()
}

#[test]
fn a_routed_decode_step_ranks_once_stages_its_token_once_and_sums_its_slots_in_place() {
    let p = routed_layer(1);
    assert_eq!(
        kinds(&p),
        [
            "gemv",
            "row_map",
            "top_k",
            "indexed_gemv",
            "indexed_gemv",
            "row_map"
        ]
    );
    let top_k = p
        .dispatches
        .iter()
        .map(|d| &p.kernels[d.kernel])
        .find(|k| k.name.starts_with("top_k"))
        .unwrap();
    // The top-k ranks each of the 128 candidates in one pass: no k passes of reductions.
    assert!(top_k.shared.iter().any(|s| s.len == 128));
    assert_eq!(count_stmts(&top_k.body, &|s| matches!(s, Stmt::Barrier)), 2);
    // The gate and up kernel stages the token's 256 features once, not once per slot; the
    // down kernel's tiles each read one slot's row, and stage only that one.
    let staged = |k: &poot_kernel::Kernel| -> u32 {
        k.shared
            .iter()
            .filter(|s| s.name.starts_with("lhs"))
            .map(|s| s.len)
            .sum()
    };
    let indexed: Vec<_> = p
        .dispatches
        .iter()
        .map(|d| &p.kernels[d.kernel])
        .filter(|k| k.name.starts_with("indexed_gemv"))
        .collect();
    assert_eq!(indexed.len(), 2);
    for k in indexed {
        assert!(
            staged(k) < 2 * 256,
            "{}: {} staged words",
            k.name,
            staged(k)
        );
    }
}

#[test]
fn a_routed_prompt_chunk_crowding_few_experts_still_fills_the_device() {
    let p = routed_layer_tuned(64, "routed_tiles=0");
    let grouped: Vec<_> = p
        .dispatches
        .iter()
        .filter(|d| p.kernels[d.kernel].name.starts_with("grouped_gemv"))
        .collect();
    assert_eq!(grouped.len(), 2, "{:?}", kinds(&p));
    // 512 (token, expert) rows: each (expert, 64 columns) tile's groups of eight shared by 8
    // workgroups.
    let unsplit = 128 * 256_u32.div_ceil(64);
    assert_eq!(grouped[0].grid[0], 8 * unsplit);
    // The slots are summed under the residual add, by no reduction kernel of their own.
    assert!(!kinds(&p).contains(&"reduce"), "{:?}", kinds(&p));
}

#[test]
fn the_grouped_kernels_residency_is_their_own_tuning() {
    let resident = |tuning: &str| -> Vec<u32> {
        let p = routed_layer_tuned(64, tuning);
        p.kernels
            .iter()
            .filter(|k| k.name.starts_with("grouped_gemv"))
            .map(|k| k.min_resident)
            .collect()
    };
    let block = Tuning::default().gemv_block_min_resident;
    assert_eq!(resident("routed_tiles=0"), [block, block]);
    assert_eq!(resident("routed_tiles=0,group_resident=2"), [2, 2]);
    assert!(Tuning::parse("group_resident=0").is_err());
    assert!(Tuning::parse("group_resident=9").is_err());
}

#[test]
fn paged_row_runs_are_on_unless_turned_off() {
    assert!(Tuning::default().paged_row_runs);
    assert!(!Tuning::parse("paged_runs=0").unwrap().paged_row_runs);
    assert!(Tuning::parse("paged_runs=2").is_err());
}

#[test]
fn gemv_rows_caps_the_decode_shaped_rows() {
    // The default where the tiles multiply on the matrix units: up to 2 rows in one pass over
    // the weights, more tiled.
    assert_eq!(q4_0_rows(2, ""), ["gemv"]);
    assert_ne!(q4_0_rows(3, ""), ["gemv"]);
    assert_ne!(q4_0_rows(8, ""), ["gemv"]);
    // Without them, up to 8.
    assert_eq!(q4_0_rows(8, "mma=0"), ["gemv"]);
    assert_ne!(q4_0_rows(9, "mma=0"), ["gemv"]);
    // Raised: 16 rows still read the weights once; 17 are tiled.
    assert_eq!(q4_0_rows(16, "gemv_rows=16"), ["gemv"]);
    assert_ne!(q4_0_rows(17, "gemv_rows=16"), ["gemv"]);
    // Lowered: 2 rows are already tiled.
    assert_ne!(q4_0_rows(2, "gemv_rows=1"), ["gemv"]);
    for bad in ["gemv_rows=0", "gemv_rows=33", "gemv_rows=x"] {
        assert!(Tuning::parse(bad).is_err(), "{bad}");
    }
}

/// Statements of `body` (and the blocks in it) that `count` picks.
fn count_stmts(body: &[Stmt], count: &dyn Fn(&Stmt) -> bool) -> usize {
    body.iter()
        .map(|s| {
            let inner = match s {
                Stmt::If {
                    then, otherwise, ..
                } => count_stmts(then, count) + count_stmts(otherwise, count),
                Stmt::For { body, .. } => count_stmts(body, count),
                _ => 0,
            };
            inner + usize::from(count(s))
        })
        .sum()
}

fn weight_loads(p: &Plan) -> usize {
    let k = &p.kernels[p.dispatches[0].kernel];
    count_stmts(&k.body, &|s| {
        matches!(
            s,
            Stmt::Let {
                value: Expr::Load { .. },
                ..
            } | Stmt::LetWords { .. }
        )
    })
}

#[test]
fn a_decode_contraction_reads_its_staged_left_side_sixteen_bytes_at_a_time() {
    let wide = |p: &Plan| {
        let k = &p.kernels[p.dispatches[0].kernel];
        count_stmts(&k.body, &|s| matches!(s, Stmt::LetShared { .. }))
    };
    // A Q4_0 unit's elements are aligned runs of four: one 16-byte read each.
    assert!(wide(&q4_0_projection(4096, "")) >= 4);
    assert_eq!(wide(&q4_0_projection(4096, "wide_shared=0")), 0);
}

#[test]
fn two_columns_a_team_only_where_the_columns_fill_the_workgroup_cap() {
    // 131072 columns fill 132 x 8 workgroups of 32 teams with teams of two columns: each team
    // decodes two weight rows per step, so the kernel loads twice the words.
    let many = weight_loads(&q4_0_projection(131072, ""));
    assert_eq!(
        many,
        2 * weight_loads(&q4_0_projection(131072, "columns=1"))
    );
    // 4096 columns would not: one column a team, as with `columns=1`.
    assert_eq!(
        weight_loads(&q4_0_projection(4096, "")),
        weight_loads(&q4_0_projection(4096, "columns=1"))
    );
}

#[test]
fn eighteen_byte_blocks_are_read_whole_by_halves_or_by_pairs_as_asked() {
    // A whole block: one window of five words a 32-element unit. Half blocks: three words a
    // 16-element unit. Pairs: nine whole words a 64-element unit.
    let whole = weight_loads(&q4_0_projection(4096, ""));
    let halves = weight_loads(&q4_0_projection(4096, "whole=0"));
    let pairs = weight_loads(&q4_0_projection(4096, "pairs=1"));
    assert_eq!(whole % 5, 0, "{whole}");
    assert_eq!(halves % 3, 0, "{halves}");
    assert_eq!(pairs % 9, 0, "{pairs}");
    assert!(whole != halves && whole != pairs && halves != pairs);
}

#[test]
fn a_residual_add_and_a_gated_activation_are_epilogues() {
    let p = gated_feed_forward(1);
    assert_eq!(kinds(&p), ["gemv_epilogue", "gemv_epilogue"]);
}

#[test]
fn a_left_side_too_long_for_shared_memory_is_staged_in_chunks() {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[8, 4096]);
    let w = input(&b, "w", &[9, 4096]);
    let short = input(&b, "short", &[8, 512]);
    let y = ops::linear(&b, x, w, None).unwrap();
    let z = ops::linear(&b, short, input(&b, "ws", &[9, 512]), None).unwrap();
    let p = compile(
        &b.finish(Outputs::new(y).and(z)).unwrap(),
        &Target::wgpu_preset(),
    )
    .unwrap();
    assert_eq!(kinds(&p), ["gemv", "gemv"]);
    let staged = |k: usize| {
        let kernel = &p.kernels[p.dispatches[k].kernel];
        let lhs = kernel.shared.iter().find(|s| s.name.starts_with("lhs"));
        lhs.map(|s| (s.name.clone(), s.len)).unwrap()
    };
    // 8 rows of 4096 (padded by 4 words every 32) take 147 KB: chunks of whole 256-element
    // blocks within 32 KB.
    let (name, len) = staged(0);
    assert_eq!(name, "lhs");
    assert!(
        len % 8 == 0 && len / 8 % 288 == 0 && len * 4 < 32 << 10,
        "{len}"
    );
    // 8 rows of 512 fit whole.
    assert_eq!(staged(1), ("lhs0".to_string(), 8 * (512 + 64)));
}

/// `attention_masked` over a cache of `len` positions for `tokens` new tokens.
fn attention_graph(tokens: usize, len: usize, return_probabilities: bool) -> Graph {
    attention_rows_graph(1, tokens, len, return_probabilities)
}

/// [`attention_graph`] over `rows` sequences.
fn attention_rows_graph(
    rows: usize,
    tokens: usize,
    len: usize,
    return_probabilities: bool,
) -> Graph {
    let b = Builder::new(TraceLimits::standard(4096));
    let q = input(&b, "q", &[rows, 4, tokens, 16]);
    let k = input(&b, "k", &[rows, 2, len, 16]);
    let v = input(&b, "v", &[rows, 2, len, 16]);
    let pos = b
        .slot(Slot::Pos, TensorType::new(DType::I32, vec![rows, tokens]))
        .unwrap();
    let mask = ops::causal_mask(&b, pos, len, Some(64)).unwrap();
    let opts = AttentionOptions {
        n_rep: 2,
        scale: 0.25,
        softcap: Some(30.0),
    };
    if return_probabilities {
        let k = ops::repeat_kv(&b, k, 2).unwrap();
        let v = ops::repeat_kv(&b, v, 2).unwrap();
        let s = b.matmul(q, k, true).unwrap();
        let p = ops::softmax(&b, s, 3).unwrap();
        let o = b.matmul(p, v, false).unwrap();
        return b.finish(Outputs::new(o).and(p)).unwrap();
    }
    let o = ops::attention_masked(&b, q, k, v, mask, opts).unwrap();
    b.finish(Outputs::new(o)).unwrap()
}

#[test]
fn decode_attention_splits_a_long_cache_and_combines() {
    let p = plan(&attention_graph(1, 2048, false));
    let k = kinds(&p);
    assert_eq!(&k[k.len() - 2..], ["attention_decode", "attention_combine"]);
    // Four heads of 64 blocks of 32 positions (four teams of 8): a partition a block, short of
    // the two workgroups per multiprocessor of the preset's 132 (66 a head) it would take.
    assert_eq!(p.dispatches[k.len() - 2].grid[0], 4 * 64);
}

#[test]
fn many_rows_decoding_take_the_decode_attention_kernel() {
    // 64 rows of 4 heads, one token each: 256 rows of attention, past the split threshold, still
    // the decode kernel (teams of lanes per position). The two query heads of each KV head share
    // a workgroup (128 of them), in three partitions each so the preset's 132 multiprocessors
    // hold two workgroups apiece.
    let p = plan(&attention_rows_graph(64, 1, 256, false));
    let k = kinds(&p);
    assert_eq!(&k[k.len() - 2..], ["attention_decode", "attention_combine"]);
    assert_eq!(p.dispatches[k.len() - 2].grid[0], 64 * 2 * 3);
    let grouped = &p.kernels[p.dispatches[k.len() - 2].kernel];
    let q = grouped.shared.iter().find(|s| s.name == "q").unwrap();
    assert_eq!(q.len, 2 * 16, "two heads' queries staged");
    // Lavapipe (where CI runs the shared suite's grouped cases) plans the same grouping.
    let p = compile(
        &attention_rows_graph(64, 1, 256, false),
        &Target::lavapipe_preset(),
    )
    .unwrap();
    let k = kinds(&p);
    let at = k.iter().position(|&k| k == "attention_decode").unwrap();
    let q = p.kernels[p.dispatches[at].kernel]
        .shared
        .iter()
        .find(|s| s.name == "q");
    assert_eq!(q.unwrap().len, 2 * 16);
    // Without the grouping: a workgroup per (row, head), two partitions each.
    let mut ungrouped = Target::ptx_preset();
    ungrouped.tuning.decode_group_heads = false;
    let p = compile(&attention_rows_graph(64, 1, 256, false), &ungrouped).unwrap();
    let k = kinds(&p);
    assert_eq!(&k[k.len() - 2..], ["attention_decode", "attention_combine"]);
    assert_eq!(p.dispatches[k.len() - 2].grid[0], 64 * 4 * 2);
    // One row (a lone decode step) keeps a workgroup per head.
    let p = plan(&attention_rows_graph(1, 1, 256, false));
    let k = kinds(&p);
    let lone = &p.kernels[p.dispatches[k.len() - 2].kernel];
    assert_eq!(lone.shared.iter().find(|s| s.name == "q").unwrap().len, 16);
    // Two tokens a row (a verification step), or the tuning off, keep the kernel for many rows.
    let p = plan(&attention_rows_graph(64, 2, 256, false));
    assert!(!kinds(&p).contains(&"attention_decode"), "{:?}", kinds(&p));
    let mut off = Target::ptx_preset();
    off.tuning.decode_attention_rows = false;
    let p = compile(&attention_rows_graph(64, 1, 256, false), &off).unwrap();
    assert_eq!(kinds(&p).last(), Some(&"attention"));
}

#[test]
fn prefill_attention_runs_on_the_matrix_units() {
    // Four heads of 64 tokens: a workgroup of four warps (16 queries each) per head, both
    // products on `mma.sync` (three tf32 products per f32 product).
    let p = plan(&attention_graph(64, 512, false));
    let k = kinds(&p);
    assert_eq!(k.last(), Some(&"attention_mma"));
    assert!(!k.contains(&"attention_combine"));
    assert_eq!(p.dispatches[k.len() - 1].grid[0], 4);
    let attention = &p.kernels[p.dispatches[k.len() - 1].kernel];
    let mut mmas = (0, 0);
    count_mma(&attention.body, &mut mmas);
    // Per tile: scores 2 steps x 4 blocks, weighted values 4 steps x 2 blocks, 3 products each.
    assert_eq!(mmas, ((2 * 4 + 4 * 2) * 3, 0));
    // 40 tokens: three warps; wgpu (no matrix units) keeps the FMA kernel.
    let p = plan(&attention_graph(40, 512, false));
    let k = kinds(&p);
    assert_eq!(k.last(), Some(&"attention_mma"));
    assert_eq!(p.kernels[p.dispatches[k.len() - 1].kernel].workgroup, 96);
    let p = compile(&attention_graph(64, 512, false), &Target::wgpu_preset()).unwrap();
    assert_eq!(kinds(&p).last(), Some(&"attention_tiled"));
}

#[test]
fn prefill_attention_under_a_causal_mask_walks_no_further_than_its_last_position() {
    // The walk's end is shared through a `bound` array: present for `causal_mask`'s mask (here
    // with a sliding window), absent for a mask the planner cannot bound.
    let bounded = |g: &Graph| {
        let p = plan(g);
        let k = kinds(&p);
        assert_eq!(k.last(), Some(&"attention_mma"));
        let kernel = &p.kernels[p.dispatches[k.len() - 1].kernel];
        kernel.shared.iter().any(|s| s.name == "bound")
    };
    assert!(bounded(&attention_graph(64, 512, false)));
    let mut off = Target::ptx_preset();
    off.tuning.attention_causal_bound = false;
    let p = compile(&attention_graph(64, 512, false), &off).unwrap();
    assert!(
        p.kernels
            .iter()
            .all(|k| k.shared.iter().all(|s| s.name != "bound"))
    );
    let b = Builder::new(TraceLimits::standard(4096));
    let q = input(&b, "q", &[1, 4, 64, 16]);
    let k = input(&b, "k", &[1, 2, 512, 16]);
    let v = input(&b, "v", &[1, 2, 512, 16]);
    let (x, y) = (
        input(&b, "x", &[1, 1, 64, 512]),
        input(&b, "y", &[1, 1, 64, 512]),
    );
    let mask = b.compare(poot_graph_ir::CompareOp::Le, x, y).unwrap();
    let opts = AttentionOptions {
        n_rep: 2,
        scale: 0.25,
        softcap: None,
    };
    let o = ops::attention_masked(&b, q, k, v, mask, opts).unwrap();
    assert!(!bounded(&b.finish(Outputs::new(o)).unwrap()));
}

#[test]
fn prefill_attention_is_one_kernel_over_tiles_of_queries() {
    let mut fma = Target::ptx_preset();
    fma.tuning.attention_mma = false;
    let p = compile(&attention_graph(64, 512, false), &fma).unwrap();
    let k = kinds(&p);
    assert_eq!(k.last(), Some(&"attention_tiled"));
    assert!(!k.contains(&"attention_combine"));
    // Four heads of 64 tokens: four tiles of 16 queries each.
    assert_eq!(p.dispatches[k.len() - 1].grid[0], 16);
    // Off, or under a tile of queries, one workgroup a query.
    let mut untiled = fma.clone();
    untiled.tuning.attention_tiles = false;
    let p = compile(&attention_graph(64, 512, false), &untiled).unwrap();
    assert_eq!(kinds(&p).last(), Some(&"attention"));
    let p = plan(&attention_graph(12, 512, false));
    assert!(!kinds(&p).contains(&"attention_tiled"), "{:?}", kinds(&p));
    assert!(!kinds(&p).contains(&"attention_mma"), "{:?}", kinds(&p));
}

#[test]
fn attention_whose_probabilities_are_read_elsewhere_is_not_rewritten() {
    let p = plan(&attention_graph(1, 64, true));
    assert!(!kinds(&p).contains(&"attention"), "{:?}", kinds(&p));
}

/// `attention_masked_with` under an ALiBi bias (`slopes [4]` times the key offsets) over a cache
/// of `len` positions for `tokens` new tokens.
fn alibi_attention_graph(tokens: usize, len: usize) -> Graph {
    let b = Builder::new(TraceLimits::standard(4096));
    let q = input(&b, "q", &[1, 4, tokens, 16]);
    let k = input(&b, "k", &[1, 2, len, 16]);
    let v = input(&b, "v", &[1, 2, len, 16]);
    let slopes = input(&b, "slopes", &[4]);
    let pos = b
        .slot(Slot::Pos, TensorType::new(DType::I32, vec![1, tokens]))
        .unwrap();
    let mask = ops::causal_mask(&b, pos, len, None).unwrap();
    let offsets = ops::key_offsets(&b, pos, len).unwrap();
    let bias = ops::alibi_bias(&b, offsets, slopes).unwrap();
    let opts = AttentionOptions {
        n_rep: 2,
        scale: 0.25,
        softcap: None,
    };
    let terms = ops::ScoreTerms {
        bias: Some(bias),
        sinks: None,
    };
    let o = ops::attention_masked_with(&b, q, k, v, mask, opts, terms).unwrap();
    b.finish(Outputs::new(o)).unwrap()
}

/// An ALiBi bias is part of the logits chain the flash-attention rewrite computes, never
/// dropped: on every target and for decode and prefill, the fused attention kernel is the one
/// that reads the slopes (the device suite checks what it computes against the oracle).
#[test]
fn fused_attention_computes_an_alibi_bias_from_its_slopes() {
    let mut untiled = Target::ptx_preset();
    untiled.tuning.attention_tiles = false;
    for (target, name) in [
        (Target::ptx_preset(), "PTX"),
        (untiled, "PTX untiled"),
        (Target::wgpu_preset(), "wgpu"),
        (Target::lavapipe_preset(), "lavapipe"),
        (Target::cpu_preset(), "CPU"),
    ] {
        for (tokens, len) in [(1, 2048), (1, 64), (64, 512), (12, 512)] {
            let p = compile(&alibi_attention_graph(tokens, len), &target).unwrap();
            let reads_slopes = |d: &poot_graph_plan::Dispatch| {
                d.args.iter().any(|a| {
                    matches!(&p.buffers[a.0 as usize].role,
                        poot_graph_plan::BufferRole::Const { name } if name == "slopes")
                })
            };
            let fused: Vec<_> = p
                .dispatches
                .iter()
                .filter(|d| {
                    let kind = p.kernels[d.kernel].kind();
                    kind.starts_with("attention") && kind != "attention_combine"
                })
                .collect();
            let what = format!("{name}, {tokens} tokens over {len}: {:?}", kinds(&p));
            assert_eq!(fused.len(), 1, "{what}");
            assert!(reads_slopes(fused[0]), "{what}");
            // Nothing else reads them: the bias is computed inside the attention kernel.
            assert_eq!(
                p.dispatches.iter().filter(|d| reads_slopes(d)).count(),
                1,
                "{what}"
            );
        }
    }
}

#[test]
fn a_prefill_chunks_norm_and_projections_are_one_tiled_kernel() {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[1, 64, 96]);
    let w = input(&b, "w", &[96]);
    let h = ops::rmsnorm(&b, x, w, 1e-6).unwrap();
    let q = ops::linear(&b, h, input(&b, "wq", &[96, 96]), None).unwrap();
    let k = ops::linear(&b, h, input(&b, "wk", &[32, 96]), None).unwrap();
    let p = plan(&b.finish(Outputs::new(q).and(k)).unwrap());
    // Siblings over one row tile and 2 + 1 column tiles, the norm computed per tile row.
    assert_eq!(kinds(&p), ["gemm"]);
    assert_eq!(p.dispatches[0].grid[0], 3);
}

#[test]
fn tiled_contractions_multiply_on_matrix_units_where_the_target_has_them() {
    let g = one_projection();
    let mmas = |target: &Target| mma_counts(&compile(&g, target).unwrap()).0;
    // Per 16-element step, 8 warps each: two halves x (2 x 2 blocks) x 3 products. The default
    // is tf32, and f32 weights take the tf32 path under the half tuning too.
    assert_eq!(mmas(&Target::ptx_preset()), 24);
    assert_eq!(mmas(&with_units(MatrixUnits::Half)), 24);
    assert_eq!(mmas(&with_units(MatrixUnits::Tf32)), 24);
    assert_eq!(mmas(&with_units(MatrixUnits::Off)), 0);
    assert_eq!(mmas(&Target::wgpu_preset()), 0);
}

/// The PTX preset with its tiled contractions against f16, bf16 and (over many rows) block
/// weights given to the device's library.
fn with_library() -> Target {
    let mut t = Target::ptx_preset();
    t.tuning.library_gemm = true;
    t
}

/// The PTX preset with its tiled contractions in kernels, multiplying on `units`.
fn with_units(units: MatrixUnits) -> Target {
    let mut t = Target::ptx_preset();
    t.tuning.gemm_matrix_units = units;
    t.tuning.library_gemm = false;
    t
}

/// A norm into sibling projections against `dtype` weights and a gated feed-forward, over
/// `rows` rows.
fn half_layer(rows: usize, dtype: DType) -> Graph {
    half_layer_of(rows, dtype, 96, 128)
}

/// [`half_layer`] with `hidden` features and a feed-forward of `ffn`.
fn half_layer_of(rows: usize, dtype: DType, hidden: usize, ffn: usize) -> Graph {
    let b = Builder::new(TraceLimits::standard(64));
    let weight = |name: &str, dims: &[usize]| {
        b.constant(name, TensorType::new(dtype, dims.to_vec()))
            .unwrap()
    };
    let x = input(&b, "x", &[rows, hidden]);
    let h = ops::rmsnorm(&b, x, input(&b, "n", &[hidden]), 1e-6).unwrap();
    let q = ops::linear(&b, h, weight("wq", &[64, hidden]), None).unwrap();
    let k = ops::linear(&b, h, weight("wk", &[32, hidden]), None).unwrap();
    let g = ops::linear(&b, h, weight("wg", &[ffn, hidden]), None).unwrap();
    let u = ops::linear(&b, h, weight("wu", &[ffn, hidden]), None).unwrap();
    let f = ops::swiglu(&b, g, u).unwrap();
    let d = ops::linear(&b, f, weight("wd", &[hidden, ffn]), None).unwrap();
    let y = b.add(x, d).unwrap();
    b.finish(Outputs::new(q).and(k).and(y)).unwrap()
}

#[test]
fn half_weights_multiply_in_half_precision_on_ptx_for_many_rows() {
    for dtype in [DType::F16, DType::BF16] {
        let g = half_layer(64, dtype);
        let p = compile(&g, &with_units(MatrixUnits::Half)).unwrap();
        // Q and K as siblings, gate and up into their product, down with the residual: each
        // 16-element step of each warp takes one product per 16 x 8 block (2 x 2 blocks) per
        // sum, nothing on the tf32 path.
        assert_eq!(kinds(&p), ["gemm", "gemm_epilogue", "gemm_epilogue"]);
        let per_kernel: Vec<(usize, usize)> = p
            .dispatches
            .iter()
            .map(|d| {
                let mut n = (0, 0);
                count_mma(&p.kernels[d.kernel].body, &mut n);
                n
            })
            .collect();
        assert_eq!(per_kernel, [(0, 4), (0, 8), (0, 4)], "{dtype}");
        let half = match dtype {
            DType::F16 => Half::F16,
            _ => Half::Bf16,
        };
        assert!(p.kernels.iter().all(|k| halves(&k.body, half)));
        // Tuned to tf32 or off, or on a target without matrix units: no half products.
        for target in [
            with_units(MatrixUnits::Tf32),
            with_units(MatrixUnits::Off),
            Target::wgpu_preset(),
        ] {
            assert_eq!(mma_counts(&compile(&g, &target).unwrap()).1, 0);
        }
        assert!(mma_counts(&compile(&g, &with_units(MatrixUnits::Tf32)).unwrap()).0 > 0);
        // The rounding is in the graph the plan computes: twice (the norm's output, the
        // feed-forward product) with a cast to the half type and one back.
        let rounded = round_half_operands(&g, &with_units(MatrixUnits::Half)).unwrap();
        assert_eq!(rounded.eqns().len(), g.eqns().len() + 4, "{rounded}");
        // Rounding a rounded graph changes nothing.
        let again = round_half_operands(&rounded, &with_units(MatrixUnits::Half)).unwrap();
        assert_eq!(*again, *rounded);
        for target in [with_units(MatrixUnits::Tf32), Target::wgpu_preset()] {
            assert_eq!(*round_half_operands(&g, &target).unwrap(), g);
        }
    }
}

#[test]
fn few_rows_and_other_weights_keep_their_precision() {
    // One row (a decode step) and two (a small batched step): decode-shaped kernels, the
    // graph as traced.
    for rows in [1, 2] {
        let g = half_layer(rows, DType::F16);
        let target = with_units(MatrixUnits::Half);
        assert_eq!(*round_half_operands(&g, &target).unwrap(), g);
        let p = compile(&g, &target).unwrap();
        assert!(kinds(&p).iter().all(|k| k.starts_with("gemv")), "{p:?}");
        assert_eq!(mma_counts(&p), (0, 0));
    }
    // Nine rows are tiled and rounded.
    let g = half_layer(9, DType::F16);
    let (tf32, half) = mma_counts(&compile(&g, &with_units(MatrixUnits::Half)).unwrap());
    assert!(tf32 == 0 && half > 0, "{tf32} {half}");
    // f32 weights, and packed weights without block tiles: no rounding, tf32 products.
    let mut no_block_tiles = with_units(MatrixUnits::Half);
    no_block_tiles.tuning.block_tiles = BlockTiles::Off;
    for (dtype, target) in [
        (DType::F32, with_units(MatrixUnits::Half)),
        (DType::Packed(GgmlType::Q8_0), no_block_tiles),
    ] {
        let g = half_layer(64, dtype);
        assert_eq!(*round_half_operands(&g, &target).unwrap(), g);
        let (tf32, half) = mma_counts(&compile(&g, &target).unwrap());
        assert!(tf32 > 0 && half == 0, "{dtype}: {tf32} {half}");
    }
    // Packed weights in block tiles (the default): decoded and rounded to f16 in the graph
    // (per weight an iota, a gather and two casts; per left side two casts), f16 products.
    for units in [MatrixUnits::Tf32, MatrixUnits::Half] {
        let g = half_layer(64, DType::Packed(GgmlType::Q8_0));
        let target = with_units(units);
        let rounded = round_half_operands(&g, &target).unwrap();
        assert_eq!(rounded.eqns().len(), g.eqns().len() + 5 * 4 + 2 * 2);
        let (tf32, half) = mma_counts(&compile(&g, &target).unwrap());
        assert!(tf32 == 0 && half > 0, "{units:?}: {tf32} {half}");
    }
}

#[test]
fn half_weights_go_to_the_library_where_the_device_has_one() {
    for dtype in [DType::F16, DType::BF16] {
        let g = half_layer(64, dtype);
        let p = compile(&g, &with_library()).unwrap();
        // Five contractions in the library; the kernels compute the rounded norm, the rounded
        // gated product and the residual add around them, with no tiled kernel left.
        assert_eq!(p.contractions.len(), 5, "{dtype}");
        assert!(
            kinds(&p).iter().all(|k| !k.starts_with("gemm")),
            "{:?}",
            kinds(&p)
        );
        let half = match dtype {
            DType::F16 => HalfType::F16,
            _ => HalfType::BF16,
        };
        let shapes: Vec<(u32, u32, u32)> = p
            .contractions
            .iter()
            .map(|c| (c.rows, c.cols, c.depth))
            .collect();
        assert_eq!(
            shapes,
            [
                (64, 64, 96),
                (64, 32, 96),
                (64, 128, 96),
                (64, 128, 96),
                (64, 96, 128)
            ]
        );
        for c in &p.contractions {
            assert_eq!(
                c.operands,
                LibraryOperands::Half {
                    half,
                    words: WeightWords::Stored
                }
            );
            assert!(c.transpose_weights);
            assert_ne!(c.lhs, c.out);
            assert_eq!(c.collectives_before, 0);
        }
        // The four projections of the norm follow its kernel; the down projection follows the
        // gated product's kernel and precedes the residual add's.
        let befores: Vec<usize> = p.contractions.iter().map(|c| c.before).collect();
        assert_eq!(befores[..4], [1, 1, 1, 1], "{:?}", kinds(&p));
        assert_eq!(befores[4], 2, "{:?}", kinds(&p));
        assert_eq!(p.dispatches.len(), 3, "{:?}", kinds(&p));
        // The rounding the library multiplies in is in the graph the plan computes.
        let rounded = round_half_operands(&g, &with_library()).unwrap();
        assert_eq!(rounded.eqns().len(), g.eqns().len() + 4);
    }
    // Few rows, the library tuned off, a device without one, or columns that are not a
    // multiple of 8: kernels.
    let mut off = Target::ptx_preset();
    off.tuning.library_gemm = false;
    for (g, target) in [
        (half_layer(2, DType::F16), with_library()),
        (half_layer(64, DType::F16), off),
        (half_layer(64, DType::F16), Target::wgpu_preset()),
    ] {
        assert!(compile(&g, &target).unwrap().contractions.is_empty());
    }
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[16, 96]);
    let w = b
        .constant("w", TensorType::new(DType::F16, vec![60, 96]))
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let g = b.finish(Outputs::new(y)).unwrap();
    assert!(
        compile(&g, &with_library())
            .unwrap()
            .contractions
            .is_empty()
    );
}

#[test]
fn every_stored_weight_contraction_goes_to_the_cpus_exact_library() {
    let cpu = Target::cpu_preset();
    for (dtype, stored) in [
        (DType::F32, StoredWeights::F32),
        (DType::F16, StoredWeights::F16),
        (DType::BF16, StoredWeights::BF16),
        (
            DType::Packed(GgmlType::Q4_0),
            StoredWeights::Blocks(BlockFormat::Q4_0),
        ),
    ] {
        // A decode step's single row and a prefill chunk's many alike, nothing rounded.
        for rows in [1, 64] {
            let g = half_layer(rows, dtype);
            assert!(matches!(
                round_half_operands(&g, &cpu).unwrap(),
                Cow::Borrowed(_)
            ));
            let p = compile(&g, &cpu).unwrap();
            assert_eq!(p.contractions.len(), 5, "{dtype} x {rows}: {:?}", kinds(&p));
            // A prefill chunk's block products are in 8-bit integers (see below).
            let want = match stored {
                StoredWeights::Blocks(b) if rows >= 16 => LibraryOperands::Integer(b),
                _ => LibraryOperands::Exact(stored),
            };
            for c in &p.contractions {
                assert_eq!(c.operands, want);
                assert_eq!(c.rows as usize, rows);
                assert!(c.transpose_weights);
            }
            assert!(
                kinds(&p)
                    .iter()
                    .all(|k| !k.starts_with("gemm") && !k.starts_with("gemv")),
                "{:?}",
                kinds(&p)
            );
        }
    }
    // A format the library does not decode keeps its kernels, as does the library tuned off.
    let g = half_layer(1, DType::Packed(GgmlType::IQ4_NL));
    assert!(compile(&g, &cpu).unwrap().contractions.is_empty());
    let mut off = Target::cpu_preset();
    off.tuning.library_gemm = false;
    assert!(
        compile(&half_layer(1, DType::F16), &off)
            .unwrap()
            .contractions
            .is_empty()
    );
}

#[test]
fn a_prefill_chunks_block_products_round_the_left_side_to_8_bit_blocks_on_the_cpu() {
    let cpu = Target::cpu_preset();
    let mut exact = Target::cpu_preset();
    exact.tuning.library_integer = false;
    let q4 = DType::Packed(GgmlType::Q4_0);
    let g = half_layer(64, q4);
    // The graph says what the library computes: each distinct left side (the norm's output,
    // the gated product) rounded once, shared by its sibling contractions.
    let rounded = round_activation_blocks(&g, &cpu).unwrap();
    let Cow::Owned(r) = &rounded else {
        panic!("nothing rounded");
    };
    let count = |g: &Graph, op: UnaryOp| {
        g.eqns()
            .iter()
            .filter(|e| e.op == OpKind::Unary(op))
            .count()
    };
    assert_eq!(count(r, UnaryOp::Round), 2);
    assert_eq!(count(&g, UnaryOp::Round), 0);
    assert!(matches!(
        round_activation_blocks(r, &cpu).unwrap(),
        Cow::Borrowed(_)
    ));
    // Nothing is rounded for a decode step, with the integer products tuned off, or on a GPU.
    for (graph, target) in [
        (half_layer(8, q4), &cpu),
        (g.clone(), &exact),
        (g.clone(), &Target::ptx_preset()),
    ] {
        assert!(matches!(
            round_activation_blocks(&graph, target).unwrap(),
            Cow::Borrowed(_)
        ));
    }
    // No kernel computes the rounding: the library does, from the unrounded left side, so the
    // plan launches exactly the kernels of the exact plan.
    let integer = compile(&g, &cpu).unwrap();
    let plain = compile(&g, &exact).unwrap();
    assert_eq!(kinds(&integer), kinds(&plain));
    assert!(
        integer
            .contractions
            .iter()
            .all(|c| c.operands == LibraryOperands::Integer(BlockFormat::Q4_0))
    );
    for (a, b) in integer.contractions.iter().zip(&plain.contractions) {
        assert_eq!((a.rows, a.cols, a.depth), (b.rows, b.cols, b.depth));
    }
}

#[test]
fn block_weights_are_decoded_for_the_library_over_many_rows() {
    let q8 = DType::Packed(GgmlType::Q8_0);
    let g = half_layer(128, q8);
    let p = compile(&g, &with_library()).unwrap();
    // The library takes each weight's stored blocks and decodes them to f16 itself: no kernel
    // decodes them.
    assert_eq!(p.contractions.len(), 5);
    assert!(p.contractions.iter().all(|c| c.operands
        == LibraryOperands::Half {
            half: HalfType::F16,
            words: WeightWords::Blocks(BlockFormat::Q8_0)
        }));
    assert!(
        kinds(&p).iter().all(|k| !k.starts_with("gemm")),
        "{:?}",
        kinds(&p)
    );
    // Tuned off, or in a format the device does not decode, a kernel decodes each weight and
    // rounds it to f16 into f32 words, which the library converts: five more kernels.
    let mut kernel_decoded = with_library();
    kernel_decoded.tuning.library_decode = false;
    let q2 = DType::Packed(GgmlType::Q2_K);
    let layer_q2 = half_layer_of(128, q2, 256, 256);
    for (g, target, format) in [
        (&g, &kernel_decoded, BlockFormat::Q8_0),
        (&layer_q2, &with_library(), BlockFormat::Q2_K),
    ] {
        let decoded = compile(g, target).unwrap();
        assert!(decoded.contractions.iter().all(|c| c.operands
            == LibraryOperands::Half {
                half: HalfType::F16,
                words: WeightWords::F32
            }));
        assert_eq!(decoded.contractions.len(), 5, "{format:?}");
        if format == BlockFormat::Q8_0 {
            assert_eq!(decoded.dispatches.len(), p.dispatches.len() + 5);
        }
    }
    // Every weight the library decodes is bound as its stored constant.
    for c in &p.contractions {
        assert!(
            p.buffers[c.weights.0 as usize].role != BufferRole::Scratch,
            "{:?}",
            p.buffers[c.weights.0 as usize].role
        );
    }
    // The decoding and both roundings are in the graph: per weight an iota, a gather and two
    // casts; per left side two casts.
    let rounded = round_half_operands(&g, &with_library()).unwrap();
    assert_eq!(rounded.eqns().len(), g.eqns().len() + 5 * 4 + 2 * 2);
    let again = round_half_operands(&rounded, &with_library()).unwrap();
    assert_eq!(*again, *rounded);
    // A batched decode step's rows (under 64) stay in kernels, block tiles multiplying in f16,
    // as on a device without the library.
    let batched = compile(&half_layer(32, q8), &with_library()).unwrap();
    assert!(batched.contractions.is_empty());
    assert!(mma_counts(&batched).1 > 0);
    assert!(
        compile(&g, &with_units(MatrixUnits::Tf32))
            .unwrap()
            .contractions
            .is_empty()
    );
}

/// Products on the tf32 and on the half-precision matrix units over a plan's kernels.
fn mma_counts(p: &Plan) -> (usize, usize) {
    let mut n = (0, 0);
    for k in &p.kernels {
        count_mma(&k.body, &mut n);
    }
    n
}

/// Whether every half-precision product in `body` is in `half`.
fn halves(body: &[Stmt], half: Half) -> bool {
    body.iter().all(|s| match s {
        Stmt::MmaHalf { half: h, .. } => *h == half,
        Stmt::If {
            then, otherwise, ..
        } => halves(then, half) && halves(otherwise, half),
        Stmt::For { body, .. } => halves(body, half),
        _ => true,
    })
}

/// A 64-row left side times 80 x 96 weights.
fn one_projection() -> Graph {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[64, 96]);
    let y = ops::linear(&b, x, input(&b, "w", &[80, 96]), None).unwrap();
    b.finish(Outputs::new(y)).unwrap()
}

/// Adds the tf32 and the half-precision products in `body` to `n`.
fn count_mma(body: &[Stmt], n: &mut (usize, usize)) {
    for s in body {
        match s {
            Stmt::MmaTf32 { .. } => n.0 += 1,
            Stmt::MmaHalf { .. } => n.1 += 1,
            Stmt::If {
                then, otherwise, ..
            } => {
                count_mma(then, n);
                count_mma(otherwise, n);
            }
            Stmt::For { body, .. } => count_mma(body, n),
            _ => {}
        }
    }
}

#[test]
fn a_prefill_feed_forward_is_two_tiled_epilogues() {
    let p = gated_feed_forward(40);
    assert_eq!(kinds(&p), ["gemm_epilogue", "gemm_epilogue"]);
}

#[test]
fn a_tiled_kernel_that_does_not_fit_shared_memory_is_not_made() {
    let g = one_projection();
    assert_eq!(kinds(&plan(&g)), ["gemm"]);
    let mut small = Target::ptx_preset();
    small.limits.max_shared_bytes = 4096;
    let p = compile(&g, &small).unwrap();
    assert_eq!(kinds(&p), ["matmul"]);
    assert_eq!(p.dispatches[0].grid[0], 64 * 80);
}

#[test]
fn reductions_over_a_vocabulary_row_share_split_kernels() {
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "logits", &[1, 49152]);
    let am = b.argmax(x, 1).unwrap();
    let mx = b.reduce_max(x, 1).unwrap();
    let top = b.arg_top_k(x, 20).unwrap();
    let p = plan(&b.finish(Outputs::new(am).and(mx).and(top)).unwrap());
    assert_eq!(
        kinds(&p),
        [
            "reduce_split",
            "reduce_combine",
            "top_k_split",
            "top_k_combine"
        ]
    );
    // Partitions of 1024 values; sqrt(49152 / 20) for the top 20.
    let grids: Vec<u32> = p.dispatches.iter().map(|d| d.grid[0]).collect();
    assert_eq!(grids, [48, 1, 49, 1]);
    // A row as long as a hidden size stays one workgroup (and inside its readers).
    let b = Builder::new(TraceLimits::standard(64));
    let x = input(&b, "x", &[1, 8192]);
    let am = b.argmax(x, 1).unwrap();
    let p = plan(&b.finish(Outputs::new(am)).unwrap());
    assert_eq!(kinds(&p), ["argmax"]);
}
