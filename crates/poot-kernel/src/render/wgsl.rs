//! WGSL rendering, for wgpu and (through naga's SPIR-V writer) raw Vulkan.
//!
//! Buffer parameter `i` is `@group(0) @binding(i) var<storage, read|read_write>` over
//! `array<f32|i32|u32>`; a kernel that can fault also binds `poot_fault` at binding
//! `params.len()` (see [`fault`](super::fault)). The entry point is
//! `@compute @workgroup_size(workgroup)`, named [`entry_name`](super::entry_name), and takes the
//! local invocation id, workgroup id and workgroup count. No `enable` directive is needed.
//!
//! **Constant folding.** naga evaluates operations on constants while parsing and rejects the
//! shader when one overflows, divides by zero or yields infinity (`1i << 31u`, `1e38f * 1e38f`,
//! `exp(100.0f)`). A description may well hold such an operation (the values are run-time
//! arithmetic to it), so any operation whose operands are all literals gets one operand passed
//! through an identity helper (`poot_rt_f32(...)`), making it a run-time value with the usual
//! wrapping, IEEE semantics.

use std::collections::BTreeSet;

use super::c_like::{axis_letter, cmp_symbol, is_ordering, strip_parens};
use super::check::{Facts, check};
use super::code::Code;
use super::fault::{FAULT_CODE_WORD, FAULT_FLAG_WORD, can_fault};
use super::literal::{F32Spelling, spell_f32};
use super::wgsl_lib::WgslLib;
use super::{RenderError, entry_name, names};
use crate::ir::{Access, BinOp, Builtin, Expr, Half, Kernel, ParamId, Stmt, Ty, UnOp, Word};

/// A kernel rendered to WGSL, with what a device needs to bind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslKernel {
    pub source: String,
    /// The entry point's name ([`entry_name`](super::entry_name)).
    pub entry: String,
    /// One binding per buffer parameter, in parameter order (binding `i` is parameter `i`).
    pub bindings: Vec<BindingInfo>,
    /// The fault word's binding (always `params.len()`), when the kernel can fault.
    pub fault_binding: Option<u32>,
}

/// One buffer parameter's binding in group 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    pub binding: u32,
    pub param: ParamId,
    /// The variable's name in the source.
    pub name: String,
    pub word: Word,
    pub access: Access,
}

/// Renders `k` as one WGSL module holding one compute entry point.
pub fn render_wgsl(k: &Kernel) -> Result<WgslKernel, RenderError> {
    let facts = check(k)?;
    let params: Vec<String> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| names::param(i, &p.name))
        .collect();
    let mut r = Wgsl {
        k,
        facts,
        params: params.clone(),
        libs: BTreeSet::new(),
    };
    let mut body = Code::at_depth(1);
    r.block(&mut body, &k.body)?;

    let mut libs = BTreeSet::new();
    for &l in &r.libs {
        libs.extend(l.deps());
        libs.insert(l);
    }
    let entry = entry_name(k);
    let mut bindings = Vec::with_capacity(k.params.len());
    let mut out = Code::at_depth(0);
    out.line(format!(
        "// poot kernel {entry}: rendered from a kernel description, do not edit."
    ));
    for ((i, p), name) in k.params.iter().enumerate().zip(&params) {
        let binding = i as u32;
        let access = match p.access {
            Access::Read => "read",
            Access::ReadWrite => "read_write",
        };
        out.line(format!(
            "@group(0) @binding({binding}) var<storage, {access}> {name}: array<{}>;",
            ty(p.word.ty())
        ));
        bindings.push(BindingInfo {
            binding,
            param: ParamId(binding),
            name: name.clone(),
            word: p.word,
            access: p.access,
        });
    }
    let fault_binding = can_fault(k).then_some(k.params.len() as u32);
    if let Some(b) = fault_binding {
        out.line(format!(
            "@group(0) @binding({b}) var<storage, read_write> poot_fault: array<atomic<u32>>;"
        ));
    }
    for (i, s) in k.shared.iter().enumerate() {
        out.line(format!(
            "var<workgroup> {}: array<{}, {}>;",
            names::shared(i, &s.name),
            ty(s.ty),
            s.len
        ));
    }
    for l in libs {
        out.line("");
        out.raw(&l.source(&params));
    }
    out.line("");
    out.line(format!("@compute @workgroup_size({})", k.workgroup));
    out.line(format!(
        "fn {entry}(@builtin(local_invocation_id) poot_lid: vec3<u32>, @builtin(workgroup_id) poot_wid: vec3<u32>, @builtin(num_workgroups) poot_nwg: vec3<u32>) {{"
    ));
    out.raw(&body.finish());
    out.line("}");
    Ok(WgslKernel {
        source: out.finish(),
        entry,
        bindings,
        fault_binding,
    })
}

