//! A target: the backend a plan is for and the device limits it must respect. Presets describe
//! typical devices so plans can be made (and refusals reported) with no device attached; a device
//! that is attached reports its own limits.

use std::fmt;

/// The backends kernels are rendered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// NVIDIA, CUDA C compiled to PTX at run time.
    Ptx,
    /// wgpu over Vulkan, WGSL.
    Wgpu,
    /// Raw Vulkan, SPIR-V from the same WGSL.
    Vulkan,
    /// AMD over HSA.
    Rocm,
    /// The host CPU: C compiled by the system's C compiler at run time.
    Cpu,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Ptx => "ptx",
            Backend::Wgpu => "wgpu",
            Backend::Vulkan => "vulkan",
            Backend::Rocm => "rocm",
            Backend::Cpu => "cpu",
        })
    }
}

/// Everything the planner reads about a device, in one place.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetLimits {
    /// The largest buffer one kernel may bind (one allocation, or one binding range).
    pub max_buffer_bytes: u64,
    /// Workgroups along x, and along y and z.
    pub max_groups_x: u32,
    pub max_groups_yz: u32,
    pub max_workgroup_threads: u32,
    pub max_shared_bytes: u32,
    /// Storage buffers one kernel may bind.
    pub max_bindings: u32,
    pub subgroup_size: u32,
    /// Multiprocessors (compute units), where the device says: workgroups that fill the device
    /// once.
    pub multiprocessors: Option<u32>,
    /// Device memory a plan's buffers may take in all, when known.
    pub memory_bytes: Option<u64>,
    /// Ranks of the tensor-parallel group the device is one rank of (1 for a device alone).
    /// A collective over any other number of ranks is refused.
    pub group_ranks: usize,
    /// Whether the device multiplies tf32 tiles on matrix units (CUDA compute capability 8.0
    /// and newer): a prefill's tiled contractions then use them. The same capability brings
    /// `mma.sync` over f16 and bf16 with f32 sums (both need 8.0 and PTX 7.0), so it also
    /// stands for those: a device with one has the other ([`MatrixUnits`]).
    pub matrix_tf32: bool,
    /// Whether the device has a vendor library that multiplies half-precision operands with
    /// f32 sums (cuBLASLt on CUDA): a contraction the planner gives it becomes a library step
    /// between kernels ([`crate::plan::LibraryContraction`]). Such a device also decodes the
    /// block formats of [`crate::plan::LIBRARY_DECODED_BLOCKS`] to f16 for it
    /// ([`crate::plan::WeightWords::Blocks`]).
    pub library_gemm: bool,
    /// Whether the device has a library that multiplies f32 left sides of any row count against
    /// weights as stored (f32, f16, bf16 and [`crate::plan::EXACT_LIBRARY_BLOCKS`]), decoding
    /// them as the oracle does (to within an ulp), with f32 sums (the CPU device's `contract.c`):
    /// every such contraction then goes to it ([`crate::plan::LibraryOperands::Exact`]), with no
    /// rounding of its operands.
    pub library_exact: bool,
    /// Left-side rows from which that library multiplies block-quantized weights by the left
    /// side rounded to 8-bit blocks, in integers ([`crate::activation_blocks`]); `None` where
    /// it never does.
    pub library_integer_rows: Option<u32>,
}

