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

use super::c_like::axis_letter;
use super::check::check;
use super::code::Code;
use super::fault::{FAULT_CODE_WORD, FAULT_FLAG_WORD, can_fault};
use super::literal::{F32Spelling, spell_f32};
use super::walk::{Dialect, Walker, unsupported};
use super::wgsl_lib::WgslLib;
use super::{RenderError, entry_name, libs_with_deps, names};
use crate::ir::{Access, BinOp, Builtin, Expr, Half, Kernel, ParamId, Stmt, Ty, UnOp, Var, Word};

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

/// A WGSL compute shader and the bindings it declares, as the WGSL devices (wgpu, raw Vulkan)
/// compile it: a rendered kernel, or a hand-written one.
#[derive(Clone, Copy, Debug)]
pub struct WgslShader<'a> {
    /// The kernel's name, for compile errors and fault reports.
    pub name: &'a str,
    pub source: &'a str,
    /// The `@compute` entry point.
    pub entry: &'a str,
    /// The buffer parameters at `@group(0) @binding(i)`, in order: read-only or read-write
    /// storage of 32-bit words.
    pub params: &'a [Access],
    /// The binding of the fault words (`var<storage, read_write> _: array<atomic<u32>>`) when
    /// the kernel can fault; it must follow the parameters.
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
    let wgsl = Wgsl {
        params: params.clone(),
        libs: BTreeSet::new(),
    };
    let mut r = Walker::new(k, facts, wgsl);
    let mut body = Code::at_depth(1);
    r.block(&mut body, &k.body)?;

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
    for l in libs_with_deps(&r.d.libs, WgslLib::deps) {
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

/// The WGSL dialect.
struct Wgsl {
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

impl Wgsl {
    fn call(&mut self, lib: WgslLib, args: &[&str]) -> String {
        self.libs.insert(lib);
        format!("{}({})", lib.name(&self.params), args.join(", "))
    }
}

impl Dialect for Wgsl {
    const BOUNDS: bool = false;
    const GUARDS_LITERALS: bool = true;

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

    /// What this dialect has no spelling for (the planner emits it only for CUDA).
    fn refuse_stmt(&self, k: &Kernel, s: &Stmt) -> Result<(), RenderError> {
        let what = match s {
            Stmt::TeamSum { .. } => "a team sum (subgroup shuffle)",
            Stmt::MmaTf32 { .. } => "a tf32 matrix tile",
            Stmt::MmaHalf { .. } => "a half-precision matrix tile",
            Stmt::StoreSharedHalves { .. } => "a half-precision matrix tile's staging",
            _ => return Ok(()),
        };
        Err(unsupported(k, what, "WGSL"))
    }

    fn refuse_expr(&self, k: &Kernel, e: &Expr) -> Result<(), RenderError> {
        match e {
            Expr::ShuffleXor { .. } => Err(unsupported(k, "a subgroup shuffle", "WGSL")),
            _ => Ok(()),
        }
    }

    fn declare(&self, out: &mut Code, v: Var, t: Ty, value: &str, constant: bool) {
        let keyword = if constant { "let" } else { "var" };
        out.line(format!("{keyword} {}: {} = {value};", names::var(v), ty(t)));
    }

    fn let_u32(name: &str, value: &str) -> String {
        format!("let {name}: u32 = {value};")
    }

    fn for_header(v: &str, start: &str, end: &str, step: &str) -> String {
        format!("for (var {v}: u32 = {start}; {v} < {end}; {v} = {v} + {step}) {{")
    }

    fn builtin(&self, k: &Kernel, b: Builtin) -> Result<String, RenderError> {
        Ok(match b {
            Builtin::LocalId => "poot_lid.x".to_string(),
            Builtin::GroupId(axis) => format!("poot_wid.{}", axis_letter(k, axis)?),
            Builtin::GroupCountX => "poot_nwg.x".to_string(),
        })
    }

    fn load_byte(&mut self, _: &Kernel, buf: ParamId, byte: &str) -> Result<String, RenderError> {
        Ok(self.call(WgslLib::LoadByte(buf.0), &[byte]))
    }

    fn load_half(
        &mut self,
        _: &Kernel,
        buf: ParamId,
        index: &str,
        half: Half,
    ) -> Result<String, RenderError> {
        Ok(match half {
            Half::F16 => self.call(WgslLib::LoadF16(buf.0), &[index]),
            Half::Bf16 => self.call(WgslLib::LoadBf16(buf.0), &[index]),
        })
    }

    /// Through its identity helper (see the module's notes on constant folding).
    fn runtime(&mut self, t: Ty, x: String) -> String {
        let lib = match t {
            Ty::F32 => WgslLib::RtF32,
            Ty::I32 => WgslLib::RtI32,
            Ty::U32 => WgslLib::RtU32,
            Ty::Bool => WgslLib::RtBool,
        };
        self.call(lib, &[&x])
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

    fn ordered_bools(a: &str, sym: &str, b: &str) -> String {
        format!("(select(0u, 1u, {a}) {sym} select(0u, 1u, {b}))")
    }

    fn select(cond: &str, on_true: &str, on_false: &str) -> String {
        format!("select({on_false}, {on_true}, {cond})")
    }

    fn mul_add(a: &str, b: &str, c: &str) -> String {
        format!("fma({a}, {b}, {c})")
    }

    fn fault(&mut self, out: &mut Code, code: u32) {
        out.line(format!(
            "atomicMax(&poot_fault[{FAULT_CODE_WORD}], {code}u);"
        ));
        out.line(format!("atomicOr(&poot_fault[{FAULT_FLAG_WORD}], 1u);"));
    }

    fn barrier(&self) -> &'static str {
        "workgroupBarrier();"
    }

    fn let_wide(
        &mut self,
        out: &mut Code,
        vars: &[Var],
        array: &str,
        index: &str,
        elem: Ty,
        _: bool,
    ) {
        let first = format!("{}_at", names::var(vars[0]));
        out.line(format!("let {first}: u32 = {index};"));
        for (i, v) in vars.iter().enumerate() {
            out.line(format!(
                "let {}: {} = {array}[{first} + {i}u];",
                names::var(*v),
                ty(elem)
            ));
        }
    }
}
