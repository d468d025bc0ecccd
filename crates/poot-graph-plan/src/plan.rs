//! A compiled plan: kernels, the buffers they bind, and the dispatch list one step replays.

pub use poot_graph_ir::CollectiveOp;
use poot_graph_ir::{DType, Slot, TensorType};

use crate::target::Target;
use poot_kernel::Kernel;

/// Index of a buffer in [`Plan::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// What a buffer holds, and so who fills it.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferRole {
    /// A constant, uploaded once as stored (`bytes` of the named weight or table).
    Const { name: String },
    /// A row chunk of a constant too large for one buffer: `len_bytes` of the named constant's
    /// stored bytes from `offset_bytes` (see [`crate::legalize`]).
    ConstPart {
        name: String,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// A constant the planner made (a codebook table), with its words.
    Table { words: Vec<u32> },
    /// A per-step input the host rewrites before each step.
    Slot { slot: Slot },
    /// A carried state buffer, updated in place by the step.
    State { name: String },
    /// Intermediates, at offsets fixed by the plan.
    Scratch,
}

/// One device buffer of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub role: BufferRole,
    pub size_bytes: u64,
}

/// One launch of the step, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    pub kernel: usize,
    pub grid: [u32; 3],
    /// One buffer per kernel parameter, in parameter order.
    pub args: Vec<BufferId>,
    /// The graph value this dispatch computes (`l3.attn.q`), for diagnostics.
    pub label: String,
}

/// A collective the step runs between two dispatches: not a kernel but a call into the device's
/// group (NCCL on PTX), recorded into the same replay as the kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    /// Runs after the first `before` dispatches and before the rest.
    pub before: usize,
    pub op: CollectiveOp,
    /// The rank's operand: its partial value (f32 words) for an all-reduce; for a broadcast the
    /// root's value (32-bit words of any type), unread on the other ranks.
    pub src: BufferId,
    /// Where every rank receives the result (another buffer than `src`).
    pub dst: BufferId,
    /// 32-bit elements of `src` and `dst`.
    pub n_elems: u64,
    /// The graph value it computes (`l3.attn_out`), for diagnostics.
    pub label: String,
}

/// The half-precision type a library contraction multiplies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HalfType {
    F16,
    BF16,
}

/// How a library contraction's weights are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightWords {
    /// The stored half elements of a constant.
    Stored,
    /// f32 words the graph rounded to the half type (block-quantized weights decoded for the
    /// library), `cols x depth`; the device converts them exactly, as it does the left side.
    F32,
    /// GGUF blocks as stored (`cols` rows of whole blocks) that the graph decodes and rounds to
    /// f16: the device decodes each element as the oracle does and rounds it to f16 itself,
    /// in one pass, instead of a kernel writing the decoded f32 words first. Only the formats
    /// of [`LIBRARY_DECODED_BLOCKS`].
    Blocks(poot_formats::BlockFormat),
}

/// The block formats a half-precision library decodes to f16 itself
/// ([`WeightWords::Blocks`]; the PTX device's decoders implement exactly these).
pub const LIBRARY_DECODED_BLOCKS: [poot_formats::BlockFormat; 8] = EXACT_LIBRARY_BLOCKS;

/// Weights as stored, for a library that decodes them itself (the CPU device's): each element
/// decoded as the graph's oracle decodes it, up to an ulp where a multiply-add is fused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoredWeights {
    F32,
    F16,
    BF16,
    /// GGUF blocks, rows of whole blocks back to back.
    Blocks(poot_formats::BlockFormat),
}

/// The block formats a library taking [`LibraryOperands::Exact`] decodes (the CPU device's
/// `contract.c` implements exactly these).
pub const EXACT_LIBRARY_BLOCKS: [poot_formats::BlockFormat; 8] = {
    use poot_formats::BlockFormat as B;
    [
        B::Q4_0,
        B::Q4_1,
        B::Q5_0,
        B::Q5_1,
        B::Q8_0,
        B::Q4_K,
        B::Q5_K,
        B::Q6_K,
    ]
};

/// What a library contraction multiplies, and in which precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibraryOperands {
    /// Half-precision products with f32 sums (cuBLASLt on PTX): the left side holds f32 words
    /// the graph already rounded to `half` ([`crate::precision`]), so the device's conversion of
    /// them is exact; the weights are a stored `half` constant or f32 words rounded to it.
    Half { half: HalfType, words: WeightWords },
    /// f32 products with f32 sums of the left side as computed against the weights decoded
    /// exactly from how they are stored (the CPU device's library): the graph's contraction up
    /// to the order of its sums, at any row count.
    Exact(StoredWeights),
    /// Integer products of the weights' block integers (in this block format) by the left side
    /// rounded to 8-bit blocks of [`crate::activation_blocks::BLOCK`] (the CPU device's library,
    /// over a prefill's rows): the left-side buffer holds the values before the rounding, which
    /// the library computes as the graph writes it ([`crate::activation_blocks`]).
    Integer(poot_formats::BlockFormat),
}