/// Choices of the kernel shapes that trade one cost for another on a device, with defaults
/// measured on the H200. Every setting plans correct kernels; `POOT_TUNING` overrides them for
/// benchmark sweeps ([`Tuning::from_env`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Bytes of block-quantized weights each lane of a decode-shaped contraction loads per step
    /// of its row walk (more loads in flight, more registers).
    pub gemv_bytes_per_step: u32,
    /// The same for dense (f32, f16, bf16) weights. Measured on the H200 once f16 widening was
    /// one instruction: 128 bytes (two 16-byte loads a lane) over 64 gave a 1B F16 model 5% and
    /// an 8B one 3%.
    pub gemv_dense_bytes_per_step: u32,
    /// Whether those contractions read dense f16/bf16 rows 16 bytes per load.
    pub gemv_wide_loads: bool,
    /// Whether a team's partial sums meet in registers (subgroup shuffles, where the target has
    /// them) instead of shared memory and two barriers per column step.
    pub gemv_team_shuffles: bool,
    /// Whether routed-expert contractions read their stacks in units (the decode-shaped kernel
    /// for a few rows, rows grouped by expert for more); off, a workgroup per output.
    pub routed_units: bool,
    /// Whether the matrix-unit prefill attention stages a paged cache's tile a run of one
    /// position's features per thread (its block table read once per run). On by default since
    /// the shared suite passed with it on an H100 (session 24); `paged_runs=0` turns it off.
    pub paged_row_runs: bool,
    /// The most workgroups such a contraction launches (each then walks several column tiles,
    /// staging its left side once); `None` for [`Tuning::gemv_waves`] per multiprocessor.
    pub gemv_max_workgroups: Option<u32>,
    /// Workgroups per multiprocessor such a contraction over dense weights launches at most,
    /// where the device reports its multiprocessors (0: one workgroup per column tile). With
    /// 128-byte steps, 2 measured 1% over 4 on 1B and 8B F16 models (8 lost 3% on 8B).
    pub gemv_waves: u32,
    /// Workgroups of such a contraction over dense weights a multiprocessor must be able to
    /// hold at once, a cap on registers per thread where the backend takes one (0: no cap).
    pub gemv_min_resident: u32,
    /// [`Tuning::gemv_waves`] for block-quantized weights. Their kernels decode with more
    /// registers and more instructions per byte, so they want more warps in flight: measured on
    /// the H200, 8 waves with 4 resident give a Llama-8B-shaped Q4_K_M model 9% and its Q4_0
    /// twin 5% over the dense settings, where those settings cost a 1B F16 model 10-18%.
    pub gemv_block_waves: u32,
    /// [`Tuning::gemv_min_resident`] for block-quantized weights.
    pub gemv_block_min_resident: u32,
    /// Weight rows (output columns) a team of such a contraction walks at once over block
    /// formats stored at half-word alignment (Q4_0, Q5_0, Q8_0, IQ4_NL, Q6_K), where the
    /// columns still fill the workgroup cap: each left-side value read from shared memory then
    /// serves that many weights (a power of two, at least 1; fewer where the columns do not
    /// divide).
    pub gemv_columns: u32,
    /// The same for every other weight (word-aligned blocks, dense rows).
    pub gemv_word_columns: u32,
    /// Whether such a contraction reads its staged left side 16 bytes per load where a unit's
    /// elements allow.
    pub gemv_wide_shared: bool,
    /// Whether such a contraction reads Q4_0 and IQ4_NL rows (of a multiple of 64) two blocks,
    /// nine whole words, at a time instead of half-word-shifted windows of one block. Off:
    /// measured on the H200, it gave a Llama-8B-shaped Q4_0 model 2% and cost a 1B one 12%.
    pub gemv_block_pairs: bool,
    /// Whether such a contraction reads Q4_0 and IQ4_NL rows a whole block (32 elements) per
    /// unit instead of half a block: half the address work and scale loads per element.
    pub gemv_whole_blocks: bool,
    /// Whether a recorded kernel may start while the kernel before it finishes (where the
    /// backend can: CUDA's programmatic dependent launch on compute capability 9.0 and newer).
    pub launch_overlap: LaunchOverlap,
    /// Whether attention over many query rows computes a tile of queries per workgroup, each
    /// staged key and value serving all of them, instead of one query per workgroup.
    pub attention_tiles: bool,
    /// Whether a decode step's attention (one new token per row) takes the decode kernel (teams
    /// of lanes sharing each position's dot product) at any row count, not only under the
    /// split threshold (`decode_attn=0|1`, on by default).
    pub decode_attention_rows: bool,
    /// Whether such a step's decode kernel serves the query heads that share a key and value
    /// head (GQA) in one workgroup, each key and value read once for all of them
    /// (`decode_group=0|1`, on by default).
    pub decode_group_heads: bool,
    /// Whether a decode step with few rows (a lone request's) groups its query heads that way
    /// too (`decode_group_lone=0|1`, off by default: not yet measured).
    pub decode_group_lone: bool,
    /// Workgroups a decode attention launches at least per multiprocessor, by splitting each
    /// row's positions into partitions (`decode_wgs=N`, 1 to 64; 2 by default).
    pub decode_workgroups: usize,
    /// Positions each team of a decode attention takes per step at most (`decode_positions=N`,
    /// 1, 2, 4, 8 or 16; 8 by default), as far as a lane's registers hold their key and
    /// value words (a 64-wide head takes 8, a 128-wide head 4): more keep more loads in flight
    /// per step, each step paying one latency chain (a paged cache's block-table read, then
    /// the words). 8 against 4 on an H100 (session 30): a lone SmolLM2-shaped decode 1,455
    /// against 1,343 tok/s, 1B F16 874 against 852; paged, no change.
    pub decode_positions: u32,
    /// Whether attention over many query rows forms its two products on the matrix units,
    /// where the target has them ([`Target::attention_matrix_units`]; `attn_mma=0|1`, on by
    /// default), instead of the tiled kernel's FMA loops.
    pub attention_mma: bool,
    /// Whether a softmax with a learned sink per head (gpt-oss) takes the matrix units too
    /// (`attn_mma_sinks=0|1`, on by default); off keeps it on the tiled FMA kernel.
    pub attention_mma_sinks: bool,
    /// Whether the prompt attention on the matrix units stops walking the cache after its
    /// rows' last position where the mask is causal (`attn_bound=0|1`, on by default).
    pub attention_causal_bound: bool,
    /// How tiled contractions multiply where the target has matrix units
    /// ([`Target::matrix_units`]).
    pub gemm_matrix_units: MatrixUnits,
    /// Whether tiled contractions against f16 or bf16 weights (and, over a prefill's rows,
    /// block-quantized weights decoded to f16) go to the device's library
    /// ([`TargetLimits::library_gemm`]) where it has one (`lib=0|1`, on by default: on the
    /// H200 in session 11 it prefilled 1.7-5x faster than the tiled kernels, the shared suite
    /// and SmolLM2's prompts passing; see bench/README.md).
    pub library_gemm: bool,
    /// The most left-side rows a contraction takes in the decode-shaped kernels (one pass over
    /// the weights, each lane a partial sum per row); more rows are tiled (`gemv_rows=N`, 1 to
    /// 32). Unset, the target's own ([`Target::gemv_rows`]).
    pub gemv_rows: Option<usize>,
    /// Rows of one expert the grouped routed-expert kernel (a prompt chunk's or many decoding
    /// rows' (token, expert) rows) adds at once, each expert's weights decoded once per that
    /// many of its rows (`group_rows=4|8|16|32`, 8 by default).
    pub grouped_rows: u32,
    /// Workgroups of the grouped routed-expert kernel the compiler must fit on a
    /// multiprocessor (`group_resident=N`, 1 to 8; unset, the decode-shaped kernels'
    /// residency). ptxas, offline (`scripts/bench/nvrtc_regs.py`), spills 1.6 KB a thread of
    /// the 30B-A3B shape's gate/up kernel at 4 (64 registers) and almost nothing at 2.
    pub grouped_resident: Option<u32>,
    /// Routed (token, expert) rows from which a routed contraction against a block-quantized
    /// expert stack is tiled over each expert's listed rows, its weights decoded to f16 per
    /// staged slice and multiplied on the matrix units where the target stages block tiles
    /// (`routed_tiles=N`; 0 keeps the grouped kernel at every row count).
    pub routed_tile_rows: usize,
    /// Left-side rows from which a contraction against block-quantized weights goes to the
    /// library (`lib_rows=N`, 64 by default): its weights are then decoded to f16 in full for
    /// every step, which pays over many rows (a prefill chunk, 64 rows decoding together), not
    /// for a smaller batched step, whose block tiles read the stored blocks once
    /// ([`Tuning::block_tiles`]). On the H100 (session 18) 16 rows decoded 27% faster in block
    /// tiles than in the library on a 1B Q4_0 model and 2% slower on an 8B Q4_K_M one; at 64
    /// rows the library was as fast (1B) or 37% faster (8B Q4_K_M).
    pub library_packed_rows: usize,
    /// Whether the library's device decodes block-quantized weights to f16 itself, in one pass
    /// ([`crate::plan::WeightWords::Blocks`]), instead of a kernel writing their f32 words
    /// which the device then converts (`lib_decode=0|1`, on by default).
    pub library_decode: bool,
    /// Whether the exact library multiplies block-quantized weights in 8-bit integers where it
    /// can ([`TargetLimits::library_integer_rows`]; `int8=0|1`, on by default).
    pub library_integer: bool,
    /// Whether a tiled contraction against block-quantized weights below the library's rows
    /// (`lib_rows`: a batched decode step's 9 to 63 rows, a short prompt chunk) multiplies in
    /// f16, the weights decoded a unit per thread into each staged slice (`block_tiles=0|1|2`,
    /// on where there are matrix units by default): the graph rounds both sides to f16 as it
    /// does for the library ([`crate::precision`]), but the decoded weights never leave the
    /// multiprocessor. Off, such contractions take the tf32 tiles, a weight element decoded
    /// per staged element (2.1x slower for 16 rows of a 1B Q4_0 model on the H100).
    pub block_tiles: BlockTiles,
    /// Workgroups of such a kernel a multiprocessor runs at once, for choosing how many ways
    /// to split the contraction axis so the grid fills whole waves (`block_wgs=N`, 1 to 64; 4
    /// by default, as `tile_resident` bounds the registers for).
    pub block_workgroups: u32,
    /// Workgroups of such a kernel each multiprocessor should be able to hold at once, a bound
    /// on its registers (`tile_resident=N`; 4 by default, 64 registers a thread; 0: no bound).
    pub block_min_resident: u32,
    /// Contraction elements such a kernel stages per slice, at most (`block_tk=32|64|128`; 64
    /// by default): narrower where the slices would not fit.
    pub block_slice: u32,
    /// Sets of slices such a kernel stages in turn (`tile_buffers=1|2`; 2 by default, where
    /// they fit): with two, one barrier a slice, and a warp done multiplying one set stages
    /// the other while the rest still multiply.
    pub block_buffers: u32,
    /// Whether such a kernel with two sets of slices issues the next slice's loads (the block
    /// words and the left side) before multiplying the current one, so their latency overlaps
    /// the products (`tile_prefetch=0|1`; off by default: on an H100 it took 8B Q4_K_M's 16
    /// rows from 1430 to 1348 tok/s, whose tiles are bound by decoding, not by the loads).
    pub block_prefetch: bool,
    /// How such a kernel hands a slice's units to threads (`tile_units=across|along`): a
    /// column's consecutive units to consecutive threads (`along`, the default: a warp's loads
    /// touch 2 to 4 times fewer rows of the weights, for 2-way conflicting stores; on an H100,
    /// 16 rows of a 1B Q4_0 model 5146 -> 6941 tok/s, of a 1B Q4_K_M 6411 -> 6882), or
    /// consecutive columns (`across`: stores that never share a bank).
    pub block_units_along: bool,
}

