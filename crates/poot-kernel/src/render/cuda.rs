//! CUDA C rendering, for NVRTC (PTX targets).
//!
//! The source is self-contained for NVRTC: no `#include`, only what NVRTC declares by itself
//! (`threadIdx`, `blockIdx`, `gridDim`, `__syncthreads`, `__trap`, `__threadfence_system`,
//! atomics, `__float_as_uint`/`__uint_as_float` and the libdevice math functions `expf`,
//! `logf`, `sqrtf`, `tanhf`, `erff`, `floorf`, `ceilf`, `rintf`, `sinf`, `cosf`, `powf`, `fabsf`,
//! `fmaf`). The entry point is `extern "C"`, named [`entry_name`](super::entry_name), with
//! `__launch_bounds__(workgroup)`; buffer parameters are `T* __restrict__`, `const` when
//! read-only, in order, followed by `unsigned int* __restrict__ poot_fault` when the kernel can
//! fault (see [`fault`](super::fault)).
//!
//! Signed arithmetic that C leaves undefined on overflow (`+ - *`, negation, left shift) is done
//! in `unsigned int` and converted back, which NVCC and NVRTC define as two's complement; `>>`
//! on `int` is arithmetic in CUDA.

use std::collections::{BTreeSet, HashSet};

use super::c_like::{axis_letter, cmp_symbol, is_ordering, operand, strip_parens};
use super::check::{Facts, check};
use super::code::Code;
use super::cuda_lib::CudaLib;
use super::fault::can_fault;
use super::literal::{F32Spelling, spell_f32};
use super::unroll::{self, Ranges};
use super::{RenderError, entry_name, names};
use crate::ir::{Access, BinOp, Builtin, Expr, Half, Kernel, Stmt, Ty, UnOp, Var, Word};

/// Renders `k` as one CUDA C translation unit holding one `extern "C"` kernel.
pub fn render_cuda(k: &Kernel) -> Result<String, RenderError> {
    let facts = check(k)?;
    let mut r = Cuda {
        k,
        facts,
        libs: BTreeSet::new(),
        ranges: Ranges::default(),
        host: false,
        promoted: HashSet::new(),
    };
    let mut body = Code::at_depth(1);
    r.libs.insert(CudaLib::WaitPredecessors);
    body.line("poot_wait_predecessors();");
    for (i, s) in k.shared.iter().enumerate() {
        body.line(format!(
            "__shared__ __attribute__((aligned(16))) {} {}[{}];",
            ty(s.ty),
            names::shared(i, &s.name),
            s.len
        ));
    }
    r.block(&mut body, &k.body)?;

    let mut libs = BTreeSet::new();
    for &l in &r.libs {
        libs.extend(l.deps());
        libs.insert(l);
    }
    let entry = entry_name(k);
    let mut out = Code::at_depth(0);
    out.line(format!(
        "// poot kernel {entry}: rendered from a kernel description, do not edit."
    ));
    for l in libs {
        out.line("");
        out.raw(l.source());
    }
    let mut params: Vec<String> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let constness = match p.access {
                Access::Read => "const ",
                Access::ReadWrite => "",
            };
            format!(
                "{constness}{}* __restrict__ {}",
                word(p.word),
                names::param(i, &p.name)
            )
        })
        .collect();
    if can_fault(k) {
        params.push("unsigned int* __restrict__ poot_fault".to_string());
    }
    out.line("");
    let bounds = match k.min_resident {
        0 => k.workgroup.to_string(),
        n => format!("{}, {n}", k.workgroup),
    };
    out.line(format!(
        "extern \"C\" __global__ void __launch_bounds__({bounds}) {entry}({}) {{",
        params.join(", ")
    ));
    out.raw(&body.finish());
    out.line("}");
    Ok(out.finish())
}

pub(super) struct Cuda<'k> {
    pub(super) k: &'k Kernel,
    pub(super) facts: Facts,
    pub(super) libs: BTreeSet<CudaLib>,
    /// What is known of the u32 constants' values, for writing loops out.
    pub(super) ranges: Ranges,
    /// Rendering C for the host CPU ([`super::host_c`]): one function runs every thread of a
    /// workgroup in turn, so builtins, wide loads and checks are spelled for that.
    pub(super) host: bool,
    /// On the host, the variables held per thread (arrays indexed by the thread) because the
    /// kernel's barriers split it into phases that each loop over the threads.
    pub(super) promoted: HashSet<Var>,
}

