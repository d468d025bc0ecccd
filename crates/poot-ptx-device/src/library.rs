//! cuBLASLt: the plan's library contractions ([`Command::Contract`]).
//!
//! A contraction's left side arrives as f32 words the graph already rounded to the half type,
//! so a small kernel of ours converts it exactly into a staging buffer of halves; cuBLASLt then
//! multiplies it with the stored half weights into f32 (`CUBLAS_COMPUTE_32F`). Block-quantized
//! weights are decoded to halves into the staging buffer first, in one pass from the stored
//! blocks ([`WeightWords::Blocks`]), or converted from f32 words a kernel of the plan decoded.
//! All of it runs on the device's stream and is captured into the step's CUDA graph with the
//! kernels around it.
//!
//! Everything a capture must not do is done before it: the staging buffer and cuBLASLt's
//! workspace are allocated (grown, never shrunk: an older recording keeps the allocations it
//! was captured with alive), and each shape's algorithm is chosen once by cuBLASLt's heuristic.
//! One staging buffer and one workspace serve every contraction, since all of them run in
//! order on the one stream.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys::{self, CUdeviceptr};
use poot_executor::{Command, Contraction, DeviceError};
use poot_executor::{HalfType, LibraryOperands, WeightWords};
use poot_formats::BlockFormat;

use crate::buffer::Allocation;
use crate::context::cu;
use crate::device::{PtxDevice, SourceKernel};
use crate::kernel::PtxKernel;

/// Bytes of workspace cuBLASLt may use (what PyTorch gives it on Hopper).
const WORKSPACE_BYTES: u64 = 32 << 20;
/// Threads per workgroup of the conversion kernels.
const CONVERT_THREADS: u32 = 256;

/// The conversion kernels: f32 words (already exact in the half type) to packed halves, four
/// per thread (`n4` groups of four; the planner only gives the library lengths divisible by 8).
const CONVERT_SOURCE: &str = r#"
extern "C" __global__ void poot_to_f16(const float4* __restrict__ src, uint2* __restrict__ dst,
                                       unsigned int n4) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = src[i];
    unsigned int lo, hi;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(v.y), "f"(v.x));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(v.w), "f"(v.z));
    dst[i] = make_uint2(lo, hi);
}

extern "C" __global__ void poot_to_bf16(const float4* __restrict__ src, uint2* __restrict__ dst,
                                        unsigned int n4) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = src[i];
    unsigned int lo, hi;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(v.y), "f"(v.x));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(v.w), "f"(v.z));
    dst[i] = make_uint2(lo, hi);
}
"#;

/// The decoders of block-quantized weights to f16, one thread per 32 elements (a block of the
/// 32-element formats, an eighth of a 256-element one), written as [`poot_formats`] decodes:
/// the same f32 operations in the same order, never fused (`__fmul_rn`, `__fadd_rn`), then
/// rounded to f16 to nearest, so each half is the graph's `Cast { to: F16 }` of its decoding.
/// The device's helpers come first ([`DECODE_PRELUDE`]); the decoders themselves are plain C
/// over them, which a test also builds for the host against the oracle's decoding.
fn decode_source() -> String {
    format!("{DECODE_PRELUDE}{DECODERS}")
}

/// What [`DECODERS`] needs from CUDA: reading an f16, storing 32 rounded halves.
const DECODE_PRELUDE: &str = r#"
#define POOT_ENTRY extern "C" __global__
#define POOT_INLINE __device__ __forceinline__

POOT_INLINE float half_at(const unsigned char* p) {
    unsigned short u = (unsigned short)p[0] | ((unsigned short)p[1] << 8);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(u));
    return f;
}

POOT_INLINE void store32(uint4* __restrict__ dst, unsigned int chunk, const float* y) {
    uint4* out = dst + 4 * (unsigned long long)chunk;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        unsigned int w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            asm("cvt.rn.f16x2.f32 %0, %1, %2;"
                : "=r"(w[k]) : "f"(y[8 * q + 2 * k + 1]), "f"(y[8 * q + 2 * k]));
        }
        out[q] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
"#;

/// One decoder per format, each thread decoding chunk `i` of `n` into `dst`.
const DECODERS: &str = r#"
POOT_INLINE unsigned int word_at(const unsigned char* p) {
    return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) |
           ((unsigned int)p[3] << 24);
}