/// Where tiled contractions against block-quantized weights stage them a unit at a time, both
/// sides rounded to f16 in the graph ([`Tuning::block_tiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTiles {
    /// Nowhere: the weights are decoded element by element, in f32 (`block_tiles=0`).
    Off,
    /// Where the target has matrix units, which multiply the f16 values (`block_tiles=1`, the
    /// default).
    MatrixUnits,
    /// On every target, FMA pipes included (`block_tiles=2`): what the shared suite runs on
    /// lavapipe and the CPU device to check the staging the matrix-unit kernels use.
    Everywhere,
}

/// How tiled contractions (a prefill's, a batched step's) use a target's matrix units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixUnits {
    /// Not at all: every product on the FMA pipes (`mma=0`).
    Off,
    /// tf32 products, each f32 factor split into two tf32 parts and three products summed, so
    /// the sums keep f32 accuracy: the oracle's results up to reassociation (`mma=1`, the
    /// default).
    Tf32,
    /// Contractions against f16 or bf16 weights multiply in that half precision, one product
    /// per pair, f32 sums: the planner first rounds the left side to the weights' type, an
    /// explicit `Cast` in the graph the oracle evaluates too ([`crate::precision`]). Other
    /// weights take the tf32 path (`mma=half`). Opt-in: on the H200 (session 9) it prefilled
    /// the 1B F16 model at 12.2k tok/s against tf32's 13.8k, since its operands are staged as
    /// f32 and converted per fragment; f16 staging in shared memory is what it needs to pay.
    Half,
}

