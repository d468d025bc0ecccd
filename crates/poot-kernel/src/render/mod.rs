//! Renderers: a kernel description to one backend's source language.
//!
//! [`render_cuda`] writes CUDA C for NVRTC (PTX targets); [`render_hip`] writes HIP for AMD
//! GPUs (ROCm) from the CUDA rendering's statements, with wavefront shuffles and AMD's trap;
//! [`render_wgsl`] writes WGSL for wgpu and, through naga, SPIR-V for raw Vulkan;
//! [`render_host_c`] writes C for the host CPU from the CUDA rendering's statements, each
//! workgroup's threads as loops split at barriers. All four walk the description once, in one walker (`walk`), each language a dialect that spells
//! types, literals, declarations, operators and the statements only some targets have; a
//! renderer adds only its module's frame (bindings or parameters, helpers, the entry point).
//! Every rendering of one [`Kernel`](crate::Kernel) computes the same values; where a language's built-in
//! operation differs from the description's meaning, the renderer emits a small helper
//! function (named `poot_*`) that pins it down. The output is a
//! pure function of the kernel: the same description always renders to the same bytes, so a
//! compiled-program cache can key on the source text.
//!
//! # What a kernel means, as rendered
//!
//! - **Threads and builtins.** `workgroup` threads per workgroup (x only). `LocalId` is the
//!   thread's x index in its workgroup, `GroupId(axis)` the workgroup's index on axis 0, 1 or 2,
//!   `GroupCountX` the number of workgroups along x. All are u32.
//! - **Variables.** Each [`Var`](super::ir::Var) is a thread-local value of its type, declared
//!   by exactly one `Let` (or by the `For` that counts with it) and visible in the rest of the
//!   block that declares it, nested blocks included. A variable never assigned by `Set` renders
//!   as a constant (`let` / `const`). A use outside that scope, a second declaration and an
//!   axis above 2 are [`RenderError`]s rather than source the compiler would reject.
//! - **Loops.** `For { var, start, end, step }` evaluates `end` and `step` once, before the
//!   first iteration, then runs the body for `var = start, start + step, ...` while `var < end`.
//!   The counter never wraps past `u32::MAX`: the loop stops when the next value would reach
//!   `end` or overflow. A step the IR forbids (0) is refused when it is a constant; one that
//!   only turns out 0 at run time runs the body once rather than hanging the device. CUDA
//!   writes out a loop whose trip count per thread its bounds analysis proves small (see
//!   `unroll`): the same iterations in the same order, so the same values.
//! - **Buffers.** Parameter `i` is an array of 32-bit words. `Load`/`Store` index words.
//!   `LoadByte` reads byte `b` of a u32 buffer as little-endian words:
//!   `(w[b >> 2] >> ((b & 3) * 8)) & 0xff`. `LoadHalf` reads 16-bit half `i`, the low half of
//!   word `i >> 1` when `i` is even, and widens it to f32: F16 exactly (subnormals, infinities;
//!   a NaN stays a NaN with its payload's top bits and the quiet bit set), BF16 as `bits << 16`.
//!   Out-of-range indices are the planner's to prevent; the renderers add no bounds checks.
//! - **Casts.** Float to integer truncates toward zero and saturates at the target's bounds,
//!   NaN gives 0. Integer to float rounds to nearest, ties to even. Bool to number is 0 or 1;
//!   number to bool is `x != 0` (so NaN is true and -0 is false). i32 and u32 reinterpret each
//!   other's bits (two's complement).
//! - **Integer arithmetic.** `Add`, `Sub`, `Mul`, `Neg`, `Abs` and `Shl` wrap (two's complement;
//!   `abs(i32::MIN)` is `i32::MIN`). `Div` truncates and `Rem` takes the dividend's sign. The
//!   planner checks divisors before dividing; the renderings still give every input a defined
//!   result, WGSL's own: `a / 0 = a`, `a % 0 = 0`, `i32::MIN / -1 = i32::MIN`, `i32::MIN % -1 = 0`.
//!   `Shl`/`Shr` shift by `rhs & 31`; `Shr` is arithmetic on i32 and logical on u32.
//! - **Float arithmetic.** `+ - * /` are IEEE single precision. `Max`/`Min` return NaN when
//!   either operand is NaN and order -0 below +0 (IEEE 754-2019 maximum/minimum, like the CPU
//!   oracle). `Rsqrt` is `1 / sqrt(x)` and `Recip` is `1 / x`, each rounded twice. `Pow` is C's
//!   `powf`, special cases included. `RoundF16`/`RoundBf16` round to the nearest f16/bf16 value,
//!   ties to even, and keep it as f32: overflow gives infinity and a NaN stays a NaN.
//!   `BitsToU32`/`BitsToF32` reinterpret bits.
//! - **Precision.** The helpers for rounding, casts, half widening and max/min are exact
//!   integer code and agree bit for bit across backends. CUDA uses the accurate libdevice math
//!   (`expf`, `erff`, `powf`, ...: at most a few ulp). WGSL's `exp`, `log`, `sin`, `cos`,
//!   `sqrt` and `pow` are the platform's, within WGSL's stated accuracy; `Erf` is a helper
//!   accurate to about one ulp plus the platform `exp`'s error; `Tanh` clamps its argument to
//!   ±15 so no platform overflows inside it.
//! - **Barriers and shared memory.** `Barrier` is `__syncthreads()` / `workgroupBarrier()`
//!   and must sit in control flow every thread of the workgroup takes. Shared arrays are
//!   `__shared__` / `var<workgroup>` arrays of their element type.
//! - **Faults.** See [`can_fault`] and the fault-word layout in [`fault`](self::fault).
//!
//! # Names
//!
//! Parameters render as `p{i}_{name}`, shared arrays as `s{i}_{name}`, variables as `v{n}`,
//! with names reduced to ASCII letters, digits and single underscores; the entry point is
//! [`entry_name`]. Helpers are `poot_*`. No rendered name can clash with another or with a
//! keyword of either language.