/// A contraction the step gives to the device's library (cuBLASLt on PTX, the contraction
/// library on the CPU) instead of a kernel: `out[m, n] = sum_k lhs[m, k] * w[n, k]` (or
/// `w[k, n]` when the weights are not transposed), f32 sums, the operands as
/// [`LibraryOperands`] says.
#[derive(Clone, Debug, PartialEq)]
pub struct LibraryContraction {
    /// Runs after the first `before` dispatches and before the rest.
    pub before: usize,
    /// Runs after this many of the plan's collectives (those with the same `before` are
    /// ordered by it).
    pub collectives_before: usize,
    pub operands: LibraryOperands,
    /// The left side, `rows x depth` f32 words, row-major.
    pub lhs: BufferId,
    /// The weights as stored: `cols x depth` when `transpose_weights`, else `depth x cols`.
    pub weights: BufferId,
    pub transpose_weights: bool,
    /// The result, `rows x cols` f32 words, row-major (another buffer than `lhs`).
    pub out: BufferId,
    pub rows: u32,
    pub cols: u32,
    pub depth: u32,
    /// The graph value it computes (`l3.attn.q`), for diagnostics.
    pub label: String,
}

/// Where a host-visible value lives and how its words read.
#[derive(Clone, Debug, PartialEq)]
pub struct HostValue {
    pub buffer: BufferId,
    /// The graph's type of the value.
    pub ty: TensorType,
    /// How it is stored on the device (see [`device_words`]).
    pub words: DeviceWords,
}

/// The device representation of a dense value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceWords {
    /// One f32 word per element (f32, and f16/bf16 intermediates held as rounded f32).
    F32,
    I32,
    /// One u32 word per element (u32, and bool/u8 intermediates as 0/1 or 0..=255).
    U32,
    /// Stored bytes as the checkpoint holds them (constants only).
    Stored,
    /// Two f16 elements per u32 word, element `2i` in the low half of word `i` (f16 states:
    /// an f16 KV cache).
    F16Pairs,
}

/// How a value of `dtype` is represented on the device when the plan computes it.
pub fn device_words(dtype: DType) -> DeviceWords {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => DeviceWords::F32,
        DType::I32 => DeviceWords::I32,
        DType::U32 | DType::U8 | DType::Bool => DeviceWords::U32,
        DType::Packed(_) | DType::Components(_) => DeviceWords::Stored,
    }
}

/// A compiled step.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub target: Target,
    pub kernels: Vec<Kernel>,
    pub buffers: Vec<BufferDecl>,
    pub dispatches: Vec<Dispatch>,
    /// The collectives the step runs between its dispatches, in order (empty on a device
    /// alone).
    pub collectives: Vec<Collective>,
    /// The contractions the step gives to the device's library, in order.
    pub contractions: Vec<LibraryContraction>,
    /// Each slot of the graph: the buffer the host writes, as device words.
    pub slots: Vec<(Slot, HostValue)>,
    /// Each state input's buffer (updated in place: the state output lands in the same buffer).
    pub states: Vec<(String, HostValue)>,
    /// Each constant's buffer and its stored type.
    pub consts: Vec<(String, HostValue)>,
    /// The primary outputs, in the graph's order.
    pub outputs: Vec<HostValue>,
}

/// Device memory a plan's buffers take, by what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Constants (whole and chunks) and the planner's codebook tables.
    pub weight_bytes: u64,
    pub state_bytes: u64,
    pub slot_bytes: u64,
    pub scratch_bytes: u64,
}

impl MemoryUse {
    pub fn total_bytes(&self) -> u64 {
        self.weight_bytes
            .saturating_add(self.state_bytes)
            .saturating_add(self.slot_bytes)
            .saturating_add(self.scratch_bytes)
    }
}

impl Plan {
    /// Bytes of intermediates the step needs.
    pub fn scratch_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|b| b.role == BufferRole::Scratch)
            .map(|b| b.size_bytes)
            .sum()
    }

    /// The memory every buffer of the plan takes. Each constant name counts once, so two names
    /// an executor backs with the same bytes (a tied embedding and head) count twice.
    pub fn memory(&self) -> MemoryUse {
        let mut m = MemoryUse::default();
        for b in &self.buffers {
            let sum = match b.role {
                BufferRole::Const { .. }
                | BufferRole::ConstPart { .. }
                | BufferRole::Table { .. } => &mut m.weight_bytes,
                BufferRole::State { .. } => &mut m.state_bytes,
                BufferRole::Slot { .. } => &mut m.slot_bytes,
                BufferRole::Scratch => &mut m.scratch_bytes,
            };
            *sum = sum.saturating_add(b.size_bytes);
        }
        m
    }

    /// Dispatches per kernel kind (`matmul`, `reduce`, `map`, ...), sorted by kind: what one
    /// step launches, for counting against the launch floor.
    pub fn dispatches_by_kind(&self) -> Vec<(String, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for d in &self.dispatches {
            let kind = self.kernels[d.kernel].kind();
            *counts.entry(kind.to_string()).or_insert(0) += 1;
        }
        counts.into_iter().collect()
    }
}