/// How far a kernel's launch may overlap the end of the kernel before it. Every rendered CUDA
/// kernel first waits for its predecessors to finish and their writes to be visible, so only
/// the launch itself (block scheduling, argument setup) overlaps: results never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchOverlap {
    /// Each kernel launches after the one before it has finished.
    Off,
    /// The next kernel is launched as the workgroups of this one exit.
    AtExit,
    /// The next kernel is launched once every workgroup of this one has started (each signals
    /// it after its wait), so its workgroups are placed while this one runs.
    Early,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            gemv_bytes_per_step: 64,
            gemv_dense_bytes_per_step: 128,
            gemv_wide_loads: true,
            gemv_team_shuffles: true,
            routed_units: true,
            paged_row_runs: true,
            gemv_max_workgroups: None,
            gemv_waves: 2,
            gemv_min_resident: 2,
            gemv_block_waves: 8,
            gemv_block_min_resident: 4,
            gemv_columns: 2,
            gemv_word_columns: 1,
            gemv_wide_shared: true,
            gemv_block_pairs: false,
            gemv_whole_blocks: true,
            launch_overlap: LaunchOverlap::AtExit,
            attention_tiles: true,
            decode_attention_rows: true,
            decode_group_heads: true,
            decode_group_lone: false,
            decode_workgroups: 2,
            decode_positions: 8,
            attention_mma: true,
            attention_mma_sinks: true,
            attention_causal_bound: true,
            gemm_matrix_units: MatrixUnits::Tf32,
            library_gemm: true,
            gemv_rows: None,
            grouped_rows: 8,
            grouped_resident: None,
            routed_tile_rows: 64,
            library_packed_rows: 64,
            library_decode: true,
            library_integer: true,
            block_tiles: BlockTiles::MatrixUnits,
            block_workgroups: 4,
            block_min_resident: 4,
            block_slice: 64,
            block_buffers: 2,
            block_prefetch: false,
            block_units_along: true,
        }
    }
}

/// Left-side rows from which the CPU's contraction library multiplies block-quantized weights
/// in 8-bit integers (`contract.c`'s packed product); a decode step's few rows stay exact f32.
pub const CPU_INTEGER_ROWS: u32 = 16;

/// A `POOT_TUNING` setting that does not parse.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "POOT_TUNING: `{item}` is not one of bytes=N, dense_bytes=N, wide=0|1, shuffle=0|1, routed=0|1, \
     groups=N|none, waves=N, resident=N, block_waves=N, block_resident=N, columns=N, word_columns=N, wide_shared=0|1, pairs=0|1, \
     whole=0|1, overlap=0|1|2, attn_tiles=0|1, decode_attn=0|1, decode_group=0|1, decode_group_lone=0|1, decode_wgs=1..64, decode_positions=1|2|4|8|16, attn_mma=0|1, attn_mma_sinks=0|1, attn_bound=0|1, mma=0|1|half, lib=0|1, lib_decode=0|1, int8=0|1, lib_rows=N (9 or more), block_tiles=0|1|2, block_wgs=1..64, tile_resident=N, block_tk=32|64|128, tile_buffers=1|2, tile_prefetch=0|1, tile_units=across|along, gemv_rows=1..32, group_rows=4|8|16|32, group_resident=1..8, routed_tiles=N (comma-separated; columns 1, 2, 4 or 8)"
)]
pub struct TuningError {
    pub item: String,
}

