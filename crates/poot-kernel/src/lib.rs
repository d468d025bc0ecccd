//! Kernel descriptions: each kernel written once as a small typed SIMT program ([`ir`]), and
//! rendered per backend ([`render`]).
//!
//! The planner (`poot-graph-plan`) builds kernels with [`build::KernelBuilder`]; a device crate
//! renders them to the language its compiler takes: CUDA C for NVRTC ([`render::render_cuda`]),
//! HIP for AMD GPUs ([`render::render_hip`]), WGSL for wgpu and raw Vulkan ([`render::render_wgsl`]), C for the host CPU
//! ([`render::render_host_c`]). Nothing here knows a target's limits: the planner emits only
//! what its target runs (subgroup shuffles, matrix-unit tiles), and a renderer refuses by name a
//! statement its language has no spelling for. [`expr_eval`] evaluates expressions on the host,
//! for the planner's tests of the index arithmetic it emits.

pub mod build;
pub mod expr_eval;
pub mod ir;
pub mod render;

pub use ir::{
    Access, BinOp, Builtin, CmpOp, Expr, Half, Kernel, KernelError, Param, ParamId, Shared,
    SharedId, Stmt, Ty, UnOp, Var, Word,
};
