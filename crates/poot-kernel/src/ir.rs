//! The kernel description: one compute kernel as a small typed SIMT program, written once and
//! rendered per backend (CUDA C for PTX, WGSL for wgpu and raw Vulkan).
//!
//! A kernel runs `workgroup` threads per workgroup over a grid of workgroups. Each thread runs
//! `body`. Buffers are typed arrays of 32-bit words (f32, i32 or u32); narrower stored data
//! (bytes, f16, bf16 halves) is read from u32-word buffers through [`Expr::LoadByte`] and
//! [`Expr::LoadHalf`], so every backend can express it. Kernels never store narrower than a word.

use std::fmt;

/// The type of a kernel value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    F32,
    I32,
    U32,
    Bool,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::F32 => "f32",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::Bool => "bool",
        })
    }
}

/// The word type of a buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Word {
    F32,
    I32,
    U32,
}

impl Word {
    pub fn ty(self) -> Ty {
        match self {
            Word::F32 => Ty::F32,
            Word::I32 => Ty::I32,
            Word::U32 => Ty::U32,
        }
    }
}

/// Whether a kernel writes a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    ReadWrite,
}

/// A buffer parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    pub name: String,
    pub word: Word,
    pub access: Access,
}

/// Index of a buffer parameter in [`Kernel::params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamId(pub u32);

/// A workgroup-shared array.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shared {
    pub name: String,
    pub ty: Ty,
    pub len: u32,
}

/// Index of a shared array in [`Kernel::shared`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedId(pub u32);

/// A thread-local variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// Built-in thread coordinates (x axis only: grids are flattened by the planner, except the
/// workgroup id's y and z, which let large grids exceed one axis's limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// Thread index within its workgroup.
    LocalId,
    /// Workgroup index along x, y or z.
    GroupId(u8),
    /// Workgroups along x.
    GroupCountX,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Recip,
    Tanh,
    Erf,
    Floor,
    Ceil,
    /// To the nearest integer, ties to even.
    Round,
    Sin,
    Cos,
    /// Logical not (bool) or bitwise not (integers).
    Not,
    /// Rounds an f32 to the nearest f16 value (ties to even), kept as f32.
    RoundF16,
    /// Rounds an f32 to the nearest bf16 value (ties to even), kept as f32.
    RoundBf16,
    /// Reinterprets the bits of an f32 as a u32, or of a u32 as an f32.
    BitsToU32,
    BitsToF32,
    /// The f16 in the low 16 bits of a u32 (the high bits ignored), widened to f32 exactly.
    F16ToF32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Max,
    Min,
    Pow,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Which half-precision format a 16-bit word holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half {
    F16,
    Bf16,
}