pub(super) fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "float",
        Ty::I32 => "int",
        Ty::U32 => "unsigned int",
        Ty::Bool => "bool",
    }
}

fn word(w: Word) -> &'static str {
    ty(w.ty())
}

impl Cuda<'_> {
    /// How `v` is read and assigned here: the thread's element of its array where it is
    /// promoted.
    pub(super) fn var(&self, v: Var) -> String {
        if self.promoted.contains(&v) {
            format!("{}[poot_tid]", names::var(v))
        } else {
            names::var(v)
        }
    }

    /// Declares (or, promoted, assigns) variable `v` of scalar type `t` as `value`.
    fn declare(&self, out: &mut Code, v: Var, t: &str, value: &str, constant: bool) {
        if self.promoted.contains(&v) {
            out.line(format!("{} = {value};", self.var(v)));
        } else {
            let constness = if constant { "const " } else { "" };
            out.line(format!("{constness}{t} {} = {value};", names::var(v)));
        }
    }

    /// On the host, `vars` as consecutive elements from `index` of `array`: plain loads (the C
    /// compiler merges them where it can).
    fn host_wide_load(&self, out: &mut Code, vars: &[Var], scalar: &str, array: &str, index: &str) {
        for (i, v) in vars.iter().enumerate() {
            let value = format!("{array}[{index} + {i}u]");
            self.declare(out, *v, scalar, &value, true);
        }
    }

    /// Declares `vars` (2 or 4) as the fields of one wide load from `address`, whose struct types
    /// (two fields, four fields) are the helpers `libs`; each field is a `scalar`.
    fn wide_load(
        &mut self,
        out: &mut Code,
        vars: &[Var],
        libs: [(CudaLib, &str); 2],
        scalar: &str,
        address: &str,
    ) {
        let ((lib, wide_ty), fields) = match vars.len() {
            2 => (libs[0], &["x", "y"][..]),
            _ => (libs[1], &["x", "y", "z", "w"][..]),
        };
        self.libs.insert(lib);
        let wide = format!("{}_w", names::var(vars[0]));
        out.line(format!(
            "const {wide_ty} {wide} = *reinterpret_cast<const {wide_ty}*>({address});"
        ));
        for (v, f) in vars.iter().zip(fields) {
            out.line(format!("const {scalar} {} = {wide}.{f};", names::var(*v)));
        }
    }

    pub(super) fn block(&mut self, out: &mut Code, body: &[Stmt]) -> Result<(), RenderError> {
        for s in body {
            self.stmt(out, s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, out: &mut Code, s: &Stmt) -> Result<(), RenderError> {
        match s {
            Stmt::Let { var, ty: t, value } => {
                let mutated = self.facts.mutated.contains(var);
                if !mutated
                    && *t == Ty::U32
                    && let Some(range) = self.ranges.of(self.k, value)
                {
                    self.ranges.set(*var, range);
                }
                if !mutated
                    && *t == Ty::I32
                    && let Some(range) = self.ranges.signed_of(self.k, value)
                {
                    self.ranges.set_signed(*var, range);
                }
                let value = self.expr(value)?;
                self.declare(out, *var, ty(*t), &value, !mutated);
            }
            Stmt::Set { var, value } => {
                let value = self.expr(value)?;
                out.line(format!("{} = {value};", self.var(*var)));
            }
            Stmt::Store { buf, index, value } => {
                let p = names::param_of(self.k, *buf)?;
                let (index, value) = (self.expr(index)?, self.expr(value)?);
                out.line(format!("{p}[{index}] = {value};"));
            }
            Stmt::StoreShared { arr, index, value } => {
                let a = names::shared_of(self.k, *arr)?;
                let (index, value) = (self.expr(index)?, self.expr(value)?);
                out.line(format!("{a}[{index}] = {value};"));
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                let cond = self.expr(cond)?;
                if let ([Stmt::Fault { code }], true) = (&then[..], otherwise.is_empty()) {
                    // A check as an opaque call (see `poot_fault_if`).
                    self.libs.insert(CudaLib::FaultIf);
                    out.line(format!(
                        "poot_fault_if({}, poot_fault, {code}u);",
                        strip_parens(&cond)
                    ));
                    return Ok(());
                }
                out.open(format!("if ({}) {{", strip_parens(&cond)));
                self.block(out, then)?;
                if !otherwise.is_empty() {
                    out.reopen("} else {");
                    self.block(out, otherwise)?;
                }
                out.close("}");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let v = names::var(*var);
                let assigned = unroll::assigns(body, *var);
                if let Some(u) = unroll::plan(self.k, &self.ranges, start, end, step, body)
                    && !assigned
                {
                    return self.written_out(out, *var, start, body, u);
                }
                if let Some((end, step)) = unroll::cannot_wrap(self.k, &self.ranges, end, step) {
                    // A plain loop, which the compiler may unroll itself.
                    if let Some((lo, _)) = self.ranges.of(self.k, start)
                        && lo < end
                        && !assigned
                    {
                        self.ranges.set(*var, (lo, end - 1));
                    }
                    let start = self.expr(start)?;
                    out.open(format!(
                        "for (unsigned int {v} = {start}; {v} < {end}u; {v} += {step}u) {{"
                    ));
                    self.block(out, body)?;
                    out.close("}");
                    return Ok(());
                }
                self.counted_loop(out, *var, [start, end, step], |r, out| r.block(out, body))?;
            }
            Stmt::LetWords { vars, buf, index } if self.host => {
                let p = names::param_of(self.k, *buf)?;
                let index = self.expr(index)?;
                self.host_wide_load(out, vars, "unsigned int", &p, &index);
            }
            Stmt::LetShared { vars, arr, index } if self.host => {
                let a = names::shared_of(self.k, *arr)?;
                let index = self.expr(index)?;
                self.host_wide_load(out, vars, "float", &a, &index);
            }
            Stmt::TeamSum { .. } | Stmt::MmaTf32 { .. } | Stmt::MmaHalf { .. } | Stmt::Barrier
                if self.host =>
            {
                // The host target has no subgroups or matrix units, and its renderer splits
                // the kernel at its barriers before rendering the phases between them.
                return Err(RenderError::Unsupported {
                    kernel: self.k.name.clone(),
                    what: "a subgroup, matrix-unit or barrier statement inside a phase",
                    language: "host C",
                });
            }
            Stmt::LetWords { vars, buf, index } => {
                let p = names::param_of(self.k, *buf)?;
                let index = self.expr(index)?;
                let libs = [
                    (CudaLib::Words2, "poot_words2"),
                    (CudaLib::Words4, "poot_words4"),
                ];
                // A misaligned index traps (misaligned address) instead of reading other words.
                self.wide_load(out, vars, libs, "unsigned int", &format!("{p} + {index}"));
            }
            Stmt::LetShared { vars, arr, index } => {
                let a = names::shared_of(self.k, *arr)?;
                let index = self.expr(index)?;
                let libs = [
                    (CudaLib::F32x2, "poot_f32x2"),
                    (CudaLib::F32x4, "poot_f32x4"),
                ];
                self.wide_load(out, vars, libs, "float", &format!("&{a}[{index}]"));
            }
            Stmt::TeamSum { var, lanes } => {
                let v = names::var(*var);
                let mut m = lanes / 2;
                while m > 0 {
                    out.line(format!("{v} += __shfl_xor_sync(0xffffffffu, {v}, {m}u);"));
                    m /= 2;
                }
            }
            Stmt::MmaTf32 { acc, a, b } => {
                let sums: Vec<String> = acc
                    .iter()
                    .map(|&v| format!("\"+f\"({})", names::var(v)))
                    .collect();
                let mut ins = Vec::with_capacity(6);
                for e in a.iter().chain(b) {
                    ins.push(format!("\"r\"({})", self.expr(e)?));
                }
                out.line(format!(
                    "asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \
                     {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" \
                     : {} : {});",
                    sums.join(", "),
                    ins.join(", ")
                ));
            }
            Stmt::MmaHalf { half, acc, a, b } => {
                let sums: Vec<String> = acc
                    .iter()
                    .map(|&v| format!("\"+f\"({})", names::var(v)))
                    .collect();
                let kind = match half {
                    Half::F16 => "f16",
                    Half::Bf16 => "bf16",
                };
                // Each pair of operands rounded and packed into one word, the first in the low
                // half (`cvt` puts its first source in the high half). Not volatile: the compiler
                // may share a conversion among the products that read it.
                out.open("{");
                let mut words = Vec::with_capacity(6);
                for (i, pair) in a.chunks(2).chain(b.chunks(2)).enumerate() {
                    let (lo, hi) = (self.expr(&pair[0])?, self.expr(&pair[1])?);
                    out.line(format!(
                        "unsigned poot_h{i}; asm(\"cvt.rn.{kind}x2.f32 %0, %1, %2;\" \
                         : \"=r\"(poot_h{i}) : \"f\"({hi}), \"f\"({lo}));"
                    ));
                    words.push(format!("\"r\"(poot_h{i})"));
                }
                out.line(format!(
                    "asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 \
                     {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" \
                     : {} : {});",
                    sums.join(", "),
                    words.join(", ")
                ));
                out.close("}");
            }
            Stmt::Barrier => out.line("__syncthreads();"),
            Stmt::Fault { code } => {
                self.libs.insert(CudaLib::Fault);
                out.line(format!("poot_trap(poot_fault, {code}u);"));
            }
        }
        Ok(())
    }

    /// `for var in start..end` stepping by `step` with `end` and `step` evaluated once, the
    /// counter never wrapping past `u32::MAX` (and a step that is 0 at run time running the body
    /// once); `body` renders the loop's body.
    pub(super) fn counted_loop(
        &mut self,
        out: &mut Code,
        var: Var,
        [start, end, step]: [&Expr; 3],
        body: impl FnOnce(&mut Self, &mut Code) -> Result<(), RenderError>,
    ) -> Result<(), RenderError> {
        let v = names::var(var);
        out.open("{");
        out.line(format!("const unsigned int {v}_end = {};", self.expr(end)?));
        out.line(format!(
            "const unsigned int {v}_step = {};",
            self.expr(step)?
        ));
        out.open(format!(
            "for (unsigned int {v} = {}; {v} < {v}_end; {v} += {v}_step) {{",
            self.expr(start)?
        ));
        body(self, out)?;
        out.open(format!(
            "if ({v}_step == 0u || {v}_end - {v} <= {v}_step) {{"
        ));
        out.line("break;");
        out.close("}");
        out.close("}");
        out.close("}");
        Ok(())
    }

    /// Loop `var` from `start` as planned by [`unroll::plan`]: each iteration a block of its
    /// own, those past `u.unchecked` behind a test of the counter.
    fn written_out(
        &mut self,
        out: &mut Code,
        var: Var,
        start: &Expr,
        body: &[Stmt],
        u: unroll::Unrolled,
    ) -> Result<(), RenderError> {
        let v = names::var(var);
        self.ranges.set(var, u.counter);
        out.open("{");
        out.line(format!(
            "// {} iterations of v += {}u while v < {}u, written out",
            u.trips, u.step, u.end
        ));
        out.line(format!(
            "const unsigned int {v}_first = {};",
            self.expr(start)?
        ));
        for t in 0..u.trips {
            let at = format!("{v}_first + {}u", t * u.step);
            if t < u.unchecked {
                out.open("{");
            } else {
                out.open(format!("if ({at} < {}u) {{", u.end));
            }
            out.line(format!("const unsigned int {v} = {at};"));
            self.block(out, body)?;
            out.close("}");
        }
        out.close("}");
        Ok(())
    }

    fn call(&mut self, lib: CudaLib, name: &str, args: &[&str]) -> String {
        self.libs.insert(lib);
        format!("{name}({})", args.join(", "))
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Result<String, RenderError> {
        Ok(match e {
            Expr::F32(x) => f32_lit(*x),
            Expr::I32(x) => i32_lit(*x),
            Expr::U32(x) => format!("{x}u"),
            Expr::Bool(b) => b.to_string(),
            Expr::Var(v) => self.var(*v),
            Expr::Builtin(b) if self.host => match b {
                Builtin::LocalId => "poot_tid".to_string(),
                Builtin::GroupId(axis) => {
                    format!("poot_g{}", axis_letter(self.k, *axis)?)
                }
                Builtin::GroupCountX => "poot_ngx".to_string(),
            },
            Expr::ShuffleXor { .. } if self.host => {
                return Err(RenderError::Unsupported {
                    kernel: self.k.name.clone(),
                    what: "a subgroup shuffle",
                    language: "host C",
                });
            }
            Expr::Builtin(b) => match b {
                Builtin::LocalId => "threadIdx.x".to_string(),
                Builtin::GroupId(axis) => format!("blockIdx.{}", axis_letter(self.k, *axis)?),
                Builtin::GroupCountX => "gridDim.x".to_string(),
            },
            Expr::Load { buf, index } => {
                format!("{}[{}]", names::param_of(self.k, *buf)?, self.expr(index)?)
            }
            Expr::LoadByte { buf, byte } => {
                let (p, i) = (names::param_of(self.k, *buf)?, self.expr(byte)?);
                self.call(CudaLib::LoadByte, "poot_load_byte", &[&p, &i])
            }
            Expr::LoadHalf { buf, index, half } => {
                let (p, i) = (names::param_of(self.k, *buf)?, self.expr(index)?);
                match half {
                    Half::F16 => self.call(CudaLib::LoadF16, "poot_load_f16", &[&p, &i]),
                    Half::Bf16 => self.call(CudaLib::LoadBf16, "poot_load_bf16", &[&p, &i]),
                }
            }
            Expr::LoadShared { arr, index } => {
                format!("{}[{}]", names::shared_of(self.k, *arr)?, self.expr(index)?)
            }
            Expr::Unary(op, x) => {
                let t = self.k.type_of(x)?;
                let x = self.expr(x)?;
                self.unary(*op, t, &x)
            }
            Expr::Binary(op, a, b) => {
                let t = self.k.type_of(a)?;
                let a = self.expr(a)?;
                let b = self.shift_amount(*op, b)?;
                self.binary(*op, t, &a, &b)
            }
            Expr::Cmp(op, a, b) => {
                let t = self.k.type_of(a)?;
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                let sym = cmp_symbol(*op);
                if t == Ty::Bool && is_ordering(*op) {
                    format!(
                        "((unsigned int){} {sym} (unsigned int){})",
                        operand(&a),
                        operand(&b)
                    )
                } else {
                    format!("({a} {sym} {b})")
                }
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                let (c, t, f) = (self.expr(cond)?, self.expr(on_true)?, self.expr(on_false)?);
                format!("({c} ? {t} : {f})")
            }
            Expr::ShuffleXor { value, mask } => {
                format!(
                    "__shfl_xor_sync(0xffffffffu, {}, {mask}u)",
                    strip_parens(&self.expr(value)?)
                )
            }
            Expr::MulAdd(a, b, c) => {
                let (a, b, c) = (self.expr(a)?, self.expr(b)?, self.expr(c)?);
                format!("fmaf({a}, {b}, {c})")
            }
            Expr::Cast(to, x) => {
                let from = self.k.type_of(x)?;
                let small = from == Ty::U32
                    && *to == Ty::F32
                    && self
                        .ranges
                        .of(self.k, x)
                        .is_some_and(|(_, hi)| hi < 1 << 23);
                let small_signed = from == Ty::I32
                    && *to == Ty::F32
                    && self
                        .ranges
                        .signed_of(self.k, x)
                        .is_some_and(|(lo, hi)| lo >= -(1 << 22) && hi < 1 << 22);
                let x = self.expr(x)?;
                if small {
                    // Exact for x < 2^23: 2^23 + x is an f32 whose mantissa is x. Cheaper than
                    // the conversion instruction, which issues at a fraction of the rate (every
                    // quantized weight passes through here).
                    format!(
                        "(__uint_as_float(0x4b000000u | {}) - 8388608.0f)",
                        operand(&x)
                    )
                } else if small_signed {
                    // The same for -2^22 <= x < 2^22 around 1.5 * 2^23 (Q4_0's and Q8_0's
                    // signed codes).
                    format!(
                        "(__uint_as_float(0x4b400000u + (unsigned int){}) - 12582912.0f)",
                        operand(&x)
                    )
                } else {
                    self.cast(from, *to, &x)
                }
            }
        })
    }

    /// The right operand of `op`; for a shift, already reduced modulo 32.
    fn shift_amount(&mut self, op: BinOp, b: &Expr) -> Result<String, RenderError> {
        match (op, b) {
            (BinOp::Shl | BinOp::Shr, Expr::U32(n)) => Ok(format!("{}u", n & 31)),
            (BinOp::Shl | BinOp::Shr, _) => Ok(format!("({} & 31u)", self.expr(b)?)),
            (
                BinOp::Add
                | BinOp::Sub
                | BinOp::Mul
                | BinOp::Div
                | BinOp::Rem
                | BinOp::Max
                | BinOp::Min
                | BinOp::Pow
                | BinOp::And
                | BinOp::Or
                | BinOp::Xor,
                _,
            ) => self.expr(b),
        }
    }

    fn unary(&mut self, op: UnOp, t: Ty, x: &str) -> String {
        let math = |f: &str| format!("{f}({x})");
        match op {
            UnOp::Neg => match t {
                Ty::I32 => format!("(int)(0u - (unsigned int){})", operand(x)),
                Ty::F32 | Ty::U32 | Ty::Bool => format!("(-{x})"),
            },
            UnOp::Abs => match t {
                Ty::I32 => self.call(CudaLib::AbsI32, "poot_abs_i32", &[x]),
                Ty::F32 | Ty::U32 | Ty::Bool => math("fabsf"),
            },
            UnOp::Exp => math("expf"),
            UnOp::Log => math("logf"),
            UnOp::Sqrt => math("sqrtf"),
            UnOp::Rsqrt => format!("(1.0f / sqrtf({x}))"),
            UnOp::Recip => format!("(1.0f / {x})"),
            UnOp::Tanh => math("tanhf"),
            UnOp::Erf => math("erff"),
            UnOp::Floor => math("floorf"),
            UnOp::Ceil => math("ceilf"),
            // Ties to even in the default rounding mode, on the device and the host.
            UnOp::Round => math("rintf"),
            UnOp::Sin => math("sinf"),
            UnOp::Cos => math("cosf"),
            UnOp::Not => match t {
                Ty::Bool => format!("(!{x})"),
                Ty::F32 | Ty::I32 | Ty::U32 => format!("(~{x})"),
            },
            UnOp::RoundF16 => self.call(CudaLib::RoundF16, "poot_round_f16", &[x]),
            UnOp::RoundBf16 => self.call(CudaLib::RoundBf16, "poot_round_bf16", &[x]),
            UnOp::BitsToU32 => math("__float_as_uint"),
            UnOp::BitsToF32 => math("__uint_as_float"),
            UnOp::F16ToF32 => self.call(CudaLib::F16ToF32, "poot_f16_to_f32", &[x]),
        }
    }

    fn binary(&mut self, op: BinOp, t: Ty, a: &str, b: &str) -> String {
        let infix = |sym: &str| format!("({a} {sym} {b})");
        let wrapping = |sym: &str| {
            format!(
                "(int)((unsigned int){} {sym} (unsigned int){})",
                operand(a),
                operand(b)
            )
        };
        match (op, t) {
            (BinOp::Add, Ty::I32) => wrapping("+"),
            (BinOp::Sub, Ty::I32) => wrapping("-"),
            (BinOp::Mul, Ty::I32) => wrapping("*"),
            (BinOp::Add, Ty::F32 | Ty::U32 | Ty::Bool) => infix("+"),
            (BinOp::Sub, Ty::F32 | Ty::U32 | Ty::Bool) => infix("-"),
            (BinOp::Mul, Ty::F32 | Ty::U32 | Ty::Bool) => infix("*"),
            (BinOp::Div, Ty::I32) => self.call(CudaLib::DivI32, "poot_div_i32", &[a, b]),
            (BinOp::Div, Ty::U32) => self.call(CudaLib::DivU32, "poot_div_u32", &[a, b]),
            (BinOp::Div, Ty::F32 | Ty::Bool) => infix("/"),
            (BinOp::Rem, Ty::I32) => self.call(CudaLib::RemI32, "poot_rem_i32", &[a, b]),
            (BinOp::Rem, Ty::U32) => self.call(CudaLib::RemU32, "poot_rem_u32", &[a, b]),
            (BinOp::Rem, Ty::F32 | Ty::Bool) => infix("%"),
            (BinOp::Max, Ty::F32) => self.call(CudaLib::MaxF32, "poot_max_f32", &[a, b]),
            (BinOp::Max, Ty::I32) => self.call(CudaLib::MaxI32, "poot_max_i32", &[a, b]),
            (BinOp::Max, Ty::U32 | Ty::Bool) => self.call(CudaLib::MaxU32, "poot_max_u32", &[a, b]),
            (BinOp::Min, Ty::F32) => self.call(CudaLib::MinF32, "poot_min_f32", &[a, b]),
            (BinOp::Min, Ty::I32) => self.call(CudaLib::MinI32, "poot_min_i32", &[a, b]),
            (BinOp::Min, Ty::U32 | Ty::Bool) => self.call(CudaLib::MinU32, "poot_min_u32", &[a, b]),
            (BinOp::Pow, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => format!("powf({a}, {b})"),
            (BinOp::And, Ty::Bool) => infix("&&"),
            (BinOp::Or, Ty::Bool) => infix("||"),
            (BinOp::Xor, Ty::Bool) => infix("!="),
            (BinOp::And, Ty::F32 | Ty::I32 | Ty::U32) => infix("&"),
            (BinOp::Or, Ty::F32 | Ty::I32 | Ty::U32) => infix("|"),
            (BinOp::Xor, Ty::F32 | Ty::I32 | Ty::U32) => infix("^"),
            (BinOp::Shl, Ty::I32) => format!("(int)((unsigned int){} << {b})", operand(a)),
            (BinOp::Shl, Ty::F32 | Ty::U32 | Ty::Bool) => format!("({a} << {b})"),
            (BinOp::Shr, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => format!("({a} >> {b})"),
        }
    }

    fn cast(&mut self, from: Ty, to: Ty, x: &str) -> String {
        match (from, to) {
            (Ty::F32, Ty::F32) | (Ty::I32, Ty::I32) | (Ty::U32, Ty::U32) | (Ty::Bool, Ty::Bool) => {
                x.to_string()
            }
            (Ty::F32, Ty::I32) => self.call(CudaLib::F32ToI32, "poot_f32_to_i32", &[x]),
            (Ty::F32, Ty::U32) => self.call(CudaLib::F32ToU32, "poot_f32_to_u32", &[x]),
            (Ty::F32, Ty::Bool) => self.call(CudaLib::F32ToBool, "poot_f32_to_bool", &[x]),
            // C converts integers to float rounding to nearest, ties to even (cvt.rn).
            (Ty::I32 | Ty::U32, Ty::F32) => format!("((float){})", operand(x)),
            (Ty::I32, Ty::U32) => format!("((unsigned int){})", operand(x)),
            (Ty::U32, Ty::I32) => format!("((int){})", operand(x)),
            (Ty::I32, Ty::Bool) => format!("({x} != 0)"),
            (Ty::U32, Ty::Bool) => format!("({x} != 0u)"),
            (Ty::Bool, Ty::F32) => format!("({x} ? 1.0f : 0.0f)"),
            (Ty::Bool, Ty::I32) => format!("({x} ? 1 : 0)"),
            (Ty::Bool, Ty::U32) => format!("({x} ? 1u : 0u)"),
        }
    }
}

fn f32_lit(x: f32) -> String {
    match spell_f32(x) {
        F32Spelling::Decimal(s) if s.starts_with('-') => format!("({s}f)"),
        F32Spelling::Decimal(s) => format!("{s}f"),
        F32Spelling::Bits(bits, shown) => format!("__uint_as_float(0x{bits:08x}u /* {shown} */)"),
    }
}

fn i32_lit(x: i32) -> String {
    if x == i32::MIN {
        "(-2147483647 - 1)".to_string()
    } else if x < 0 {
        format!("({x})")
    } else {
        x.to_string()
    }
}