mod c_like;
mod check;
mod code;
pub mod cuda;
mod cuda_lib;
pub mod fault;
pub mod hip;
pub mod host_c;
mod literal;
mod names;
mod unroll;
mod walk;
pub mod wgsl;
mod wgsl_lib;

use std::collections::BTreeSet;

use super::ir::KernelError;

pub use cuda::render_cuda;
pub use fault::{FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS, can_fault};
pub use hip::render_hip;
pub use host_c::render_host_c;
pub use names::entry_name;
pub use wgsl::{BindingInfo, WgslKernel, WgslShader, render_wgsl};

/// A kernel the renderers cannot turn into source (a planner bug, never user input).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// The kernel fails [`Kernel::validate`](super::ir::Kernel::validate); the planner built an
    /// ill-typed kernel.
    #[error(transparent)]
    Invalid(#[from] KernelError),
    /// A variable is read or assigned where no enclosing `Let` or `For` declares it.
    #[error("kernel `{kernel}`: variable {var} used outside the block that declares it")]
    Undeclared { kernel: String, var: u32 },
    /// A variable is declared by more than one `Let` or `For`.
    #[error("kernel `{kernel}`: variable {var} declared twice")]
    Redeclared { kernel: String, var: u32 },
    /// `GroupId` names an axis other than 0, 1 or 2.
    #[error("kernel `{kernel}`: workgroup id along axis {axis}, only axes 0..=2 exist")]
    NoSuchAxis { kernel: String, axis: u8 },
    /// A `For` loop steps by the constant 0 (the IR requires a positive step).
    #[error("kernel `{kernel}`: loop over variable {var} steps by 0")]
    ZeroStep { kernel: String, var: u32 },
    /// The kernel's workgroup has no threads.
    #[error("kernel `{kernel}`: workgroup of 0 threads")]
    EmptyWorkgroup { kernel: String },
    /// A shared array has length 0, which neither language can declare.
    #[error("kernel `{kernel}`: shared array `{name}` has length 0")]
    EmptyShared { kernel: String, name: String },
    /// A statement the target language has no spelling for (the planner emits it only for
    /// targets that do).
    #[error("kernel `{kernel}`: {what} cannot be rendered for {language}")]
    Unsupported {
        kernel: String,
        what: &'static str,
        language: &'static str,
    },
}

/// The helpers `used` names with those each calls (`deps` lists a helper's whole dependencies),
/// in emission order.
fn libs_with_deps<L: Copy + Ord>(used: &BTreeSet<L>, deps: fn(L) -> &'static [L]) -> BTreeSet<L> {
    let mut libs = BTreeSet::new();
    for &l in used {
        libs.extend(deps(l));
        libs.insert(l);
    }
    libs
}