/// An expression. Every expression has one [`Ty`], checked by [`Kernel::validate`].
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    F32(f32),
    I32(i32),
    U32(u32),
    Bool(bool),
    Var(Var),
    Builtin(Builtin),
    /// Word `index` (u32) of a buffer, typed as the buffer's word.
    Load {
        buf: ParamId,
        index: Box<Expr>,
    },
    /// Byte `byte` (u32) of a u32-word buffer, as a u32 in 0..=255 (little-endian words).
    LoadByte {
        buf: ParamId,
        byte: Box<Expr>,
    },
    /// Half-word `index` (u32) of a u32-word buffer, widened to f32.
    LoadHalf {
        buf: ParamId,
        index: Box<Expr>,
        half: Half,
    },
    LoadShared {
        arr: SharedId,
        index: Box<Expr>,
    },
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    Select {
        cond: Box<Expr>,
        on_true: Box<Expr>,
        on_false: Box<Expr>,
    },
    /// `a * b + c` on f32 with one rounding where the backend fuses it (CUDA's `fmaf`; WGSL's
    /// `fma` may round twice). Only for sums the oracle is compared with at a tolerance (a
    /// contraction's products): elsewhere `Mul` then `Add` keep op-by-op results.
    MulAdd(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `value` (f32, i32 or u32) as the thread whose subgroup lane is this one's xor `mask`
    /// (below the subgroup size) computes it. Every thread of the subgroup evaluates it together;
    /// only for targets with subgroup shuffles (the planner's `Target::team_shuffles`).
    ShuffleXor {
        value: Box<Expr>,
        mask: u32,
    },
    /// A value conversion: float to integer truncates toward zero and saturates (NaN to 0);
    /// integer to float rounds to nearest; bool to number is 0 or 1; number to bool is `!= 0`;
    /// between i32 and u32 the bits are reinterpreted (two's complement).
    Cast(Ty, Box<Expr>),
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Declares a variable with an initial value.
    Let { var: Var, ty: Ty, value: Expr },
    /// Assigns a declared variable.
    Set { var: Var, value: Expr },
    Store {
        buf: ParamId,
        index: Expr,
        value: Expr,
    },
    StoreShared {
        arr: SharedId,
        index: Expr,
        value: Expr,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Vec<Stmt>,
    },
    /// `for var in start..end` stepping by `step` (u32, `step > 0`).
    For {
        var: Var,
        start: Expr,
        end: Expr,
        step: Expr,
        body: Vec<Stmt>,
    },
    /// Declares `vars` (2 or 4 u32 variables) as words `index..index + len` of a u32 buffer, read
    /// as one wide load. `index` is a multiple of the count (the planner proves it;
    /// buffers start at least 16-byte aligned).
    LetWords {
        vars: Vec<Var>,
        buf: ParamId,
        index: Expr,
    },
    /// Declares `vars` (2 or 4 f32 variables) as elements `index..index + len` of an f32 shared
    /// array, read as one wide load. `index` is a multiple of the count (the planner proves it;
    /// shared arrays start 16-byte aligned).
    LetShared {
        vars: Vec<Var>,
        arr: SharedId,
        index: Expr,
    },
    /// Replaces f32 variable `var` in each aligned team of `lanes` consecutive threads (a power of
    /// two, at most the subgroup size) by the team's sum, exchanged in registers. Every thread
    /// of the subgroup reaches it together; only for targets with subgroup shuffles
    /// (the planner's `Target::team_shuffles`).
    TeamSum { var: Var, lanes: u32 },
    /// The warp's 16 x 8 tile of f32 sums plus the product of a 16 x 8 tile of A and an 8 x 8
    /// tile of B, both tf32 (f32 bit patterns with the low 13 bits clear), on the matrix units:
    /// PTX's `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`. With `g` the lane / 4 and `t`
    /// the lane % 4, a lane holds the sums `acc` = `C[g][2t], C[g][2t+1], C[g+8][2t],
    /// C[g+8][2t+1]` and passes `a` = `A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]` and `b` =
    /// `B[t][g], B[t+4][g]` (u32). Every thread of the warp reaches it together; only for targets
    /// with matrix units (the planner's `Target::matrix_units`).
    MmaTf32 {
        acc: [Var; 4],
        a: [Expr; 4],
        b: [Expr; 2],
    },
    /// The warp's 16 x 8 tile of f32 sums plus the product of a 16 x 16 tile of A and a 16 x 8
    /// tile of B, both in `half` precision, on the matrix units: PTX's
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`. Each operand is a u32
    /// word holding two `half` values, the first in its low 16 bits (as
    /// [`Stmt::StoreSharedHalves`] packs them); f32 holds every product exactly. With `g` the
    /// lane / 4 and `t` the lane % 4, a lane holds the sums `acc` as in [`Stmt::MmaTf32`] and
    /// passes `a` = the pairs `A[g][2t..2t+2], A[g+8][2t..2t+2], A[g][2t+8..2t+10],
    /// A[g+8][2t+8..2t+10]` and `b` = `B[2t..2t+2][g], B[2t+8..2t+10][g]`. Every thread of the
    /// warp reaches it together; only for targets with matrix units (the planner's
    /// `Target::matrix_units`).
    MmaHalf {
        half: Half,
        acc: [Var; 4],
        a: [Expr; 4],
        b: [Expr; 2],
    },
    /// Stores f32 `values` (2, 4 or 8) rounded to the nearest `half` value (ties to even) and
    /// packed in pairs, the first of each pair in the low 16 bits, as `values.len() / 2`
    /// consecutive words from `index` of u32 shared array `arr`, in one wide store. `index` is
    /// a multiple of the word count (the planner proves it). The staging of
    /// [`Stmt::MmaHalf`]'s operands: only for targets with matrix units.
    StoreSharedHalves {
        half: Half,
        arr: SharedId,
        index: Expr,
        values: Vec<Expr>,
    },
    /// A workgroup barrier; only in control flow every thread of the workgroup takes.
    Barrier,
    /// A failed kernel check: the thread records `code` and the step's results are discarded
    /// (a trap on PTX, a fault bit in the error word on SPIR-V targets).
    Fault { code: u32 },
}