impl Tuning {
    /// The defaults with the comma-separated `key=value` overrides of `spec` applied.
    pub fn parse(spec: &str) -> Result<Tuning, TuningError> {
        let mut t = Tuning::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || TuningError {
                item: item.to_string(),
            };
            let (key, value) = item.split_once('=').ok_or_else(bad)?;
            let flag = || match value {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(bad()),
            };
            let bytes = || {
                value
                    .parse()
                    .ok()
                    .filter(|&b: &u32| (4..=256).contains(&b))
                    .ok_or_else(bad)
            };
            let columns = || {
                value
                    .parse()
                    .ok()
                    .filter(|&c: &u32| matches!(c, 1 | 2 | 4 | 8))
                    .ok_or_else(bad)
            };
            match key {
                "bytes" => t.gemv_bytes_per_step = bytes()?,
                "dense_bytes" => t.gemv_dense_bytes_per_step = bytes()?,
                "wide" => t.gemv_wide_loads = flag()?,
                "waves" => t.gemv_waves = value.parse().ok().ok_or_else(bad)?,
                "resident" => t.gemv_min_resident = value.parse().ok().ok_or_else(bad)?,
                "block_waves" => t.gemv_block_waves = value.parse().ok().ok_or_else(bad)?,
                "block_resident" => {
                    t.gemv_block_min_resident = value.parse().ok().ok_or_else(bad)?
                }
                "shuffle" => t.gemv_team_shuffles = flag()?,
                "routed" => t.routed_units = flag()?,
                "paged_runs" => t.paged_row_runs = flag()?,
                "columns" => t.gemv_columns = columns()?,
                "word_columns" => t.gemv_word_columns = columns()?,
                "wide_shared" => t.gemv_wide_shared = flag()?,
                "pairs" => t.gemv_block_pairs = flag()?,
                "whole" => t.gemv_whole_blocks = flag()?,
                "attn_tiles" => t.attention_tiles = flag()?,
                "decode_attn" => t.decode_attention_rows = flag()?,
                "attn_mma" => t.attention_mma = flag()?,
                "attn_mma_sinks" => t.attention_mma_sinks = flag()?,
                "attn_bound" => t.attention_causal_bound = flag()?,
                "decode_group" => t.decode_group_heads = flag()?,
                "decode_group_lone" => t.decode_group_lone = flag()?,
                "decode_positions" => {
                    t.decode_positions = value
                        .parse()
                        .ok()
                        .filter(|n: &u32| n.is_power_of_two() && *n <= 16)
                        .ok_or_else(bad)?
                }
                "decode_wgs" => {
                    t.decode_workgroups = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(bad)?
                }
                "lib" => t.library_gemm = flag()?,
                "int8" => t.library_integer = flag()?,
                "lib_decode" => t.library_decode = flag()?,
                "block_wgs" => {
                    t.block_workgroups = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(bad)?
                }
                "tile_prefetch" => t.block_prefetch = flag()?,
                "tile_units" => {
                    t.block_units_along = match value {
                        "across" => false,
                        "along" => true,
                        _ => return Err(bad()),
                    }
                }
                "tile_resident" => t.block_min_resident = value.parse().ok().ok_or_else(bad)?,
                "tile_buffers" => {
                    t.block_buffers = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=2).contains(n))
                        .ok_or_else(bad)?
                }
                "block_tk" => {
                    t.block_slice = value
                        .parse()
                        .ok()
                        .filter(|n| [32, 64, 128].contains(n))
                        .ok_or_else(bad)?
                }
                "block_tiles" => {
                    t.block_tiles = match value {
                        "0" => BlockTiles::Off,
                        "1" => BlockTiles::MatrixUnits,
                        "2" => BlockTiles::Everywhere,
                        _ => return Err(bad()),
                    }
                }
                "lib_rows" => {
                    t.library_packed_rows =
                        value.parse().ok().filter(|&r| r >= 9).ok_or_else(bad)?
                }
                "gemv_rows" => {
                    t.gemv_rows = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|r| (1..=32).contains(r))
                            .ok_or_else(bad)?,
                    )
                }
                "group_resident" => {
                    t.grouped_resident = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|r| (1..=8).contains(r))
                            .ok_or_else(bad)?,
                    )
                }
                "routed_tiles" => t.routed_tile_rows = value.parse().map_err(|_| bad())?,
                "group_rows" => {
                    t.grouped_rows = value
                        .parse()
                        .ok()
                        .filter(|r| [4, 8, 16, 32].contains(r))
                        .ok_or_else(bad)?
                }
                "mma" => {
                    t.gemm_matrix_units = match value {
                        "0" => MatrixUnits::Off,
                        "1" => MatrixUnits::Tf32,
                        "half" => MatrixUnits::Half,
                        _ => return Err(bad()),
                    }
                }
                "overlap" => {
                    t.launch_overlap = match value {
                        "0" => LaunchOverlap::Off,
                        "1" => LaunchOverlap::AtExit,
                        "2" => LaunchOverlap::Early,
                        _ => return Err(bad()),
                    }
                }
                "groups" => {
                    t.gemv_max_workgroups = match value {
                        "none" => None,
                        v => Some(v.parse().ok().filter(|&g: &u32| g > 0).ok_or_else(bad)?),
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(t)
    }

    /// The defaults, with the overrides of the `POOT_TUNING` environment variable when set.
    pub fn from_env() -> Result<Tuning, TuningError> {
        match std::env::var("POOT_TUNING") {
            Ok(spec) => Tuning::parse(&spec),
            Err(_) => Ok(Tuning::default()),
        }
    }
}

