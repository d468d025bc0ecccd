//! The one walk over a kernel's statements and expressions that every C-family renderer
//! shares, and the [`Dialect`] each language fills in.
//!
//! The walker decides the shape of the source: which statement becomes which block, how a loop
//! is counted without wrapping, which operand of a shift is masked, where a literal must become
//! a run-time value. A dialect spells the pieces: types and literals, declarations, built-ins,
//! the operators (directly, or through a helper that pins down what the language leaves open),
//! sub-word loads, faults, and the statements only some targets have (warp shuffles, matrix
//! tiles), which a dialect without them refuses by name before anything of them is rendered.
//!
//! What only one renderer does is a dialect's switch, not a second copy of the walk:
//! [`Dialect::BOUNDS`] turns on the u32 bounds analysis ([`unroll`]) that
//! writes out short loops, drops the overflow guard of loops that cannot wrap and converts
//! small integers through their exponent bits; [`Dialect::GUARDS_LITERALS`] passes one operand
//! of an all-literal operation through an identity helper, for a compiler that folds constants
//! and refuses an overflow.

use super::c_like::{cmp_symbol, is_ordering, strip_parens};
use super::check::Facts;
use super::code::Code;
use super::unroll::{self, Ranges};
use super::{RenderError, names};
use crate::ir::{BinOp, Builtin, Expr, Half, Kernel, ParamId, Stmt, Ty, UnOp, Var};

/// How one C-family language spells what the [`Walker`] decides.
pub(super) trait Dialect {
    /// Whether the walker runs the u32 bounds analysis for this language: short loops written
    /// out, loops whose counter cannot wrap without their guard, small integers converted by
    /// [`Dialect::small_int_to_f32`].
    const BOUNDS: bool;
    /// Whether an operation whose operands are all literals gets one of them through
    /// [`Dialect::runtime`], so the compiler does not fold it (and refuse an overflow).
    const GUARDS_LITERALS: bool;

    fn f32_lit(x: f32) -> String;
    fn i32_lit(x: i32) -> String;

    /// Refuses `s` when the language has no spelling for it (checked before any of it is
    /// rendered).
    fn refuse_stmt(&self, k: &Kernel, s: &Stmt) -> Result<(), RenderError> {
        let _ = (k, s);
        Ok(())
    }

    /// Refuses `e` when the language has no spelling for it (checked before any of it is
    /// rendered).
    fn refuse_expr(&self, k: &Kernel, e: &Expr) -> Result<(), RenderError> {
        let _ = (k, e);
        Ok(())
    }

    /// How variable `v` is read and assigned.
    fn var(&self, v: Var) -> String {
        names::var(v)
    }

    /// Declares `v` of type `t` as `value`; `constant` when nothing assigns it later.
    fn declare(&self, out: &mut Code, v: Var, t: Ty, value: &str, constant: bool);

    /// The line declaring the u32 constant `name` as `value` (a loop's bounds).
    fn let_u32(name: &str, value: &str) -> String;

    /// The line opening a loop of the u32 counter `v` from `start` while it is below `end`,
    /// stepping by `step`.
    fn for_header(v: &str, start: &str, end: &str, step: &str) -> String;

    fn builtin(&self, k: &Kernel, b: Builtin) -> Result<String, RenderError>;

    /// Byte `byte` of u32 buffer `buf`.
    fn load_byte(&mut self, k: &Kernel, buf: ParamId, byte: &str) -> Result<String, RenderError>;

    /// Half `index` of u32 buffer `buf`, widened to f32.
    fn load_half(
        &mut self,
        k: &Kernel,
        buf: ParamId,
        index: &str,
        half: Half,
    ) -> Result<String, RenderError>;

    /// A literal of type `t`, spelled `x`, as a run-time value (with
    /// [`Dialect::GUARDS_LITERALS`]).
    fn runtime(&mut self, t: Ty, x: String) -> String {
        let _ = t;
        x
    }

    fn unary(&mut self, op: UnOp, t: Ty, x: &str) -> String;

    /// `a op b` where `a` has type `t` (and `b`, a shift's amount, is already reduced).
    fn binary(&mut self, op: BinOp, t: Ty, a: &str, b: &str) -> String;

    fn cast(&mut self, from: Ty, to: Ty, x: &str) -> String;