/// One compute kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// A name unique within a plan, from the op it implements (`rmsnorm_l3`), for fault reports.
    pub name: String,
    pub params: Vec<Param>,
    pub shared: Vec<Shared>,
    /// Threads per workgroup (x only).
    pub workgroup: u32,
    /// Workgroups each multiprocessor should be able to hold at once (0: no request): a bound
    /// on the registers a thread may take, where the backend has one (CUDA's launch bounds).
    pub min_resident: u32,
    /// Variables, by [`Var`] index.
    pub vars: Vec<Ty>,
    pub body: Vec<Stmt>,
}

/// A kernel the validator rejects (a planner bug, never user input).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// An expression's operand types do not fit its operator.
    #[error("kernel `{kernel}`: {what}")]
    Type { kernel: String, what: String },
    /// A parameter, shared array or variable id out of range.
    #[error("kernel `{kernel}`: unknown {kind} {index}")]
    Unknown {
        kernel: String,
        kind: &'static str,
        index: u32,
    },
    /// A store into a read-only parameter.
    #[error("kernel `{kernel}`: store into read-only parameter `{param}`")]
    ReadOnly { kernel: String, param: String },
}

impl Kernel {
    /// The kind of kernel (`matmul`, `reduce`): its name without the plan's index suffix.
    pub fn kind(&self) -> &str {
        match self.name.rsplit_once('_') {
            Some((kind, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => kind,
            _ => &self.name,
        }
    }

    /// The type of `e`, checking it.
    pub fn type_of(&self, e: &Expr) -> Result<Ty, KernelError> {
        let bad = |what: String| KernelError::Type {
            kernel: self.name.clone(),
            what,
        };
        Ok(match e {
            Expr::F32(_) => Ty::F32,
            Expr::I32(_) => Ty::I32,
            Expr::U32(_) => Ty::U32,
            Expr::Bool(_) => Ty::Bool,
            Expr::Var(v) => self.var_ty(*v)?,
            Expr::Builtin(_) => Ty::U32,
            Expr::Load { buf, index } => {
                self.expect(index, Ty::U32)?;
                self.param(*buf)?.word.ty()
            }
            Expr::LoadByte { buf, byte } => {
                self.expect(byte, Ty::U32)?;
                self.expect_u32_buffer(*buf)?;
                Ty::U32
            }
            Expr::LoadHalf { buf, index, .. } => {
                self.expect(index, Ty::U32)?;
                self.expect_u32_buffer(*buf)?;
                Ty::F32
            }
            Expr::LoadShared { arr, index } => {
                self.expect(index, Ty::U32)?;
                self.shared
                    .get(arr.0 as usize)
                    .ok_or_else(|| self.unknown("shared array", arr.0))?
                    .ty
            }
            Expr::Unary(op, x) => {
                let t = self.type_of(x)?;
                let ok = match op {
                    UnOp::Neg | UnOp::Abs => matches!(t, Ty::F32 | Ty::I32),
                    UnOp::Not => t != Ty::F32,
                    UnOp::BitsToF32 | UnOp::F16ToF32 => t == Ty::U32,
                    UnOp::BitsToU32 => t == Ty::F32,
                    _ => t == Ty::F32,
                };
                if !ok {
                    return Err(bad(format!("{op:?} of {t}")));
                }
                match op {
                    UnOp::BitsToF32 | UnOp::F16ToF32 => Ty::F32,
                    UnOp::BitsToU32 => Ty::U32,
                    _ => t,
                }
            }
            Expr::Binary(op, a, b) => {
                let (ta, tb) = (self.type_of(a)?, self.type_of(b)?);
                let shift = matches!(op, BinOp::Shl | BinOp::Shr);
                if !shift && ta != tb {
                    return Err(bad(format!("{op:?} of {ta} and {tb}")));
                }
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Max | BinOp::Min => {
                        ta != Ty::Bool
                    }
                    BinOp::Pow => ta == Ty::F32,
                    BinOp::Rem => matches!(ta, Ty::I32 | Ty::U32),
                    BinOp::And | BinOp::Or | BinOp::Xor => ta != Ty::F32,
                    BinOp::Shl | BinOp::Shr => matches!(ta, Ty::I32 | Ty::U32) && tb == Ty::U32,
                };
                if !ok {
                    return Err(bad(format!("{op:?} of {ta} and {tb}")));
                }
                ta
            }
            Expr::Cmp(op, a, b) => {
                let (ta, tb) = (self.type_of(a)?, self.type_of(b)?);
                if ta != tb {
                    return Err(bad(format!("{op:?} of {ta} and {tb}")));
                }
                Ty::Bool
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                self.expect(cond, Ty::Bool)?;
                let t = self.type_of(on_true)?;
                self.expect(on_false, t)?;
                t
            }
            Expr::MulAdd(a, b, c) => {
                self.expect(a, Ty::F32)?;
                self.expect(b, Ty::F32)?;
                self.expect(c, Ty::F32)?;
                Ty::F32
            }
            Expr::Cast(to, x) => {
                self.type_of(x)?;
                *to
            }
            Expr::ShuffleXor { value, mask } => {
                let t = self.type_of(value)?;
                if t == Ty::Bool || *mask == 0 || *mask >= 32 {
                    return Err(bad(format!("shuffle of a {t} across lane mask {mask}")));
                }
                t
            }
        })
    }

    /// Checks every statement and expression: ids in range, types consistent, stores only into
    /// writable parameters.
    pub fn validate(&self) -> Result<(), KernelError> {
        self.validate_block(&self.body)
    }

    fn validate_block(&self, body: &[Stmt]) -> Result<(), KernelError> {
        for s in body {
            match s {
                Stmt::Let { var, ty, value } => {
                    let declared = self.var_ty(*var)?;
                    if declared != *ty {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!("let of {ty} into a {declared} variable"),
                        });
                    }
                    self.expect(value, *ty)?;
                }
                Stmt::Set { var, value } => {
                    let t = self.var_ty(*var)?;
                    self.expect(value, t)?;
                }
                Stmt::Store { buf, index, value } => {
                    let p = self.param(*buf)?;
                    if p.access != Access::ReadWrite {
                        return Err(KernelError::ReadOnly {
                            kernel: self.name.clone(),
                            param: p.name.clone(),
                        });
                    }
                    self.expect(index, Ty::U32)?;
                    self.expect(value, p.word.ty())?;
                }
                Stmt::StoreShared { arr, index, value } => {
                    let t = self
                        .shared
                        .get(arr.0 as usize)
                        .ok_or_else(|| self.unknown("shared array", arr.0))?
                        .ty;
                    self.expect(index, Ty::U32)?;
                    self.expect(value, t)?;
                }
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    self.expect(cond, Ty::Bool)?;
                    self.validate_block(then)?;
                    self.validate_block(otherwise)?;
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let t = self.var_ty(*var)?;
                    if t != Ty::U32 {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!("loop variable of type {t}"),
                        });
                    }
                    self.expect(start, Ty::U32)?;
                    self.expect(end, Ty::U32)?;
                    self.expect(step, Ty::U32)?;
                    self.validate_block(body)?;
                }
                Stmt::LetWords { vars, buf, index } => {
                    self.expect_u32_buffer(*buf)?;
                    if !matches!(vars.len(), 2 | 4) {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!("a wide load of {} words", vars.len()),
                        });
                    }
                    self.expect_vars(vars, Ty::U32, "wide load into")?;
                    self.expect(index, Ty::U32)?;
                }
                Stmt::LetShared { vars, arr, index } => {
                    let arr_ty = self
                        .shared
                        .get(arr.0 as usize)
                        .ok_or_else(|| self.unknown("shared array", arr.0))?
                        .ty;
                    if !matches!(vars.len(), 2 | 4) || arr_ty != Ty::F32 {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!("a wide load of {} {arr_ty} elements", vars.len()),
                        });
                    }
                    self.expect_vars(vars, Ty::F32, "wide shared load into")?;
                    self.expect(index, Ty::U32)?;
                }
                Stmt::TeamSum { var, lanes } => {
                    let t = self.var_ty(*var)?;
                    if t != Ty::F32 || !lanes.is_power_of_two() || *lanes > 32 {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!("team sum of a {t} over {lanes} lanes"),
                        });
                    }
                }
                Stmt::MmaTf32 { acc, a, b } => {
                    self.expect_vars(acc, Ty::F32, "matrix tile sums in")?;
                    for e in a.iter().chain(b) {
                        self.expect(e, Ty::U32)?;
                    }
                }
                Stmt::MmaHalf { half: _, acc, a, b } => {
                    self.expect_vars(acc, Ty::F32, "matrix tile sums in")?;
                    for e in a.iter().chain(b) {
                        self.expect(e, Ty::U32)?;
                    }
                }
                Stmt::StoreSharedHalves {
                    half: _,
                    arr,
                    index,
                    values,
                } => {
                    let arr_ty = self
                        .shared
                        .get(arr.0 as usize)
                        .ok_or_else(|| self.unknown("shared array", arr.0))?
                        .ty;
                    if !matches!(values.len(), 2 | 4 | 8) || arr_ty != Ty::U32 {
                        return Err(KernelError::Type {
                            kernel: self.name.clone(),
                            what: format!(
                                "{} halves stored into a {arr_ty} shared array",
                                values.len()
                            ),
                        });
                    }
                    self.expect(index, Ty::U32)?;
                    for e in values {
                        self.expect(e, Ty::F32)?;
                    }
                }
                Stmt::Barrier | Stmt::Fault { .. } => {}
            }
        }
        Ok(())
    }

    fn var_ty(&self, v: Var) -> Result<Ty, KernelError> {
        self.vars
            .get(v.0 as usize)
            .copied()
            .ok_or_else(|| self.unknown("variable", v.0))
    }

    fn expect(&self, e: &Expr, want: Ty) -> Result<(), KernelError> {
        let got = self.type_of(e)?;
        if got == want {
            Ok(())
        } else {
            Err(KernelError::Type {
                kernel: self.name.clone(),
                what: format!("expected {want}, found {got} in {e:?}"),
            })
        }
    }

    fn param(&self, p: ParamId) -> Result<&Param, KernelError> {
        self.params
            .get(p.0 as usize)
            .ok_or_else(|| self.unknown("parameter", p.0))
    }

    /// Refuses a variable of `vars` that is not a `want`: "`what` a `<its type>` variable".
    fn expect_vars(&self, vars: &[Var], want: Ty, what: &str) -> Result<(), KernelError> {
        for &v in vars {
            let t = self.var_ty(v)?;
            if t != want {
                return Err(KernelError::Type {
                    kernel: self.name.clone(),
                    what: format!("{what} a {t} variable"),
                });
            }
        }
        Ok(())
    }

    fn expect_u32_buffer(&self, p: ParamId) -> Result<(), KernelError> {
        let param = self.param(p)?;
        if param.word == Word::U32 {
            Ok(())
        } else {
            Err(KernelError::Type {
                kernel: self.name.clone(),
                what: format!(
                    "sub-word load from `{}`, a {:?} buffer",
                    param.name, param.word
                ),
            })
        }
    }

    fn unknown(&self, kind: &'static str, index: u32) -> KernelError {
        KernelError::Unknown {
            kernel: self.name.clone(),
            kind,
            index,
        }
    }
}