/// A backend and its device's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub backend: Backend,
    pub limits: TargetLimits,
    pub tuning: Tuning,
}

impl Target {
    /// An NVIDIA data-center GPU (H200 class).
    pub fn ptx_preset() -> Target {
        Target {
            backend: Backend::Ptx,
            limits: TargetLimits {
                max_buffer_bytes: 80 << 30,
                max_groups_x: i32::MAX as u32,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 48 << 10,
                max_bindings: u32::MAX,
                subgroup_size: 32,
                multiprocessors: Some(132),
                // What an H200 reports as usable (of its 141 GB).
                memory_bytes: Some(139 << 30),
                group_ranks: 1,
                matrix_tf32: true,
                library_gemm: true,
                library_exact: false,
                library_integer_rows: None,
            },
            tuning: Tuning::default(),
        }
    }

    /// A desktop Vulkan driver through wgpu (RADV's largest binding).
    pub fn wgpu_preset() -> Target {
        Target {
            backend: Backend::Wgpu,
            limits: TargetLimits {
                max_buffer_bytes: 1_342_177_280,
                max_groups_x: 65535,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 32 << 10,
                max_bindings: 16,
                subgroup_size: 32,
                multiprocessors: None,
                // A 16 GiB desktop card.
                memory_bytes: Some(16 << 30),
                group_ranks: 1,
                matrix_tf32: false,
                library_gemm: false,
                library_exact: false,
                library_integer_rows: None,
            },
            tuning: Tuning::default(),
        }
    }

    /// A desktop Vulkan driver through ash (raw Vulkan): the same SPIR-V as wgpu, planned against
    /// the limits wgpu's preset takes from RADV (the 1.25 GiB largest binding, 16 storage
    /// bindings a kernel); an attached device reports its own.
    pub fn vulkan_preset() -> Target {
        Target {
            backend: Backend::Vulkan,
            ..Target::wgpu_preset()
        }
    }

    /// Mesa's software Vulkan (lavapipe) through raw Vulkan, as CI runs it: wgpu's lavapipe
    /// preset ([`Target::lavapipe_preset`]; lavapipe reports the same limits to ash as to wgpu:
    /// a 128 MiB largest binding, 8-wide subgroups, one 2 GiB heap).
    pub fn vulkan_lavapipe_preset() -> Target {
        Target {
            backend: Backend::Vulkan,
            ..Target::lavapipe_preset()
        }
    }

    /// The host CPU: workgroups run as loops over their threads, with no subgroups, no
    /// matrix units and no binding limit; shared memory is a stack array.
    pub fn cpu_preset() -> Target {
        Target {
            backend: Backend::Cpu,
            limits: TargetLimits {
                max_buffer_bytes: 1 << 40,
                max_groups_x: u32::MAX,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 48 << 10,
                max_bindings: u32::MAX,
                subgroup_size: 1,
                multiprocessors: None,
                memory_bytes: None,
                group_ranks: 1,
                matrix_tf32: false,
                library_gemm: false,
                library_exact: true,
                library_integer_rows: Some(CPU_INTEGER_ROWS),
            },
            tuning: Tuning::default(),
        }
    }

    /// An AMD data-center GPU (MI300X class, gfx942) over HSA: 64-lane wavefronts, 64 KiB of
    /// workgroup memory, no buffer limit beyond its memory. No matrix-unit kernels (the
    /// renderer's matrix tiles are PTX's) and no vendor library.
    pub fn rocm_preset() -> Target {
        Target {
            backend: Backend::Rocm,
            limits: TargetLimits {
                // What an MI300X reports as usable (of its 192 GB).
                max_buffer_bytes: 191 << 30,
                // A dispatch packet's grid is a u32 count of work-items along each axis.
                max_groups_x: u32::MAX / 1024,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 64 << 10,
                max_bindings: u32::MAX,
                subgroup_size: 64,
                multiprocessors: Some(304),
                memory_bytes: Some(191 << 30),
                group_ranks: 1,
                matrix_tf32: false,
                library_gemm: false,
                library_exact: false,
                library_integer_rows: None,
            },
            tuning: Tuning::default(),
        }
    }

    /// Mesa's software Vulkan (lavapipe), as CI runs it.
    pub fn lavapipe_preset() -> Target {
        let mut t = Target::wgpu_preset();
        t.limits.max_buffer_bytes = 128 << 20;
        t.limits.subgroup_size = 8;
        // The one heap Mesa 22's lavapipe reports (it allocates from host memory).
        t.limits.memory_bytes = Some(2 << 30);
        t
    }

