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

use super::c_like::{axis_letter, operand, strip_parens};
use super::check::check;
use super::code::Code;
use super::cuda_lib::CudaLib;
use super::fault::can_fault;
use super::literal::{F32Spelling, spell_f32};
use super::walk::{Dialect, Walker, unsupported};
use super::{RenderError, entry_name, libs_with_deps, names};
use crate::ir::{Access, BinOp, Builtin, Expr, Half, Kernel, ParamId, Stmt, Ty, UnOp, Var, Word};

/// Renders `k` as one CUDA C translation unit holding one `extern "C"` kernel.
pub fn render_cuda(k: &Kernel) -> Result<String, RenderError> {
    let facts = check(k)?;
    let mut r = Walker::new(k, facts, Cuda::default());
    let mut body = Code::at_depth(1);
    r.d.libs.insert(CudaLib::WaitPredecessors);
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

    let entry = entry_name(k);
    let mut out = Code::at_depth(0);
    out.line(format!(
        "// poot kernel {entry}: rendered from a kernel description, do not edit."
    ));
    for l in libs_with_deps(&r.d.libs, CudaLib::deps) {
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

/// The CUDA C dialect, and the two languages written from the same statements: HIP for AMD
/// GPUs ([`super::hip`]) and the C the host CPU renderer writes ([`super::host_c`]).
#[derive(Default)]
pub(super) struct Cuda {
    pub(super) libs: BTreeSet<CudaLib>,
    pub(super) language: Language,
    /// On the host, the variables held per thread (arrays indexed by the thread) because the
    /// kernel's barriers split it into phases that each loop over the threads.
    pub(super) promoted: HashSet<Var>,
}

/// The language a [`Cuda`] dialect writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Language {
    /// CUDA C for NVRTC.
    #[default]
    Cuda,
    /// HIP for AMD GPUs: CUDA C but for the warp shuffles (a wavefront of 32 or 64 lanes), the
    /// workgroup count (read from the dispatch packet), the half widening and the trap; no
    /// matrix-unit products.
    Hip,
    /// C for the host CPU: one function runs every thread of a workgroup in turn, so builtins,
    /// wide loads and checks are spelled for that.
    HostC,
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

impl Cuda {
    fn language(&self) -> &'static str {
        match self.language {
            Language::Cuda => "CUDA C",
            Language::Hip => "HIP",
            Language::HostC => "host C",
        }
    }

    fn host(&self) -> bool {
        self.language == Language::HostC
    }

    fn call(&mut self, lib: CudaLib, name: &str, args: &[&str]) -> String {
        self.libs.insert(lib);
        format!("{name}({})", args.join(", "))
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

    fn sums(acc: &[Var; 4]) -> String {
        acc.iter()
            .map(|&v| format!("\"+f\"({})", names::var(v)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Dialect for Cuda {
    const BOUNDS: bool = true;
    const GUARDS_LITERALS: bool = false;

    fn f32_lit(x: f32) -> String {
        match spell_f32(x) {
            F32Spelling::Decimal(s) if s.starts_with('-') => format!("({s}f)"),
            F32Spelling::Decimal(s) => format!("{s}f"),
            F32Spelling::Bits(bits, shown) => {
                format!("__uint_as_float(0x{bits:08x}u /* {shown} */)")
            }
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

    fn refuse_stmt(&self, k: &Kernel, s: &Stmt) -> Result<(), RenderError> {
        match s {
            // The host target has no subgroups or matrix units, and its renderer splits the
            // kernel at its barriers before rendering the phases between them.
            Stmt::TeamSum { .. }
            | Stmt::MmaTf32 { .. }
            | Stmt::MmaHalf { .. }
            | Stmt::StoreSharedHalves { .. }
            | Stmt::Barrier
                if self.host() =>
            {
                Err(unsupported(
                    k,
                    "a subgroup, matrix-unit or barrier statement inside a phase",
                    self.language(),
                ))
            }
            // `mma.sync` is PTX; AMD's matrix cores take other tiles (the planner gives the
            // ROCm target none).
            Stmt::MmaTf32 { .. } | Stmt::MmaHalf { .. } | Stmt::StoreSharedHalves { .. }
                if self.language == Language::Hip =>
            {
                Err(unsupported(
                    k,
                    "a matrix-unit product or its staging (mma.sync)",
                    self.language(),
                ))
            }
            _ => Ok(()),
        }
    }

    fn refuse_expr(&self, k: &Kernel, e: &Expr) -> Result<(), RenderError> {
        match e {
            Expr::ShuffleXor { .. } if self.host() => {
                Err(unsupported(k, "a subgroup shuffle", self.language()))
            }
            _ => Ok(()),
        }
    }

    /// The thread's element of its array where `v` is promoted.
    fn var(&self, v: Var) -> String {
        if self.promoted.contains(&v) {
            format!("{}[poot_tid]", names::var(v))
        } else {
            names::var(v)
        }
    }

    /// Promoted, the thread's element is assigned instead.
    fn declare(&self, out: &mut Code, v: Var, t: Ty, value: &str, constant: bool) {
        if self.promoted.contains(&v) {
            out.line(format!("{} = {value};", self.var(v)));
        } else {
            let constness = if constant { "const " } else { "" };
            out.line(format!("{constness}{} {} = {value};", ty(t), names::var(v)));
        }
    }

    fn let_u32(name: &str, value: &str) -> String {
        format!("const unsigned int {name} = {value};")
    }

    fn for_header(v: &str, start: &str, end: &str, step: &str) -> String {
        format!("for (unsigned int {v} = {start}; {v} < {end}; {v} += {step}) {{")
    }

    fn builtin(&self, k: &Kernel, b: Builtin) -> Result<String, RenderError> {
        Ok(match (self.language, b) {
            (Language::HostC, Builtin::LocalId) => "poot_tid".to_string(),
            (Language::HostC, Builtin::GroupId(axis)) => {
                format!("poot_g{}", axis_letter(k, axis)?)
            }
            (Language::HostC, Builtin::GroupCountX) => "poot_ngx".to_string(),
            (Language::Cuda | Language::Hip, Builtin::LocalId) => "threadIdx.x".to_string(),
            (Language::Cuda | Language::Hip, Builtin::GroupId(axis)) => {
                format!("blockIdx.{}", axis_letter(k, axis)?)
            }
            (Language::Cuda, Builtin::GroupCountX) => "gridDim.x".to_string(),
            // HIP's `gridDim` reads the implicit kernel arguments, which a raw HSA dispatch
            // does not fill; the helper reads the dispatch packet (`super::hip` emits it).
            (Language::Hip, Builtin::GroupCountX) => super::hip::GROUP_COUNT_X_CALL.to_string(),
        })
    }

    fn load_byte(&mut self, k: &Kernel, buf: ParamId, byte: &str) -> Result<String, RenderError> {
        let p = names::param_of(k, buf)?;
        Ok(self.call(CudaLib::LoadByte, "poot_load_byte", &[&p, byte]))
    }

    fn load_half(
        &mut self,
        k: &Kernel,
        buf: ParamId,
        index: &str,
        half: Half,
    ) -> Result<String, RenderError> {
        let p = names::param_of(k, buf)?;
        Ok(match half {
            Half::F16 => self.call(CudaLib::LoadF16, "poot_load_f16", &[&p, index]),
            Half::Bf16 => self.call(CudaLib::LoadBf16, "poot_load_bf16", &[&p, index]),
        })
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
        // C leaves signed overflow undefined: wrap in unsigned int, which NVCC and NVRTC
        // convert back as two's complement.
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

    fn small_int_to_f32(&mut self, x: &str, signed: bool) -> Option<String> {
        Some(if signed {
            // -2^22 <= x < 2^22 around 1.5 * 2^23 (Q4_0's and Q8_0's signed codes).
            format!(
                "(__uint_as_float(0x4b400000u + (unsigned int){}) - 12582912.0f)",
                operand(x)
            )
        } else {
            // Exact for x < 2^23: 2^23 + x is an f32 whose mantissa is x. Cheaper than the
            // conversion instruction, which issues at a fraction of the rate (every quantized
            // weight passes through here).
            format!(
                "(__uint_as_float(0x4b000000u | {}) - 8388608.0f)",
                operand(x)
            )
        })
    }

    fn ordered_bools(a: &str, sym: &str, b: &str) -> String {
        format!(
            "((unsigned int){} {sym} (unsigned int){})",
            operand(a),
            operand(b)
        )
    }

    fn select(cond: &str, on_true: &str, on_false: &str) -> String {
        format!("({cond} ? {on_true} : {on_false})")
    }

    fn mul_add(a: &str, b: &str, c: &str) -> String {
        format!("fmaf({a}, {b}, {c})")
    }

    fn shuffle_xor(&mut self, value: &str, mask: u32) -> String {
        if self.language == Language::Hip {
            return self.call(
                CudaLib::ShuffleXor,
                "poot_shfl_xor",
                &[strip_parens(value), &format!("{mask}u")],
            );
        }
        format!(
            "__shfl_xor_sync(0xffffffffu, {}, {mask}u)",
            strip_parens(value)
        )
    }

    /// A check as an opaque call (see `poot_fault_if`).
    fn check(&mut self, cond: &str, code: u32) -> Option<String> {
        self.libs.insert(CudaLib::FaultIf);
        Some(format!(
            "poot_fault_if({}, poot_fault, {code}u);",
            strip_parens(cond)
        ))
    }

    fn fault(&mut self, out: &mut Code, code: u32) {
        self.libs.insert(CudaLib::Fault);
        out.line(format!("poot_trap(poot_fault, {code}u);"));
    }

    fn barrier(&self) -> &'static str {
        "__syncthreads();"
    }

    fn let_wide(
        &mut self,
        out: &mut Code,
        vars: &[Var],
        array: &str,
        index: &str,
        elem: Ty,
        shared: bool,
    ) {
        if self.host() {
            // Plain loads: the C compiler merges them where it can.
            for (i, v) in vars.iter().enumerate() {
                let value = format!("{array}[{index} + {i}u]");
                self.declare(out, *v, elem, &value, true);
            }
        } else if shared {
            let libs = [
                (CudaLib::F32x2, "poot_f32x2"),
                (CudaLib::F32x4, "poot_f32x4"),
            ];
            self.wide_load(out, vars, libs, ty(elem), &format!("&{array}[{index}]"));
        } else {
            let libs = [
                (CudaLib::Words2, "poot_words2"),
                (CudaLib::Words4, "poot_words4"),
            ];
            // A misaligned index traps (misaligned address) instead of reading other words.
            self.wide_load(out, vars, libs, ty(elem), &format!("{array} + {index}"));
        }
    }

    fn team_sum(&mut self, out: &mut Code, var: Var, lanes: u32) {
        let v = names::var(var);
        let mut m = lanes / 2;
        while m > 0 {
            let theirs = self.shuffle_xor(&v, m);
            out.line(format!("{v} += {theirs};"));
            m /= 2;
        }
    }

    fn mma_tf32(&mut self, out: &mut Code, acc: &[Var; 4], ins: &[String]) {
        let ins: Vec<String> = ins.iter().map(|e| format!("\"r\"({e})")).collect();
        out.line(format!(
            "asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \
             {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" \
             : {} : {});",
            Cuda::sums(acc),
            ins.join(", ")
        ));
    }

    fn mma_half(&mut self, out: &mut Code, half: Half, acc: &[Var; 4], words: &[String]) {
        let kind = half_kind(half);
        let ins: Vec<String> = words.iter().map(|e| format!("\"r\"({e})")).collect();
        out.line(format!(
            "asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 \
             {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" \
             : {} : {});",
            Cuda::sums(acc),
            ins.join(", ")
        ));
    }

    fn store_halves(
        &mut self,
        out: &mut Code,
        half: Half,
        array: &str,
        index: &str,
        pairs: &[(String, String)],
    ) {
        let kind = half_kind(half);
        // Each pair rounded and packed into one word, the first in the low half (`cvt` puts its
        // first source in the high half).
        out.open("{");
        let mut words = Vec::with_capacity(pairs.len());
        for (i, (lo, hi)) in pairs.iter().enumerate() {
            out.line(format!(
                "unsigned poot_h{i}; asm(\"cvt.rn.{kind}x2.f32 %0, %1, %2;\" \
                 : \"=r\"(poot_h{i}) : \"f\"({hi}), \"f\"({lo}));"
            ));
            words.push(format!("poot_h{i}"));
        }
        let words = words.join(", ");
        let wide = match pairs.len() {
            1 => None,
            2 => Some((CudaLib::Words2, "poot_words2")),
            _ => Some((CudaLib::Words4, "poot_words4")),
        };
        out.line(match wide {
            None => format!("{array}[{index}] = {words};"),
            Some((lib, ty)) => {
                self.libs.insert(lib);
                format!("*reinterpret_cast<{ty}*>(&{array}[{index}]) = {ty}{{{words}}};")
            }
        });
        out.close("}");
    }
}

/// PTX's name of `half`.
fn half_kind(half: Half) -> &'static str {
    match half {
        Half::F16 => "f16",
        Half::Bf16 => "bf16",
    }
}