    /// A u32 below 2^23 (`signed`: an i32 within ±2^22) converted to f32 exactly without the
    /// conversion instruction, where the language has a cheaper way (with [`Dialect::BOUNDS`]).
    fn small_int_to_f32(&mut self, x: &str, signed: bool) -> Option<String> {
        let _ = (x, signed);
        None
    }

    /// An ordering comparison of two bools (`sym` is the C operator).
    fn ordered_bools(a: &str, sym: &str, b: &str) -> String;

    fn select(cond: &str, on_true: &str, on_false: &str) -> String;

    fn mul_add(a: &str, b: &str, c: &str) -> String;

    /// `value` as the subgroup lane `mask` away computes it. Called only where
    /// [`Dialect::refuse_expr`] lets a shuffle through: a dialect that refuses it need not
    /// spell it.
    fn shuffle_xor(&mut self, value: &str, mask: u32) -> String {
        let _ = mask;
        value.to_string()
    }

    /// A branch holding only `Fault { code }` under `cond`, in one line, where the language has
    /// a spelling for it.
    fn check(&mut self, cond: &str, code: u32) -> Option<String> {
        let _ = (cond, code);
        None
    }

    fn fault(&mut self, out: &mut Code, code: u32);

    fn barrier(&self) -> &'static str;

    /// `vars` as consecutive elements from `index` of `array`, of type `elem`: a buffer's words
    /// or, where `shared`, a shared array's elements.
    fn let_wide(
        &mut self,
        out: &mut Code,
        vars: &[Var],
        array: &str,
        index: &str,
        elem: Ty,
        shared: bool,
    );

    // The statements only some targets have. Each is called only where
    // [`Dialect::refuse_stmt`] lets it through: a dialect that refuses it need not spell it.

    /// Replaces `var` by the sum over its team of `lanes`.
    fn team_sum(&mut self, out: &mut Code, var: Var, lanes: u32) {
        let _ = (out, var, lanes);
    }

    /// A tf32 matrix-unit product into `acc` of operands `ins` (`a` then `b`).
    fn mma_tf32(&mut self, out: &mut Code, acc: &[Var; 4], ins: &[String]) {
        let _ = (out, acc, ins);
    }

    /// A half-precision matrix-unit product into `acc` of the packed operand words of `a` then
    /// `b`.
    fn mma_half(&mut self, out: &mut Code, half: Half, acc: &[Var; 4], words: &[String]) {
        let _ = (out, half, acc, words);
    }

    /// Stores the value pairs (low, high), rounded to `half` and packed a pair a word, as the
    /// words of shared `array` from `index`, in one wide store.
    fn store_halves(
        &mut self,
        out: &mut Code,
        half: Half,
        array: &str,
        index: &str,
        pairs: &[(String, String)],
    ) {
        let _ = (out, half, array, index, pairs);
    }
}

/// A refusal of `what` in `language` for kernel `k`.
pub(super) fn unsupported(k: &Kernel, what: &'static str, language: &'static str) -> RenderError {
    RenderError::Unsupported {
        kernel: k.name.clone(),
        what,
        language,
    }
}

/// Renders a checked kernel's statements and expressions in dialect `D`.
pub(super) struct Walker<'k, D> {
    pub(super) k: &'k Kernel,
    facts: Facts,
    pub(super) d: D,
    /// What is known of the u32 and i32 values (with [`Dialect::BOUNDS`]).
    ranges: Ranges,
}

/// The type of `e` when it is a literal.
fn literal_ty(e: &Expr) -> Option<Ty> {
    match e {
        Expr::F32(_) => Some(Ty::F32),
        Expr::I32(_) => Some(Ty::I32),
        Expr::U32(_) => Some(Ty::U32),
        Expr::Bool(_) => Some(Ty::Bool),
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
        | Expr::Cast(..) => None,
    }
}

fn is_literal(e: &Expr) -> bool {
    literal_ty(e).is_some()
}