struct Wgsl<'k> {
    k: &'k Kernel,
    facts: Facts,
    /// Parameter identifiers, by index.
    params: Vec<String>,
    libs: BTreeSet<WgslLib>,
}

fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "f32",
        Ty::I32 => "i32",
        Ty::U32 => "u32",
        Ty::Bool => "bool",
    }
}

fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) => true,
        Expr::Var(_)
        | Expr::Builtin(_)
        | Expr::Load { .. }
        | Expr::LoadByte { .. }
        | Expr::LoadHalf { .. }
        | Expr::LoadShared { .. }
        | Expr::Unary(..)
        | Expr::Binary(..)
        | Expr::Cmp(..)
        | Expr::Select { .. }
        | Expr::MulAdd(..)
        | Expr::ShuffleXor { .. }
        | Expr::Cast(..) => false,
    }
}

impl Wgsl<'_> {
    fn block(&mut self, out: &mut Code, body: &[Stmt]) -> Result<(), RenderError> {
        for s in body {
            self.stmt(out, s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, out: &mut Code, s: &Stmt) -> Result<(), RenderError> {
        match s {
            Stmt::Let { var, ty: t, value } => {
                let value = self.expr(value)?;
                let keyword = if self.facts.mutated.contains(var) {
                    "var"
                } else {
                    "let"
                };
                out.line(format!(
                    "{keyword} {}: {} = {value};",
                    names::var(*var),
                    ty(*t)
                ));
            }
            Stmt::Set { var, value } => {
                let value = self.expr(value)?;
                out.line(format!("{} = {value};", names::var(*var)));
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
                out.open("{");
                out.line(format!("let {v}_end: u32 = {};", self.expr(end)?));
                out.line(format!("let {v}_step: u32 = {};", self.expr(step)?));
                out.open(format!(
                    "for (var {v}: u32 = {}; {v} < {v}_end; {v} = {v} + {v}_step) {{",
                    self.expr(start)?
                ));
                self.block(out, body)?;
                out.open(format!(
                    "if ({v}_step == 0u || {v}_end - {v} <= {v}_step) {{"
                ));
                out.line("break;");
                out.close("}");
                out.close("}");
                out.close("}");
            }
            Stmt::LetWords { vars, buf, index } => {
                let p = names::param_of(self.k, *buf)?;
                let index = self.expr(index)?;
                let word = ty(self.k.params[buf.0 as usize].word.ty());
                let first = format!("{}_at", names::var(vars[0]));
                out.line(format!("let {first}: u32 = {index};"));
                for (i, v) in vars.iter().enumerate() {
                    out.line(format!(
                        "let {}: {word} = {p}[{first} + {i}u];",
                        names::var(*v)
                    ));
                }
            }
            Stmt::LetShared { vars, arr, index } => {
                let a = names::shared_of(self.k, *arr)?;
                let index = self.expr(index)?;
                let first = format!("{}_at", names::var(vars[0]));
                out.line(format!("let {first}: u32 = {index};"));
                for (i, v) in vars.iter().enumerate() {
                    out.line(format!(
                        "let {}: f32 = {a}[{first} + {i}u];",
                        names::var(*v)
                    ));
                }
            }
            Stmt::TeamSum { .. } => return Err(self.unsupported("a team sum (subgroup shuffle)")),
            Stmt::MmaTf32 { .. } => return Err(self.unsupported("a tf32 matrix tile")),
            Stmt::MmaHalf { .. } => return Err(self.unsupported("a half-precision matrix tile")),
            Stmt::Barrier => out.line("workgroupBarrier();"),
            Stmt::Fault { code } => {
                out.line(format!(
                    "atomicMax(&poot_fault[{FAULT_CODE_WORD}], {code}u);"
                ));
                out.line(format!("atomicOr(&poot_fault[{FAULT_FLAG_WORD}], 1u);"));
            }
        }
        Ok(())
    }

    /// What this renderer has no spelling for (the planner emits it only for CUDA).
    fn unsupported(&self, what: &'static str) -> RenderError {
        RenderError::Unsupported {
            kernel: self.k.name.clone(),
            what,
            language: "WGSL",
        }
    }

    fn call(&mut self, lib: WgslLib, args: &[&str]) -> String {
        self.libs.insert(lib);
        format!("{}({})", lib.name(&self.params), args.join(", "))
    }

    /// `e` rendered as a run-time value: a literal goes through its identity helper.
    fn runtime(&mut self, e: &Expr) -> Result<String, RenderError> {
        let x = self.expr(e)?;
        Ok(match e {
            Expr::F32(_) => self.call(WgslLib::RtF32, &[&x]),
            Expr::I32(_) => self.call(WgslLib::RtI32, &[&x]),
            Expr::U32(_) => self.call(WgslLib::RtU32, &[&x]),
            Expr::Bool(_) => self.call(WgslLib::RtBool, &[&x]),
            Expr::Var(_)
            | Expr::Builtin(_)
            | Expr::Load { .. }
            | Expr::LoadByte { .. }
            | Expr::LoadHalf { .. }
            | Expr::LoadShared { .. }
            | Expr::Unary(..)
            | Expr::Binary(..)
            | Expr::Cmp(..)
            | Expr::Select { .. }
            | Expr::MulAdd(..)
            | Expr::ShuffleXor { .. }
            | Expr::Cast(..) => x,
        })
    }

    fn expr(&mut self, e: &Expr) -> Result<String, RenderError> {
        Ok(match e {
            Expr::F32(x) => f32_lit(*x),
            Expr::I32(x) => i32_lit(*x),
            Expr::U32(x) => format!("{x}u"),
            Expr::Bool(b) => b.to_string(),
            Expr::Var(v) => names::var(*v),
            Expr::Builtin(b) => match b {
                Builtin::LocalId => "poot_lid.x".to_string(),
                Builtin::GroupId(axis) => format!("poot_wid.{}", axis_letter(self.k, *axis)?),
                Builtin::GroupCountX => "poot_nwg.x".to_string(),
            },
            Expr::Load { buf, index } => {
                format!("{}[{}]", names::param_of(self.k, *buf)?, self.expr(index)?)
            }
            Expr::LoadByte { buf, byte } => {
                let i = self.expr(byte)?;
                self.call(WgslLib::LoadByte(buf.0), &[&i])
            }
            Expr::LoadHalf { buf, index, half } => {
                let i = self.expr(index)?;
                match half {
                    Half::F16 => self.call(WgslLib::LoadF16(buf.0), &[&i]),
                    Half::Bf16 => self.call(WgslLib::LoadBf16(buf.0), &[&i]),
                }
            }
            Expr::LoadShared { arr, index } => {
                format!("{}[{}]", names::shared_of(self.k, *arr)?, self.expr(index)?)
            }
            Expr::Unary(op, x) => {
                let t = self.k.type_of(x)?;
                let x = if is_literal(x) {
                    self.runtime(x)?
                } else {
                    self.expr(x)?
                };
                self.unary(*op, t, &x)
            }
            Expr::Binary(op, a, b) => {
                let t = self.k.type_of(a)?;
                let a = if is_literal(a) && is_literal(b) {
                    self.runtime(a)?
                } else {
                    self.expr(a)?
                };
                let b = self.shift_amount(*op, b)?;
                self.binary(*op, t, &a, &b)
            }
            Expr::Cmp(op, a, b) => {
                let t = self.k.type_of(a)?;
                let a = if is_literal(a) && is_literal(b) {
                    self.runtime(a)?
                } else {
                    self.expr(a)?
                };
                let b = self.expr(b)?;
                let sym = cmp_symbol(*op);
                if t == Ty::Bool && is_ordering(*op) {
                    format!("(select(0u, 1u, {a}) {sym} select(0u, 1u, {b}))")
                } else {
                    format!("({a} {sym} {b})")
                }
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                let f = if is_literal(cond) && is_literal(on_true) && is_literal(on_false) {
                    self.runtime(on_false)?
                } else {
                    self.expr(on_false)?
                };
                let (c, t) = (self.expr(cond)?, self.expr(on_true)?);
                format!("select({f}, {t}, {c})")
            }
            Expr::ShuffleXor { .. } => return Err(self.unsupported("a subgroup shuffle")),
            Expr::MulAdd(a, b, c) => {
                // All literals would be evaluated by the shader compiler, which may refuse
                // what the device computes (an overflow): keep one operand a run-time value.
                let c = if is_literal(a) && is_literal(b) && is_literal(c) {
                    self.runtime(c)?
                } else {
                    self.expr(c)?
                };
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                format!("fma({a}, {b}, {c})")
            }
            Expr::Cast(to, x) => {
                let from = self.k.type_of(x)?;
                let x = if is_literal(x) {
                    self.runtime(x)?
                } else {
                    self.expr(x)?
                };
                self.cast(from, *to, &x)
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
            UnOp::Neg => format!("(-{x})"),
            UnOp::Abs => math("abs"),
            UnOp::Exp => math("exp"),
            UnOp::Log => math("log"),
            UnOp::Sqrt => math("sqrt"),
            UnOp::Rsqrt => format!("(1.0f / sqrt({x}))"),
            UnOp::Recip => format!("(1.0f / {x})"),
            UnOp::Tanh => self.call(WgslLib::Tanh, &[x]),
            UnOp::Erf => self.call(WgslLib::Erf, &[x]),
            UnOp::Floor => math("floor"),
            UnOp::Ceil => math("ceil"),
            // WGSL's round() takes ties to even.
            UnOp::Round => math("round"),
            UnOp::Sin => math("sin"),
            UnOp::Cos => math("cos"),
            UnOp::Not => match t {
                Ty::Bool => format!("(!{x})"),
                Ty::F32 | Ty::I32 | Ty::U32 => format!("(~{x})"),
            },
            UnOp::RoundF16 => self.call(WgslLib::RoundF16, &[x]),
            UnOp::RoundBf16 => self.call(WgslLib::RoundBf16, &[x]),
            UnOp::BitsToU32 => format!("bitcast<u32>({x})"),
            UnOp::BitsToF32 => format!("bitcast<f32>({x})"),
            UnOp::F16ToF32 => self.call(WgslLib::F16ToF32, &[x]),
        }
    }

    fn binary(&mut self, op: BinOp, t: Ty, a: &str, b: &str) -> String {
        let infix = |sym: &str| format!("({a} {sym} {b})");
        match (op, t) {
            (BinOp::Add, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => infix("+"),
            (BinOp::Sub, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => infix("-"),
            (BinOp::Mul, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => infix("*"),
            (BinOp::Div, Ty::I32) => self.call(WgslLib::DivI32, &[a, b]),
            (BinOp::Div, Ty::U32) => self.call(WgslLib::DivU32, &[a, b]),
            (BinOp::Div, Ty::F32 | Ty::Bool) => infix("/"),
            (BinOp::Rem, Ty::I32) => self.call(WgslLib::RemI32, &[a, b]),
            (BinOp::Rem, Ty::U32) => self.call(WgslLib::RemU32, &[a, b]),
            (BinOp::Rem, Ty::F32 | Ty::Bool) => infix("%"),
            (BinOp::Max, Ty::F32) => self.call(WgslLib::MaxF32, &[a, b]),
            (BinOp::Max, Ty::I32 | Ty::U32 | Ty::Bool) => format!("max({a}, {b})"),
            (BinOp::Min, Ty::F32) => self.call(WgslLib::MinF32, &[a, b]),
            (BinOp::Min, Ty::I32 | Ty::U32 | Ty::Bool) => format!("min({a}, {b})"),
            (BinOp::Pow, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => {
                self.call(WgslLib::Pow, &[a, b])
            }
            (BinOp::And, Ty::Bool) => infix("&&"),
            (BinOp::Or, Ty::Bool) => infix("||"),
            (BinOp::Xor, Ty::Bool) => infix("!="),
            (BinOp::And, Ty::F32 | Ty::I32 | Ty::U32) => infix("&"),
            (BinOp::Or, Ty::F32 | Ty::I32 | Ty::U32) => infix("|"),
            (BinOp::Xor, Ty::F32 | Ty::I32 | Ty::U32) => infix("^"),
            (BinOp::Shl, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => format!("({a} << {b})"),
            (BinOp::Shr, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool) => format!("({a} >> {b})"),
        }
    }

    fn cast(&mut self, from: Ty, to: Ty, x: &str) -> String {
        match (from, to) {
            (Ty::F32, Ty::F32) | (Ty::I32, Ty::I32) | (Ty::U32, Ty::U32) | (Ty::Bool, Ty::Bool) => {
                x.to_string()
            }
            (Ty::F32, Ty::I32) => self.call(WgslLib::F32ToI32, &[x]),
            (Ty::F32, Ty::U32) => self.call(WgslLib::F32ToU32, &[x]),
            (Ty::F32, Ty::Bool) => self.call(WgslLib::F32ToBool, &[x]),
            (Ty::I32, Ty::F32) => self.call(WgslLib::I32ToF32, &[x]),
            (Ty::U32, Ty::F32) => self.call(WgslLib::U32ToF32, &[x]),
            (Ty::I32, Ty::U32) => format!("bitcast<u32>({x})"),
            (Ty::U32, Ty::I32) => format!("bitcast<i32>({x})"),
            (Ty::I32, Ty::Bool) => format!("({x} != 0i)"),
            (Ty::U32, Ty::Bool) => format!("({x} != 0u)"),
            (Ty::Bool, Ty::F32) => format!("select(0.0f, 1.0f, {x})"),
            (Ty::Bool, Ty::I32) => format!("select(0i, 1i, {x})"),
            (Ty::Bool, Ty::U32) => format!("select(0u, 1u, {x})"),
        }
    }
}

fn f32_lit(x: f32) -> String {
    match spell_f32(x) {
        F32Spelling::Decimal(s) if s.starts_with('-') => format!("({s}f)"),
        F32Spelling::Decimal(s) => format!("{s}f"),
        F32Spelling::Bits(bits, shown) => format!("bitcast<f32>(0x{bits:08x}u /* {shown} */)"),
    }
}

fn i32_lit(x: i32) -> String {
    if x == i32::MIN {
        "bitcast<i32>(0x80000000u)".to_string()
    } else if x < 0 {
        format!("({x}i)")
    } else {
        format!("{x}i")
    }
}