    /// Whether kernels may exchange values between the threads of a subgroup in registers: the
    /// CUDA renderer's warp shuffles, on a device with 32-thread warps, and the HIP renderer's
    /// wavefront shuffles on 32- or 64-lane wavefronts (teams stay within 32 lanes, so xor
    /// partners never cross a 32-lane half). (The WGSL renderer does not enable subgroup
    /// operations.)
    pub fn team_shuffles(&self) -> bool {
        match self.backend {
            Backend::Ptx => self.limits.subgroup_size == 32,
            Backend::Rocm => matches!(self.limits.subgroup_size, 32 | 64),
            Backend::Wgpu | Backend::Vulkan | Backend::Cpu => false,
        }
    }

    /// Whether a workgroup's threads run as loops on one core (the CPU): kernels shaped for
    /// one thread with loops over features vectorise there, GPU-shaped teams do not.
    pub fn threads_are_loops(&self) -> bool {
        self.backend == Backend::Cpu
    }

    /// How tiled contractions multiply on this target's matrix units (warp-wide `mma.sync`, a
    /// PTX instruction): as tuned where the device has them, [`MatrixUnits::Off`] elsewhere
    /// (every backend but PTX).
    pub fn matrix_units(&self) -> MatrixUnits {
        if self.backend == Backend::Ptx && self.team_shuffles() && self.limits.matrix_tf32 {
            self.tuning.gemm_matrix_units
        } else {
            MatrixUnits::Off
        }
    }

    /// Whether the library takes a contraction of `rows` left-side rows against
    /// block-quantized weights (decoded to f16 for it): from
    /// [`Tuning::library_packed_rows`] rows, where the device has a library.
    pub fn library_takes_blocks(&self, rows: usize) -> bool {
        self.library_contractions() && rows >= self.tuning.library_packed_rows
    }

    /// Whether tiled contractions of fewer rows than the library's against block-quantized
    /// weights multiply in f16 on the matrix units, their weights decoded per staged slice
    /// ([`Tuning::block_tiles`]): where the device has matrix units and the tuning allows.
    pub fn block_tiles(&self) -> bool {
        match self.tuning.block_tiles {
            BlockTiles::Off => false,
            BlockTiles::MatrixUnits => self.matrix_units() != MatrixUnits::Off,
            BlockTiles::Everywhere => true,
        }
    }

    /// Whether attention over many query rows may use the matrix units (tf32 products split for
    /// f32 accuracy): where the device has them and the tuning allows.
    pub fn attention_matrix_units(&self) -> bool {
        self.backend == Backend::Ptx
            && self.team_shuffles()
            && self.limits.matrix_tf32
            && self.tuning.attention_mma
    }

    /// Whether contractions against stored f16 or bf16 weights may be given to the device's
    /// library (where it has one and the tuning allows).
    pub fn library_contractions(&self) -> bool {
        self.limits.library_gemm && self.tuning.library_gemm
    }

    /// Whether the device's half-precision library takes weights stored in block format `b` as
    /// they are and decodes them to f16 itself (where the tuning allows).
    pub fn library_decodes(&self, b: poot_formats::BlockFormat) -> bool {
        self.library_contractions()
            && self.tuning.library_decode
            && crate::plan::LIBRARY_DECODED_BLOCKS.contains(&b)
    }

    /// Whether contractions against stored weights go to the device's exact library (where it
    /// has one and the tuning allows).
    pub fn exact_library(&self) -> bool {
        self.limits.library_exact && self.tuning.library_gemm
    }

    /// Left-side rows from which the exact library multiplies block-quantized weights in 8-bit
    /// integers (where it does and the tuning allows).
    pub fn integer_library_rows(&self) -> Option<usize> {
        let rows = self.limits.library_integer_rows?;
        (self.exact_library() && self.tuning.library_integer).then_some(rows as usize)
    }

    /// Whether tiled contractions against f16 or bf16 weights multiply in that precision (on
    /// the matrix units or in the library), so the planner rounds their left side first
    /// ([`crate::precision`]).
    pub fn half_operands(&self) -> bool {
        self.matrix_units() == MatrixUnits::Half || self.library_contractions()
    }

    /// The most left-side rows a contraction takes in the decode-shaped kernels
    /// ([`Tuning::gemv_rows`]): 2 where the tiles multiply on the matrix units, 8 elsewhere.
    /// With more rows the decode-shaped kernel's left sides outgrow shared memory and are
    /// restaged for every step over the columns: on an H100 (session 27), 4 and 8 rows of an
    /// 8B Q4_K_M model decoded 2.6x and 3.3x faster tiled, 8 rows of a 1B F16 one 1.5x, and 2
    /// rows of the 8B model 4% slower.
    pub fn gemv_rows(&self) -> usize {
        self.tuning.gemv_rows.unwrap_or(match self.matrix_units() {
            MatrixUnits::Off => 8,
            _ => 2,
        })
    }

