//! Kernel descriptions: written once, rendered per backend.

pub mod build;
pub mod expr_eval;
pub mod ir;
pub mod render;

pub use ir::{
    Access, BinOp, Builtin, CmpOp, Expr, Half, Kernel, KernelError, Param, ParamId, Shared,
    SharedId, Stmt, Ty, UnOp, Var, Word,
};