#define POOT_CHUNK(bytes)                                           \
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;         \
    if (i >= n) return;                                             \
    const unsigned char* b = src + (unsigned long long)i * (bytes); \
    float y[32];

#define POOT_SUB_CHUNK(bytes)                                             \
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;               \
    if (i >= n) return;                                                   \
    const unsigned char* b = src + (unsigned long long)(i / 8) * (bytes); \
    const unsigned int s = i % 8;                                         \
    float y[32];

POOT_ENTRY void poot_decode_q4_0(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_CHUNK(18)
    float d = half_at(b);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        unsigned int q = b[2 + j];
        y[j] = __fmul_rn((float)((int)(q & 15) - 8), d);
        y[j + 16] = __fmul_rn((float)((int)(q >> 4) - 8), d);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q4_1(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_CHUNK(20)
    float d = half_at(b), m = half_at(b + 2);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        unsigned int q = b[4 + j];
        y[j] = __fadd_rn(__fmul_rn((float)(q & 15), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)(q >> 4), d), m);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q5_0(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_CHUNK(22)
    float d = half_at(b);
    unsigned int qh = word_at(b + 2);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        unsigned int q = b[6 + j];
        unsigned int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = __fmul_rn((float)((int)((q & 15) | h0) - 16), d);
        y[j + 16] = __fmul_rn((float)((int)((q >> 4) | h1) - 16), d);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q5_1(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_CHUNK(24)
    float d = half_at(b), m = half_at(b + 2);
    unsigned int qh = word_at(b + 4);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        unsigned int q = b[8 + j];
        unsigned int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = __fadd_rn(__fmul_rn((float)((q & 15) | h0), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)((q >> 4) | h1), d), m);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q8_0(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_CHUNK(34)
    float d = half_at(b);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        y[j] = __fmul_rn((float)(signed char)b[2 + j], d);
    }
    store32(dst, i, y);
}

// The scale and min of sub-block `s` of a Q4_K or Q5_K block's 12 packed scale bytes.
POOT_INLINE void scale_min_k4(unsigned int s, const unsigned char* q,
                                             unsigned int* sc, unsigned int* m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

POOT_ENTRY void poot_decode_q4_k(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_SUB_CHUNK(144)
    unsigned int sc, m;
    scale_min_k4(s, b + 4, &sc, &m);
    float d = __fmul_rn(half_at(b), (float)sc), dm = __fmul_rn(half_at(b + 2), (float)m);
    const unsigned char* q = b + 16 + 32 * (s / 2);
    unsigned int shift = 4 * (s % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        y[l] = __fsub_rn(__fmul_rn(d, (float)((q[l] >> shift) & 15)), dm);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q5_k(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_SUB_CHUNK(176)
    unsigned int sc, m;
    scale_min_k4(s, b + 4, &sc, &m);
    float d = __fmul_rn(half_at(b), (float)sc), dm = __fmul_rn(half_at(b + 2), (float)m);
    const unsigned char* qh = b + 16;
    const unsigned char* q = b + 48 + 32 * (s / 2);
    unsigned int shift = 4 * (s % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        unsigned int v = ((q[l] >> shift) & 15) + (((qh[l] >> s) & 1) << 4);
        y[l] = __fsub_rn(__fmul_rn(d, (float)v), dm);
    }
    store32(dst, i, y);
}

POOT_ENTRY void poot_decode_q6_k(const unsigned char* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned int n) {
    POOT_SUB_CHUNK(210)
    float d = half_at(b + 208);
    unsigned int half = s / 4, k = s % 4;
    const unsigned char* ql = b + 64 * half + 32 * (k % 2);
    const unsigned char* qh = b + 128 + 32 * half;
    const signed char* scales = (const signed char*)(b + 192 + 8 * half + 2 * k);
    unsigned int shift = 4 * (k / 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        int q = (int)(((ql[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[l] = __fmul_rn(__fmul_rn(d, (float)scales[l / 16]), (float)q);
    }
    store32(dst, i, y);
}
"#;

/// The entry of [`DECODERS`] that decodes format `b`, for the formats it has.
fn decoder_entry(b: BlockFormat) -> Option<&'static str> {
    Some(match b {
        BlockFormat::Q4_0 => "poot_decode_q4_0",
        BlockFormat::Q4_1 => "poot_decode_q4_1",
        BlockFormat::Q5_0 => "poot_decode_q5_0",
        BlockFormat::Q5_1 => "poot_decode_q5_1",
        BlockFormat::Q8_0 => "poot_decode_q8_0",
        BlockFormat::Q4_K => "poot_decode_q4_k",
        BlockFormat::Q5_K => "poot_decode_q5_k",
        BlockFormat::Q6_K => "poot_decode_q6_k",
        _ => return None,
    })
}

/// Elements each thread of a decoder writes.
const DECODE_CHUNK: u64 = 32;

/// A contraction's shape, the key of its chosen algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    half: HalfType,
    weight_words: WeightWords,
    transpose_weights: bool,
    rows: u32,
    cols: u32,
    depth: u32,
}

impl Shape {
    /// The shape of a half-precision contraction; an exact one (a plan made for a device with
    /// an exact library) is refused as this device having no such library.
    fn of(c: &Contraction<'_, PtxDevice>, device: &str) -> Result<Shape, DeviceError> {
        let LibraryOperands::Half { half, words } = c.operands else {
            return Err(DeviceError::NoLibrary {
                device: device.to_string(),
            });
        };
        Ok(Shape {
            half,
            weight_words: words,
            transpose_weights: c.transpose_weights,
            rows: c.rows,
            cols: c.cols,
            depth: c.depth,
        })
    }

    fn elems(self, n: u32, m: u32) -> u64 {
        u64::from(n) * u64::from(m)
    }

    fn lhs_elems(self) -> u64 {
        self.elems(self.rows, self.depth)
    }

    fn weight_elems(self) -> u64 {
        self.elems(self.cols, self.depth)
    }

    /// Where the converted weights start in the staging buffer (after the left side, aligned
    /// for the library's loads).
    fn staged_weights_offset(self) -> u64 {
        (2 * self.lhs_elems()).next_multiple_of(256)
    }

    /// Staging bytes: the converted left side, and the converted weights when they come as f32
    /// words.
    fn staging_bytes(self) -> u64 {
        match self.weight_words {
            WeightWords::Stored => 2 * self.lhs_elems(),
            WeightWords::F32 | WeightWords::Blocks(_) => {
                self.staged_weights_offset() + 2 * self.weight_elems()
            }
        }
    }

    /// Bytes the weights' buffer must hold: stored halves, f32 words, or whole blocks.
    fn weight_bytes(self) -> Option<u64> {
        match self.weight_words {
            WeightWords::Stored => Some(2 * self.weight_elems()),
            WeightWords::F32 => Some(4 * self.weight_elems()),
            WeightWords::Blocks(b) => {
                let row = b.row_bytes(usize::try_from(self.depth).ok()?)?;
                u64::try_from(row).ok()?.checked_mul(u64::from(self.cols))
            }
        }
    }
}

/// The device's cuBLASLt state.
pub(crate) struct Library {
    handle: lt::cublasLtHandle_t,
    algos: HashMap<Shape, lt::cublasLtMatmulAlgo_t>,
    staging: Option<Arc<Allocation>>,
    workspace: Option<Arc<Allocation>>,
    to_f16: Option<PtxKernel>,
    to_bf16: Option<PtxKernel>,
    /// The block decoders compiled so far.
    decoders: HashMap<BlockFormat, PtxKernel>,
}

// SAFETY: the handle is a plain library handle used only with the device's context current,
// from whichever thread holds the device (`&mut` or `&` of it, never both).
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    /// cuBLASLt, where its library loads and a handle can be made in the current context;
    /// `None` otherwise (plans then keep their contractions in kernels).
    pub(crate) fn open() -> Option<Library> {
        // cudarc panics on the first call into a library it cannot load: check first.
        // SAFETY: this only tries to load the library.
        if !unsafe { lt::is_culib_present() } {
            return None;
        }
        let mut handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device's context is current.
        let status = unsafe { lt::cublasLtCreate(&mut handle) };
        (status == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS).then_some(Library {
            handle,
            algos: HashMap::new(),
            staging: None,
            workspace: None,
            to_f16: None,
            to_bf16: None,
            decoders: HashMap::new(),
        })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: created by cublasLtCreate, destroyed once, while the context still lives
        // (the device declares the library before its context).
        unsafe {
            let _ = lt::cublasLtDestroy(self.handle);
        }
    }
}

fn failed(call: &str, status: lt::cublasStatus_t) -> DeviceError {
    DeviceError::BadLaunch {
        kernel: "library contraction".to_string(),
        reason: format!("{call} returned {status:?}"),
    }
}

fn check(call: &str, status: lt::cublasStatus_t) -> Result<(), DeviceError> {
    if status == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(failed(call, status))
    }
}

/// The descriptors of one contraction, destroyed on drop.
struct Descriptors {
    op: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    c: lt::cublasLtMatrixLayout_t,
}

impl Descriptors {
    /// `out` (column-major `cols x rows`, so row-major `rows x cols`) = `op(W) * lhsT`: the
    /// weights as column-major `depth x cols` transposed (stored `cols x depth` row-major), or
    /// column-major `cols x depth` as they are; the left side column-major `depth x rows`.
    fn new(s: Shape) -> Result<Descriptors, DeviceError> {
        let half = match s.half {
            HalfType::F16 => lt::cudaDataType::CUDA_R_16F,
            HalfType::BF16 => lt::cudaDataType::CUDA_R_16BF,
        };
        let mut d = Descriptors {
            op: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            c: std::ptr::null_mut(),
        };
        let (rows, cols, depth) = (u64::from(s.rows), u64::from(s.cols), u64::from(s.depth));
        // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (cublasOperation_t, an int attribute).
        let trans_a: i32 = if s.transpose_weights { 1 } else { 0 };
        let (a_rows, a_cols) = if s.transpose_weights {
            (depth, cols)
        } else {
            (cols, depth)
        };
        // SAFETY: valid out-pointers; attribute buffers of the sizes passed; every descriptor
        // made is destroyed by `Drop` (null ones are skipped).
        unsafe {
            check(
                "cublasLtMatmulDescCreate",
                lt::cublasLtMatmulDescCreate(
                    &mut d.op,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType::CUDA_R_32F,
                ),
            )?;
            check(
                "cublasLtMatmulDescSetAttribute",
                lt::cublasLtMatmulDescSetAttribute(
                    d.op,
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    (&trans_a as *const i32).cast(),
                    std::mem::size_of::<i32>(),
                ),
            )?;
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(&mut d.a, half, a_rows, a_cols, a_rows as i64),
            )?;
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(&mut d.b, half, depth, rows, depth as i64),
            )?;
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(
                    &mut d.c,
                    lt::cudaDataType::CUDA_R_32F,
                    cols,
                    rows,
                    cols as i64,
                ),
            )?;
        }
        Ok(d)
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each non-null descriptor was created above and is destroyed once.
        unsafe {
            for l in [self.a, self.b, self.c] {
                if !l.is_null() {
                    let _ = lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.op.is_null() {
                let _ = lt::cublasLtMatmulDescDestroy(self.op);
            }
        }
    }
}

impl PtxDevice {
    /// Makes ready what the library contractions among `commands` need before a capture:
    /// conversion kernels, a large enough staging buffer, the workspace and each shape's
    /// algorithm. Returns the allocations a recording of them must keep alive.
    pub(crate) fn prepare_contractions(
        &mut self,
        commands: &[Command<'_, Self>],
    ) -> Result<Vec<Arc<Allocation>>, DeviceError> {
        let shapes: Vec<Shape> = commands
            .iter()
            .filter_map(|c| match c {
                Command::Contract(c) => Some(Shape::of(c, &self.limits.name)),
                _ => None,
            })
            .collect::<Result<_, _>>()?;
        if shapes.is_empty() {
            return Ok(Vec::new());
        }
        if self.library.is_none() {
            return Err(DeviceError::NoLibrary {
                device: self.limits.name.clone(),
            });
        }
        if self.library.as_ref().is_some_and(|l| l.to_f16.is_none()) {
            let compile = |dev: &mut PtxDevice, entry: &str| {
                dev.compile_source(&SourceKernel {
                    name: entry,
                    entry,
                    source: CONVERT_SOURCE,
                    workgroup: CONVERT_THREADS,
                    n_params: 2,
                    takes_fault_buffer: false,
                    waits_for_predecessors: false,
                })
            };
            let f16 = compile(self, "poot_to_f16")?;
            let bf16 = compile(self, "poot_to_bf16")?;
            let lib = self.library.as_mut().expect("checked above");
            lib.to_f16 = Some(f16);
            lib.to_bf16 = Some(bf16);
        }
        for s in &shapes {
            let WeightWords::Blocks(b) = s.weight_words else {
                continue;
            };
            if self
                .library
                .as_ref()
                .is_some_and(|l| l.decoders.contains_key(&b))
            {
                continue;
            }
            let entry = decoder_entry(b).ok_or_else(|| DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: format!("no decoder of {} weights to f16", b.name()),
            })?;
            let source = decode_source();
            let k = self.compile_source(&SourceKernel {
                name: entry,
                entry,
                source: &source,
                workgroup: CONVERT_THREADS,
                n_params: 3,
                takes_fault_buffer: false,
                waits_for_predecessors: false,
            })?;
            self.library
                .as_mut()
                .expect("checked above")
                .decoders
                .insert(b, k);
        }
        let staging_bytes = shapes.iter().map(|s| s.staging_bytes()).max().unwrap_or(0);
        let have =
            |a: &Option<Arc<Allocation>>, bytes: u64| a.as_ref().is_some_and(|a| a.bytes >= bytes);
        if !have(
            &self.library.as_ref().expect("checked").staging,
            staging_bytes,
        ) {
            // Grown to the next power of two so a few larger steps do not each allocate.
            let buf = self.alloc_raw(staging_bytes.next_power_of_two())?;
            self.library.as_mut().expect("checked").staging = Some(buf);
        }
        if !have(
            &self.library.as_ref().expect("checked").workspace,
            WORKSPACE_BYTES,
        ) {
            let buf = self.alloc_raw(WORKSPACE_BYTES)?;
            self.library.as_mut().expect("checked").workspace = Some(buf);
        }
        for s in shapes {
            self.choose_algo(s)?;
        }
        let lib = self.library.as_ref().expect("checked");
        Ok(lib.staging.iter().chain(&lib.workspace).cloned().collect())
    }

    /// cuBLASLt's first choice for `s` (kept for later recordings).
    fn choose_algo(&mut self, s: Shape) -> Result<(), DeviceError> {
        let lib = self.library.as_mut().expect("prepared");
        if lib.algos.contains_key(&s) {
            return Ok(());
        }
        let d = Descriptors::new(s)?;
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        let workspace: u64 = WORKSPACE_BYTES;
        // SAFETY: a zeroed heuristic result is a valid out-value; the preference is destroyed
        // below on every path.
        let mut result: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let mut found: i32 = 0;
        // SAFETY: valid out-pointers and descriptors; the attribute buffer holds a u64.
        let status = unsafe {
            let made = lt::cublasLtMatmulPreferenceCreate(&mut pref);
            if made != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(failed("cublasLtMatmulPreferenceCreate", made));
            }
            let mut s = lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
            if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                s = lt::cublasLtMatmulAlgoGetHeuristic(
                    lib.handle,
                    d.op,
                    d.a,
                    d.b,
                    d.c,
                    d.c,
                    pref,
                    1,
                    &mut result,
                    &mut found,
                );
            }
            let _ = lt::cublasLtMatmulPreferenceDestroy(pref);
            s
        };
        check("cublasLtMatmulAlgoGetHeuristic", status)?;
        if found < 1 {
            return Err(DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: format!("cuBLASLt has no algorithm for {s:?}"),
            });
        }
        lib.algos.insert(s, result.algo);
        Ok(())
    }

    /// Submits one prepared contraction to the stream (eagerly, or into a capture): the left
    /// side's conversion, then the product.
    pub(crate) fn submit_contraction(&self, c: &Contraction<'_, Self>) -> Result<(), DeviceError> {
        let s = Shape::of(c, &self.limits.name)?;
        let lib = self
            .library
            .as_ref()
            .ok_or_else(|| DeviceError::NoLibrary {
                device: self.limits.name.clone(),
            })?;
        let (Some(staging), Some(workspace), Some(algo)) =
            (&lib.staging, &lib.workspace, lib.algos.get(&s))
        else {
            return Err(DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: "submitted before it was prepared".to_string(),
            });
        };
        let lhs_bytes = 4 * s.lhs_elems();
        let weight_bytes = s.weight_bytes().ok_or_else(|| DeviceError::BadLaunch {
            kernel: "library contraction".to_string(),
            reason: format!("{s:?}: weights over 2^64 bytes"),
        })?;
        let out_bytes = 4 * s.elems(s.rows, s.cols);
        for (b, need, what) in [
            (c.lhs, lhs_bytes, "left side"),
            (c.weights, weight_bytes, "weights"),
            (c.out, out_bytes, "result"),
        ] {
            if b.alloc.bytes < need || !Arc::ptr_eq(&b.alloc.ctx, &self.ctx) {
                return Err(DeviceError::BadLaunch {
                    kernel: "library contraction".to_string(),
                    reason: format!(
                        "its {what} needs {need} B of this device, the buffer has {} B",
                        b.alloc.bytes
                    ),
                });
            }
        }
        if staging.bytes < s.staging_bytes()
            || !s.lhs_elems().is_multiple_of(4)
            || !s.weight_elems().is_multiple_of(4)
        {
            return Err(DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: format!("{s:?} does not fit the prepared staging buffer"),
            });
        }
        let convert = match s.half {
            HalfType::F16 => lib.to_f16.as_ref(),
            HalfType::BF16 => lib.to_bf16.as_ref(),
        }
        .expect("prepared with the staging buffer");
        let groups_of_four = |n: u64| {
            u32::try_from(n / 4).map_err(|_| DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: format!("{s:?}: an operand over 2^34 elements"),
            })
        };
        self.launch_convert(
            convert,
            c.lhs.alloc.ptr,
            staging.ptr,
            groups_of_four(s.lhs_elems())?,
        )?;
        let weights = match s.weight_words {
            WeightWords::Stored => c.weights.alloc.ptr,
            WeightWords::F32 => {
                let at = staging.ptr + s.staged_weights_offset();
                self.launch_convert(
                    convert,
                    c.weights.alloc.ptr,
                    at,
                    groups_of_four(s.weight_elems())?,
                )?;
                at
            }
            WeightWords::Blocks(b) => {
                let at = staging.ptr + s.staged_weights_offset();
                let decoder = lib.decoders.get(&b).ok_or_else(|| DeviceError::BadLaunch {
                    kernel: "library contraction".to_string(),
                    reason: format!("{} weights submitted before their decoder", b.name()),
                })?;
                let chunks = u32::try_from(s.weight_elems() / DECODE_CHUNK).map_err(|_| {
                    DeviceError::BadLaunch {
                        kernel: "library contraction".to_string(),
                        reason: format!("{s:?}: weights over 2^37 elements"),
                    }
                })?;
                self.launch_convert(decoder, c.weights.alloc.ptr, at, chunks)?;
                at
            }
        };
        let d = Descriptors::new(s)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: every pointer is a live device allocation of this context holding at least
        // what the descriptors describe (checked above); the scalars are host f32s read during
        // the call; the workspace holds the bytes the algorithm was chosen for.
        let status = unsafe {
            lt::cublasLtMatmul(
                lib.handle,
                d.op,
                (&alpha as *const f32).cast(),
                weights as *const c_void,
                d.a,
                staging.ptr as *const c_void,
                d.b,
                (&beta as *const f32).cast(),
                c.out.alloc.ptr as *const c_void,
                d.c,
                c.out.alloc.ptr as *mut c_void,
                d.c,
                algo,
                workspace.ptr as *mut c_void,
                workspace.bytes as usize,
                self.ctx.stream as lt::cudaStream_t,
            )
        };
        check("cublasLtMatmul", status)
    }

    /// One launch of a conversion kernel over `n4` groups of four elements (or of a decoder
    /// over its chunks of 32).
    fn launch_convert(
        &self,
        k: &PtxKernel,
        src: CUdeviceptr,
        dst: CUdeviceptr,
        n4: u32,
    ) -> Result<(), DeviceError> {
        let (mut src, mut dst, mut n4v) = (src, dst, n4);
        let mut params: [*mut c_void; 3] = [
            (&mut src as *mut CUdeviceptr).cast(),
            (&mut dst as *mut CUdeviceptr).cast(),
            (&mut n4v as *mut u32).cast(),
        ];
        let groups = n4.div_ceil(CONVERT_THREADS).max(1);
        // SAFETY: a function of a loaded module of this context taking (ptr, ptr, u32); the
        // parameter values live until the call returns (the driver copies them).
        let r = unsafe {
            sys::cuLaunchKernel(
                k.function,
                groups,
                1,
                1,
                CONVERT_THREADS,
                1,
                1,
                0,
                self.ctx.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        cu(r).map_err(|e| self.cuda_failure("cuLaunchKernel of the half conversion", e))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;
    use std::process::{Command, Stdio};

    use poot_formats::{BlockFormat, decode_blocks};

    use super::{DECODERS, decoder_entry};

    /// What the decoders need on the host: plain C in place of CUDA's helpers and unfused f32
    /// operations.
    const HOST_PRELUDE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define POOT_ENTRY static
#define POOT_INLINE static inline
typedef struct { unsigned int x, y, z, w; } uint4;
static struct { unsigned int x; } blockIdx, blockDim, threadIdx;
static float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static float half_at(const unsigned char* p) {
    _Float16 h; memcpy(&h, p, 2); return (float)h;
}
static void store32(uint4* dst, unsigned int chunk, const float* y) {
    unsigned char* out = (unsigned char*)(dst + 4 * (unsigned long long)chunk);
    for (int j = 0; j < 32; ++j) { _Float16 h = (_Float16)y[j]; memcpy(out + 2 * j, &h, 2); }
}
"#;

    /// A `main` running every thread of decoder `entry` over the blocks on its standard input.
    fn driver(entry: &str) -> String {
        format!(
            r#"
int main(int argc, char** argv) {{
    unsigned int n = (unsigned int)atoi(argv[1]);
    long bytes = atol(argv[2]);
    unsigned char* in = malloc(bytes);
    if (fread(in, 1, bytes, stdin) != (size_t)bytes) return 2;
    uint4* out = calloc(4 * (size_t)n, sizeof(uint4));
    blockDim.x = 1;
    for (unsigned int i = 0; i < n; ++i) {{ blockIdx.x = i; {entry}(in, out, n); }}
    fwrite(out, sizeof(uint4), 4 * (size_t)n, stdout);
    return 0;
}}
"#
        )
    }

    /// Where each format keeps its f16 scales (made finite here, the rest of a block random).
    fn scale_bytes(b: BlockFormat) -> std::ops::Range<usize> {
        match b {
            BlockFormat::Q4_0 | BlockFormat::Q5_0 | BlockFormat::Q8_0 => 0..2,
            BlockFormat::Q6_K => 208..210,
            _ => 0..4,
        }
    }

    #[test]
    fn block_decoders_match_the_oracle_bit_for_bit_on_the_host() {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let dir = std::env::temp_dir().join(format!("poot-decoders-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut seed = 0x9e37_79b9_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for b in poot_executor::LIBRARY_DECODED_BLOCKS {
            let entry = decoder_entry(b).unwrap();
            let source = dir.join(format!("{entry}.c"));
            let binary = dir.join(entry);
            std::fs::write(
                &source,
                format!("{HOST_PRELUDE}{DECODERS}{}", driver(entry)),
            )
            .unwrap();
            let built = Command::new(&cc)
                .args(["-O1", "-ffp-contract=off", "-w", "-o"])
                .arg(&binary)
                .arg(&source)
                .status()
                .expect("a C compiler (set CC) builds the decoders for the host");
            assert!(built.success(), "{entry} did not build");
            let blocks = 24;
            let mut bytes: Vec<u8> = (0..blocks * b.block_bytes())
                .map(|_| next() as u8)
                .collect();
            for block in bytes.chunks_mut(b.block_bytes()) {
                for at in scale_bytes(b).step_by(2) {
                    // Finite scales from 2^-10 to 2: an exponent field of 5 to 16.
                    let exp = 5 + (next() % 12) as u16;
                    let word = (exp << 10) | (next() as u16 & 0x3ff) | (next() as u16 & 0x8000);
                    block[at..at + 2].copy_from_slice(&word.to_le_bytes());
                }
            }
            let elems = blocks * b.block_elems();
            let mut want = vec![0f32; elems];
            decode_blocks(b, &bytes, &mut want).unwrap();
            let mut run = Command::new(&binary)
                .args([(elems / 32).to_string(), bytes.len().to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            run.stdin.take().unwrap().write_all(&bytes).unwrap();
            let out = run.wait_with_output().unwrap();
            assert!(out.status.success(), "{entry} failed");
            let got: Vec<u16> = out
                .stdout
                .chunks_exact(2)
                .map(|h| u16::from_le_bytes([h[0], h[1]]))
                .collect();
            let want: Vec<u16> = want
                .iter()
                .map(|&v| half::f16::from_f32(v).to_bits())
                .collect();
            assert_eq!(got.len(), want.len(), "{entry}");
            let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            assert_eq!(differ, 0, "{entry}: {differ} of {elems} halves differ");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