impl<'k, D: Dialect> Walker<'k, D> {
    pub(super) fn new(k: &'k Kernel, facts: Facts, d: D) -> Walker<'k, D> {
        Walker {
            k,
            facts,
            d,
            ranges: Ranges::default(),
        }
    }

    pub(super) fn block(&mut self, out: &mut Code, body: &[Stmt]) -> Result<(), RenderError> {
        for s in body {
            self.stmt(out, s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, out: &mut Code, s: &Stmt) -> Result<(), RenderError> {
        self.d.refuse_stmt(self.k, s)?;
        match s {
            Stmt::Let { var, ty, value } => {
                let mutated = self.facts.mutated.contains(var);
                if D::BOUNDS && !mutated {
                    self.track(*var, *ty, value);
                }
                let value = self.expr(value)?;
                self.d.declare(out, *var, *ty, &value, !mutated);
            }
            Stmt::Set { var, value } => {
                let value = self.expr(value)?;
                out.line(format!("{} = {value};", self.d.var(*var)));
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
                if let ([Stmt::Fault { code }], true) = (&then[..], otherwise.is_empty())
                    && let Some(line) = self.d.check(&cond, *code)
                {
                    out.line(line);
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
                if D::BOUNDS && self.bounded_loop(out, *var, [start, end, step], body)? {
                    return Ok(());
                }
                self.counted_loop(out, *var, [start, end, step], |w, out| w.block(out, body))?;
            }
            Stmt::LetWords { vars, buf, index } => {
                let p = names::param_of(self.k, *buf)?;
                let index = self.expr(index)?;
                let word = self.k.params[buf.0 as usize].word.ty();
                self.d.let_wide(out, vars, &p, &index, word, false);
            }
            Stmt::LetShared { vars, arr, index } => {
                let a = names::shared_of(self.k, *arr)?;
                let index = self.expr(index)?;
                self.d.let_wide(out, vars, &a, &index, Ty::F32, true);
            }
            Stmt::TeamSum { var, lanes } => self.d.team_sum(out, *var, *lanes),
            Stmt::MmaTf32 { acc, a, b } => {
                let mut ins = Vec::with_capacity(6);
                for e in a.iter().chain(b) {
                    ins.push(self.expr(e)?);
                }
                self.d.mma_tf32(out, acc, &ins);
            }
            Stmt::MmaHalf { half, acc, a, b } => {
                let mut words = Vec::with_capacity(6);
                for e in a.iter().chain(b) {
                    words.push(self.expr(e)?);
                }
                self.d.mma_half(out, *half, acc, &words);
            }
            Stmt::StoreSharedHalves {
                half,
                arr,
                index,
                values,
            } => {
                let a = names::shared_of(self.k, *arr)?;
                let index = self.expr(index)?;
                let mut pairs = Vec::with_capacity(values.len() / 2);
                for pair in values.chunks(2) {
                    pairs.push((self.expr(&pair[0])?, self.expr(&pair[1])?));
                }
                self.d.store_halves(out, *half, &a, &index, &pairs);
            }
            Stmt::Barrier => out.line(self.d.barrier()),
            Stmt::Fault { code } => self.d.fault(out, *code),
        }
        Ok(())
    }

    /// Records what the bounds analysis knows of constant `var` of type `t`, declared as
    /// `value`.
    fn track(&mut self, var: Var, t: Ty, value: &Expr) {
        if t == Ty::U32
            && let Some(range) = self.ranges.of(self.k, value)
        {
            self.ranges.set(var, range);
        }
        if t == Ty::I32
            && let Some(range) = self.ranges.signed_of(self.k, value)
        {
            self.ranges.set_signed(var, range);
        }
    }

    /// Loop `var` the way its known bounds allow ([`unroll`]): written out iteration by
    /// iteration, or as a plain loop without an overflow guard; `false` when neither applies.
    fn bounded_loop(
        &mut self,
        out: &mut Code,
        var: Var,
        [start, end, step]: [&Expr; 3],
        body: &[Stmt],
    ) -> Result<bool, RenderError> {
        let assigned = unroll::assigns(body, var);
        if let Some(u) = unroll::plan(self.k, &self.ranges, start, end, step, body)
            && !assigned
        {
            self.written_out(out, var, start, body, u)?;
            return Ok(true);
        }
        let Some((end, step)) = unroll::cannot_wrap(self.k, &self.ranges, end, step) else {
            return Ok(false);
        };
        // A plain loop, which the compiler may unroll itself.
        if let Some((lo, _)) = self.ranges.of(self.k, start)
            && lo < end
            && !assigned
        {
            self.ranges.set(var, (lo, end - 1));
        }
        let v = names::var(var);
        let start = self.expr(start)?;
        out.open(D::for_header(
            &v,
            &start,
            &format!("{end}u"),
            &format!("{step}u"),
        ));
        self.block(out, body)?;
        out.close("}");
        Ok(true)
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
        out.line(D::let_u32(&format!("{v}_end"), &self.expr(end)?));
        out.line(D::let_u32(&format!("{v}_step"), &self.expr(step)?));
        out.open(D::for_header(
            &v,
            &self.expr(start)?,
            &format!("{v}_end"),
            &format!("{v}_step"),
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
        out.line(D::let_u32(&format!("{v}_first"), &self.expr(start)?));
        for t in 0..u.trips {
            let at = format!("{v}_first + {}u", t * u.step);
            if t < u.unchecked {
                out.open("{");
            } else {
                out.open(format!("if ({at} < {}u) {{", u.end));
            }
            out.line(D::let_u32(&v, &at));
            self.block(out, body)?;
            out.close("}");
        }
        out.close("}");
        Ok(())
    }

    /// `e`, as a run-time value where it is a literal and the dialect guards literals.
    fn operand(&mut self, e: &Expr, guard: bool) -> Result<String, RenderError> {
        let x = self.expr(e)?;
        Ok(match literal_ty(e) {
            Some(t) if D::GUARDS_LITERALS && guard => self.d.runtime(t, x),
            Some(_) | None => x,
        })
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Result<String, RenderError> {
        self.d.refuse_expr(self.k, e)?;
        Ok(match e {
            Expr::F32(x) => D::f32_lit(*x),
            Expr::I32(x) => D::i32_lit(*x),
            Expr::U32(x) => format!("{x}u"),
            Expr::Bool(b) => b.to_string(),
            Expr::Var(v) => self.d.var(*v),
            Expr::Builtin(b) => self.d.builtin(self.k, *b)?,
            Expr::Load { buf, index } => {
                format!("{}[{}]", names::param_of(self.k, *buf)?, self.expr(index)?)
            }
            Expr::LoadByte { buf, byte } => {
                let i = self.expr(byte)?;
                self.d.load_byte(self.k, *buf, &i)?
            }
            Expr::LoadHalf { buf, index, half } => {
                let i = self.expr(index)?;
                self.d.load_half(self.k, *buf, &i, *half)?
            }
            Expr::LoadShared { arr, index } => {
                format!("{}[{}]", names::shared_of(self.k, *arr)?, self.expr(index)?)
            }
            Expr::Unary(op, x) => {
                let t = self.k.type_of(x)?;
                let x = self.operand(x, true)?;
                self.d.unary(*op, t, &x)
            }
            Expr::Binary(op, a, b) => {
                let t = self.k.type_of(a)?;
                let a = self.operand(a, is_literal(b))?;
                let b = self.shift_amount(*op, b)?;
                self.d.binary(*op, t, &a, &b)
            }
            Expr::Cmp(op, a, b) => {
                let t = self.k.type_of(a)?;
                let (a, b) = (self.operand(a, is_literal(b))?, self.expr(b)?);
                let sym = cmp_symbol(*op);
                if t == Ty::Bool && is_ordering(*op) {
                    D::ordered_bools(&a, sym, &b)
                } else {
                    format!("({a} {sym} {b})")
                }
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                let guard = is_literal(cond) && is_literal(on_true);
                let f = self.operand(on_false, guard)?;
                let (c, t) = (self.expr(cond)?, self.expr(on_true)?);
                D::select(&c, &t, &f)
            }
            Expr::ShuffleXor { value, mask } => {
                let value = self.expr(value)?;
                self.d.shuffle_xor(&value, *mask)
            }
            Expr::MulAdd(a, b, c) => {
                let c = self.operand(c, is_literal(a) && is_literal(b))?;
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                D::mul_add(&a, &b, &c)
            }
            Expr::Cast(to, x) => {
                let from = self.k.type_of(x)?;
                let small = D::BOUNDS
                    && from == Ty::U32
                    && *to == Ty::F32
                    && self
                        .ranges
                        .of(self.k, x)
                        .is_some_and(|(_, hi)| hi < 1 << 23);
                let small_signed = D::BOUNDS
                    && from == Ty::I32
                    && *to == Ty::F32
                    && self
                        .ranges
                        .signed_of(self.k, x)
                        .is_some_and(|(lo, hi)| lo >= -(1 << 22) && hi < 1 << 22);
                let x = self.operand(x, true)?;
                let exact = if small || small_signed {
                    self.d.small_int_to_f32(&x, small_signed)
                } else {
                    None
                };
                match exact {
                    Some(s) => s,
                    None => self.d.cast(from, *to, &x),
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
}