    /// Left-side rows from which a contraction is tiled; fewer are decode-shaped.
    pub fn tiled_min_rows(&self) -> usize {
        self.gemv_rows() + 1
    }

    /// This target as rank of a tensor-parallel group of `ranks` (each rank plans against its
    /// own device's limits).
    pub fn in_group(mut self, ranks: usize) -> Target {
        self.limits.group_ranks = ranks;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_overrides_parse_and_bad_ones_are_named() {
        assert_eq!(Tuning::parse("").unwrap(), Tuning::default());
        let t = Tuning::parse(
            "bytes=64, shuffle=0,wide=0,groups=528,dense_bytes=64,waves=4,resident=0,columns=4,\
             word_columns=2,wide_shared=0,pairs=1,whole=0,block_waves=6,block_resident=3,overlap=2,attn_tiles=0,decode_attn=0,decode_group=0,decode_wgs=8,decode_positions=8,attn_mma=0,mma=0,lib=1,int8=0,lib_decode=0,gemv_rows=16,lib_rows=64,block_tiles=0,block_wgs=2,tile_resident=3,block_tk=128,tile_buffers=1,tile_prefetch=1,tile_units=across",
        )
        .unwrap();
        assert_eq!(
            t,
            Tuning {
                gemv_bytes_per_step: 64,
                gemv_dense_bytes_per_step: 64,
                gemv_wide_loads: false,
                gemv_team_shuffles: false,
                routed_units: true,
                paged_row_runs: true,
                gemv_max_workgroups: Some(528),
                gemv_waves: 4,
                gemv_min_resident: 0,
                gemv_block_waves: 6,
                gemv_block_min_resident: 3,
                gemv_columns: 4,
                gemv_word_columns: 2,
                gemv_wide_shared: false,
                gemv_block_pairs: true,
                gemv_whole_blocks: false,
                launch_overlap: LaunchOverlap::Early,
                attention_tiles: false,
                decode_attention_rows: false,
                decode_group_heads: false,
                decode_group_lone: false,
                decode_workgroups: 8,
                decode_positions: 8,
                attention_mma: false,
                attention_mma_sinks: true,
                attention_causal_bound: true,
                gemm_matrix_units: MatrixUnits::Off,
                library_gemm: true,
                gemv_rows: Some(16),
                grouped_rows: 8,
                grouped_resident: None,
                routed_tile_rows: 64,
                library_packed_rows: 64,
                library_decode: false,
                library_integer: false,
                block_tiles: BlockTiles::Off,
                block_workgroups: 2,
                block_min_resident: 3,
                block_slice: 128,
                block_buffers: 1,
                block_prefetch: true,
                block_units_along: false,
            }
        );
        for (spec, units) in [
            ("mma=1", MatrixUnits::Tf32),
            ("mma=half", MatrixUnits::Half),
        ] {
            assert_eq!(Tuning::parse(spec).unwrap().gemm_matrix_units, units);
        }
        assert_eq!(
            Tuning::parse("overlap=0").unwrap().launch_overlap,
            LaunchOverlap::Off
        );
        assert_eq!(
            Tuning::parse("groups=none").unwrap().gemv_max_workgroups,
            None
        );
        for bad in [
            "bytes",
            "bytes=2",
            "bytes=x",
            "wide=yes",
            "groups=0",
            "lanes=8",
            "columns=3",
            "word_columns=0",
            "overlap=3",
            "mma=f32",
            "block_tiles=3",
            "block_wgs=0",
            "block_tk=16",
            "tile_buffers=3",
            "tile_units=rows",
        ] {
            let e = Tuning::parse(bad).unwrap_err();
            assert_eq!(e.item, bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn matrix_units_only_where_the_device_has_them() {
        assert_eq!(Target::ptx_preset().matrix_units(), MatrixUnits::Tf32);
        assert_eq!(Target::wgpu_preset().matrix_units(), MatrixUnits::Off);
        let mut old = Target::ptx_preset();
        old.limits.matrix_tf32 = false;
        assert_eq!(old.matrix_units(), MatrixUnits::Off);
    }

    #[test]
    fn cuda_warps_and_amd_wavefronts_shuffle() {
        assert!(Target::ptx_preset().team_shuffles());
        assert!(Target::rocm_preset().team_shuffles());
        let mut rdna = Target::rocm_preset();
        rdna.limits.subgroup_size = 32;
        assert!(rdna.team_shuffles());
        rdna.limits.subgroup_size = 16;
        assert!(!rdna.team_shuffles());
        assert!(!Target::wgpu_preset().team_shuffles());
        assert!(!Target::lavapipe_preset().team_shuffles());
    }

    #[test]
    fn rocm_gets_no_ptx_matrix_tiles_even_when_told_it_has_matrix_units() {
        let mut t = Target::rocm_preset();
        assert_eq!(t.matrix_units(), MatrixUnits::Off);
        t.limits.matrix_tf32 = true;
        t.tuning.gemm_matrix_units = MatrixUnits::Half;
        assert_eq!(t.matrix_units(), MatrixUnits::Off);
        assert!(!t.library_contractions() && !t.exact_library());
    }
}
