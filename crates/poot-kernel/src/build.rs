//! Writing kernels in Rust: a builder that hands out parameters, shared arrays and variables and
//! collects statements, and operators on [`Expr`] so a template reads like the math it does.

use std::ops;

use super::ir::{
    Access, BinOp, Builtin, CmpOp, Expr, Half, Kernel, Param, ParamId, Shared, SharedId, Stmt, Ty,
    UnOp, Var, Word,
};

/// A block opened with `begin_*` and not yet closed.
enum Open {
    For {
        var: Var,
        start: Expr,
        end: Expr,
        step: Expr,
    },
    If {
        cond: Expr,
    },
    Else {
        cond: Expr,
        then: Vec<Stmt>,
    },
    /// Statements built apart, to be inserted at a [`Mark`].
    Detached,
}

/// A position in an open block where statements built later can be inserted (a reduction a
/// loop body turns out to need, computed before the loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    depth: usize,
    index: usize,
}

/// Builds one [`Kernel`].
pub struct KernelBuilder {
    name: String,
    workgroup: u32,
    min_resident: u32,
    params: Vec<Param>,
    shared: Vec<Shared>,
    vars: Vec<Ty>,
    blocks: Vec<Vec<Stmt>>,
    /// An id for each block of `blocks`, unique within the kernel.
    block_ids: Vec<u64>,
    next_block_id: u64,
    open: Vec<Open>,
    /// Values declared by [`KernelBuilder::let_reused`], each with its block's id.
    reusable: Vec<Reusable>,
}

/// A value [`KernelBuilder::let_reused`] declared, where, and what it reads (collected once,
/// so each assignment or store checks a few ids rather than walking every value).
struct Reusable {
    block: u64,
    ty: Ty,
    value: Expr,
    var: Var,
    reads: Reads,
}

/// The variables, buffers and shared memory an expression reads.
#[derive(Default)]
struct Reads {
    vars: Vec<Var>,
    buffers: Vec<ParamId>,
    shared: bool,
}

impl Reads {
    fn of(e: &Expr) -> Reads {
        let mut r = Reads::default();
        r.add(e);
        r
    }

    fn add(&mut self, e: &Expr) {
        match e {
            Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) | Expr::Builtin(_) => {}
            Expr::Var(v) => self.vars.push(*v),
            Expr::Load { buf, index } | Expr::LoadHalf { buf, index, .. } => {
                self.buffers.push(*buf);
                self.add(index);
            }
            Expr::LoadByte { buf, byte } => {
                self.buffers.push(*buf);
                self.add(byte);
            }
            Expr::LoadShared { index, .. } => {
                self.shared = true;
                self.add(index);
            }
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::ShuffleXor { value: x, .. } => self.add(x),
            Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
                self.add(a);
                self.add(b);
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                self.add(cond);
                self.add(on_true);
                self.add(on_false);
            }
            Expr::MulAdd(a, b, c) => {
                self.add(a);
                self.add(b);
                self.add(c);
            }
        }
    }
}

impl KernelBuilder {
    pub fn new(name: impl Into<String>, workgroup: u32) -> KernelBuilder {
        KernelBuilder {
            name: name.into(),
            workgroup,
            min_resident: 0,
            params: Vec::new(),
            shared: Vec::new(),
            vars: Vec::new(),
            blocks: vec![Vec::new()],
            block_ids: vec![0],
            next_block_id: 1,
            open: Vec::new(),
            reusable: Vec::new(),
        }
    }

    /// Asks for `n` workgroups to fit on a multiprocessor at once ([`Kernel::min_resident`]).
    pub fn set_min_resident(&mut self, n: u32) {
        self.min_resident = n;
    }

    pub fn workgroup(&self) -> u32 {
        self.workgroup
    }

    /// Adds a buffer parameter.
    pub fn param(&mut self, name: impl Into<String>, word: Word, access: Access) -> ParamId {
        self.params.push(Param {
            name: name.into(),
            word,
            access,
        });
        ParamId(self.params.len() as u32 - 1)
    }

    /// Makes a parameter writable (a buffer first bound for reading, then written in place).
    pub fn make_writable(&mut self, p: ParamId) {
        if let Some(param) = self.params.get_mut(p.0 as usize) {
            param.access = Access::ReadWrite;
        }
    }

    /// Adds a workgroup-shared array of `len` elements.
    pub fn shared(&mut self, name: impl Into<String>, ty: Ty, len: u32) -> SharedId {
        self.shared.push(Shared {
            name: name.into(),
            ty,
            len,
        });
        SharedId(self.shared.len() as u32 - 1)
    }

    /// Bytes of the shared arrays declared so far (every element is a 32-bit word).
    pub fn shared_bytes(&self) -> u64 {
        self.shared.iter().map(|s| 4 * u64::from(s.len)).sum()
    }

    fn push(&mut self, s: Stmt) {
        self.forget_changed(&s);
        if let Some(block) = self.blocks.last_mut() {
            block.push(s);
        }
    }

    fn open_block(&mut self) {
        self.blocks.push(Vec::new());
        self.block_ids.push(self.next_block_id);
        self.next_block_id += 1;
    }

    fn close_block(&mut self) -> Vec<Stmt> {
        if let Some(id) = self.block_ids.pop() {
            self.reusable.retain(|r| r.block != id);
        }
        self.blocks.pop().unwrap_or_default()
    }

    /// `value` as a variable: the one an earlier call with the same type and value declared in
    /// the current block where nothing it reads has been assigned or stored since (`false`:
    /// no new statement), or a new one (`true`). Only the declaring block reuses it, so a loop's
    /// body never reads a value from before an assignment of a later iteration.
    pub fn let_reused(&mut self, ty: Ty, value: Expr) -> (Expr, bool) {
        let block = self.block_ids.last().copied().unwrap_or(0);
        if let Some(r) = self
            .reusable
            .iter()
            .find(|r| r.block == block && r.ty == ty && r.value == value)
        {
            return (Expr::Var(r.var), false);
        }
        let var = self.let_(ty, value.clone());
        if let Expr::Var(v) = var {
            self.reusable.push(Reusable {
                block,
                ty,
                reads: Reads::of(&value),
                value,
                var: v,
            });
        }
        (var, true)
    }

    /// Forgets the reusable values statement `s` may change: those reading a variable it
    /// assigns, a buffer it stores to or shared memory it writes (or a barrier lets other
    /// threads write).
    fn forget_changed(&mut self, s: &Stmt) {
        if self.reusable.is_empty() {
            return;
        }
        let assigned: Vec<Var> = match s {
            Stmt::Set { var, .. } | Stmt::TeamSum { var, .. } => vec![*var],
            Stmt::MmaTf32 { acc, .. } | Stmt::MmaHalf { acc, .. } => acc.to_vec(),
            _ => Vec::new(),
        };
        let (buf, shared) = match s {
            Stmt::Store { buf, .. } => (Some(*buf), false),
            Stmt::StoreShared { .. } | Stmt::StoreSharedHalves { .. } | Stmt::Barrier => {
                (None, true)
            }
            _ => (None, false),
        };
        if assigned.is_empty() && buf.is_none() && !shared {
            return;
        }
        self.reusable.retain(|r| {
            let reads = &r.reads;
            !(reads.vars.iter().any(|v| assigned.contains(v))
                || buf.is_some_and(|b| reads.buffers.contains(&b))
                || (shared && reads.shared))
        });
    }

    /// The element type of a shared array.
    pub fn shared_ty(&self, a: SharedId) -> Ty {
        self.shared
            .get(a.0 as usize)
            .map(|s| s.ty)
            .unwrap_or(Ty::U32)
    }

    /// Declares a variable holding `value` and returns it as an expression.
    pub fn let_(&mut self, ty: Ty, value: Expr) -> Expr {
        let var = Var(self.vars.len() as u32);
        self.vars.push(ty);
        self.push(Stmt::Let { var, ty, value });
        Expr::Var(var)
    }

    /// Declares a mutable variable and returns its handle (read it with `Expr::Var`).
    pub fn var(&mut self, ty: Ty, init: Expr) -> Var {
        let var = Var(self.vars.len() as u32);
        self.vars.push(ty);
        self.push(Stmt::Let {
            var,
            ty,
            value: init,
        });
        var
    }

    pub fn set(&mut self, var: Var, value: Expr) {
        self.push(Stmt::Set { var, value });
    }

    pub fn store(&mut self, buf: ParamId, index: Expr, value: Expr) {
        self.push(Stmt::Store { buf, index, value });
    }

    pub fn store_shared(&mut self, arr: SharedId, index: Expr, value: Expr) {
        self.push(Stmt::StoreShared { arr, index, value });
    }

    pub fn barrier(&mut self) {
        self.push(Stmt::Barrier);
    }

    /// Words `index..index + n` (n is 2 or 4, `index` a multiple of it) of u32 buffer `buf`, in
    /// one wide load; returns them in order.
    pub fn let_words(&mut self, buf: ParamId, index: Expr, n: u32) -> Vec<Expr> {
        let vars = self.new_vars(Ty::U32, n);
        let words = vars.iter().map(|&v| Expr::Var(v)).collect();
        self.push(Stmt::LetWords { vars, buf, index });
        words
    }

    /// Elements `index..index + n` (n is 2 or 4, `index` a multiple of it) of f32 shared array
    /// `arr`, in one wide load; returns them in order.
    pub fn let_shared(&mut self, arr: SharedId, index: Expr, n: u32) -> Vec<Expr> {
        let vars = self.new_vars(Ty::F32, n);
        let elems = vars.iter().map(|&v| Expr::Var(v)).collect();
        self.push(Stmt::LetShared { vars, arr, index });
        elems
    }

    /// `n` new variables of type `ty`, declared by the statement the caller pushes.
    fn new_vars(&mut self, ty: Ty, n: u32) -> Vec<Var> {
        (0..n)
            .map(|_| {
                self.vars.push(ty);
                Var(self.vars.len() as u32 - 1)
            })
            .collect()
    }

    /// Replaces `var` in each team of `lanes` consecutive threads by the team's sum.
    pub fn team_sum(&mut self, var: Var, lanes: u32) {
        self.push(Stmt::TeamSum { var, lanes });
    }

    /// Adds the product of the warp's tf32 tiles `a` and `b` to its sums `acc`
    /// ([`Stmt::MmaTf32`]).
    pub fn mma_tf32(&mut self, acc: [Var; 4], a: [Expr; 4], b: [Expr; 2]) {
        self.push(Stmt::MmaTf32 { acc, a, b });
    }

    /// Adds the product of the warp's `half` tiles `a` and `b` (u32 words of packed pairs) to
    /// its sums `acc` ([`Stmt::MmaHalf`]).
    pub fn mma_half(&mut self, half: Half, acc: [Var; 4], a: [Expr; 4], b: [Expr; 2]) {
        self.push(Stmt::MmaHalf { half, acc, a, b });
    }

    /// Stores `values` rounded to `half` and packed in pairs into the words of u32 shared array
    /// `arr` from `index` ([`Stmt::StoreSharedHalves`]).
    pub fn store_shared_halves(
        &mut self,
        half: Half,
        arr: SharedId,
        index: Expr,
        values: Vec<Expr>,
    ) {
        self.push(Stmt::StoreSharedHalves {
            half,
            arr,
            index,
            values,
        });
    }

    pub fn fault(&mut self, code: u32) {
        self.push(Stmt::Fault { code });
    }

    /// `if cond { then }`.
    pub fn if_(&mut self, cond: Expr, then: impl FnOnce(&mut KernelBuilder)) {
        self.if_else(cond, then, |_| {});
    }

    /// `if cond { then } else { otherwise }`.
    pub fn if_else(
        &mut self,
        cond: Expr,
        then: impl FnOnce(&mut KernelBuilder),
        otherwise: impl FnOnce(&mut KernelBuilder),
    ) {
        self.open_block();
        then(self);
        let then = self.close_block();
        self.open_block();
        otherwise(self);
        let otherwise = self.close_block();
        self.push(Stmt::If {
            cond,
            then,
            otherwise,
        });
    }

    /// `for i in (start..end).step_by(step) { body(i) }` over u32.
    pub fn for_(
        &mut self,
        start: Expr,
        end: Expr,
        step: Expr,
        body: impl FnOnce(&mut KernelBuilder, Expr),
    ) {
        let var = Var(self.vars.len() as u32);
        self.vars.push(Ty::U32);
        self.open_block();
        body(self, Expr::Var(var));
        let block = self.close_block();
        self.push(Stmt::For {
            var,
            start,
            end,
            step,
            body: block,
        });
    }

    /// Opens `for i in (start..end).step_by(step)` and returns `i`; close it with
    /// [`KernelBuilder::end`]. For emitters that interleave other fallible work with building.
    pub fn begin_for(&mut self, start: Expr, end: Expr, step: Expr) -> Expr {
        let var = Var(self.vars.len() as u32);
        self.vars.push(Ty::U32);
        self.open.push(Open::For {
            var,
            start,
            end,
            step,
        });
        self.open_block();
        Expr::Var(var)
    }

    /// Opens `if cond {`; close it with [`KernelBuilder::end`], or switch to the else branch
    /// with [`KernelBuilder::otherwise`] first.
    pub fn begin_if(&mut self, cond: Expr) {
        self.open.push(Open::If { cond });
        self.open_block();
    }

    /// Switches an open `if` to its else branch.
    pub fn otherwise(&mut self) {
        if let Some(Open::If { cond }) = self.open.pop() {
            let then = self.close_block();
            self.open.push(Open::Else { cond, then });
            self.open_block();
        }
    }

    /// The current position: statements inserted at it run after everything built so far in
    /// the current block and before everything built after.
    pub fn mark(&self) -> Mark {
        Mark {
            depth: self.blocks.len().saturating_sub(1),
            index: self.blocks.last().map_or(0, Vec::len),
        }
    }

    /// Variables declared so far; a variable numbered below it was declared before now.
    pub fn var_count(&self) -> u32 {
        self.vars.len() as u32
    }

    /// Starts building statements apart from the current block; [`KernelBuilder::insert_detached`]
    /// places them at a mark.
    pub fn begin_detached(&mut self) {
        self.open.push(Open::Detached);
        self.open_block();
    }

    /// Ends the innermost detached block and inserts its statements at `mark`, which then
    /// points past them (so later insertions at it run after these).
    pub fn insert_detached(&mut self, mark: &mut Mark) {
        if !matches!(self.open.last(), Some(Open::Detached)) {
            return;
        }
        self.open.pop();
        let body = self.close_block();
        let n = body.len();
        if let Some(block) = self.blocks.get_mut(mark.depth) {
            let at = mark.index.min(block.len());
            block.splice(at..at, body);
            mark.index = at + n;
        }
    }

    /// Closes the innermost open block.
    pub fn end(&mut self) {
        let body = self.close_block();
        let stmt = match self.open.pop() {
            Some(Open::For {
                var,
                start,
                end,
                step,
            }) => Stmt::For {
                var,
                start,
                end,
                step,
                body,
            },
            Some(Open::If { cond }) => Stmt::If {
                cond,
                then: body,
                otherwise: Vec::new(),
            },
            Some(Open::Else { cond, then }) => Stmt::If {
                cond,
                then,
                otherwise: body,
            },
            Some(Open::Detached) => {
                // A detached block never inserted: keep its statements in place.
                for s in body {
                    self.push(s);
                }
                return;
            }
            None => {
                self.blocks.push(body);
                self.block_ids.push(self.next_block_id);
                self.next_block_id += 1;
                return;
            }
        };
        self.push(stmt);
    }

    pub fn finish(mut self) -> Kernel {
        while !self.open.is_empty() {
            self.end();
        }
        let body = self.close_block();
        Kernel {
            name: self.name,
            params: self.params,
            shared: self.shared,
            workgroup: self.workgroup,
            min_resident: self.min_resident,
            vars: self.vars,
            body,
        }
    }
}

// ---- Expression constructors ----

pub fn f32c(v: f32) -> Expr {
    Expr::F32(v)
}

pub fn u32c(v: u32) -> Expr {
    Expr::U32(v)
}

pub fn i32c(v: i32) -> Expr {
    Expr::I32(v)
}

pub fn local_id() -> Expr {
    Expr::Builtin(Builtin::LocalId)
}

pub fn group_id(axis: u8) -> Expr {
    Expr::Builtin(Builtin::GroupId(axis))
}

pub fn group_count_x() -> Expr {
    Expr::Builtin(Builtin::GroupCountX)
}

pub fn load(buf: ParamId, index: Expr) -> Expr {
    Expr::Load {
        buf,
        index: Box::new(index),
    }
}

pub fn load_byte(buf: ParamId, byte: Expr) -> Expr {
    Expr::LoadByte {
        buf,
        byte: Box::new(byte),
    }
}

pub fn load_half(buf: ParamId, index: Expr, half: Half) -> Expr {
    Expr::LoadHalf {
        buf,
        index: Box::new(index),
        half,
    }
}

pub fn load_shared(arr: SharedId, index: Expr) -> Expr {
    Expr::LoadShared {
        arr,
        index: Box::new(index),
    }
}

pub fn un(op: UnOp, x: Expr) -> Expr {
    Expr::Unary(op, Box::new(x))
}

pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::Binary(op, Box::new(a), Box::new(b))
}

pub fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
    Expr::Cmp(op, Box::new(a), Box::new(b))
}

pub fn select(cond: Expr, on_true: Expr, on_false: Expr) -> Expr {
    Expr::Select {
        cond: Box::new(cond),
        on_true: Box::new(on_true),
        on_false: Box::new(on_false),
    }
}

/// `value` from the subgroup lane this one's xor `mask` ([`Expr::ShuffleXor`]).
pub fn shuffle_xor(value: Expr, mask: u32) -> Expr {
    Expr::ShuffleXor {
        value: Box::new(value),
        mask,
    }
}

/// `a * b + c`, fused where the backend can ([`Expr::MulAdd`]).
pub fn mul_add(a: Expr, b: Expr, c: Expr) -> Expr {
    Expr::MulAdd(Box::new(a), Box::new(b), Box::new(c))
}

pub fn cast(ty: Ty, x: Expr) -> Expr {
    Expr::Cast(ty, Box::new(x))
}

pub fn max(a: Expr, b: Expr) -> Expr {
    bin(BinOp::Max, a, b)
}

pub fn min(a: Expr, b: Expr) -> Expr {
    bin(BinOp::Min, a, b)
}

pub fn lt(a: Expr, b: Expr) -> Expr {
    cmp(CmpOp::Lt, a, b)
}

pub fn ge(a: Expr, b: Expr) -> Expr {
    cmp(CmpOp::Ge, a, b)
}

pub fn eq(a: Expr, b: Expr) -> Expr {
    cmp(CmpOp::Eq, a, b)
}

macro_rules! expr_op {
    ($trait:ident, $method:ident, $op:ident) => {
        impl ops::$trait for Expr {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                bin(BinOp::$op, self, rhs)
            }
        }
    };
}

expr_op!(Add, add, Add);
expr_op!(Sub, sub, Sub);
expr_op!(Mul, mul, Mul);
expr_op!(Div, div, Div);
expr_op!(Rem, rem, Rem);
expr_op!(BitAnd, bitand, And);
expr_op!(BitOr, bitor, Or);
expr_op!(BitXor, bitxor, Xor);
expr_op!(Shl, shl, Shl);
expr_op!(Shr, shr, Shr);

impl ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        un(UnOp::Neg, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Access, Word};

    fn lets(body: &[Stmt]) -> usize {
        body.iter()
            .map(|s| match s {
                Stmt::Let { .. } => 1,
                Stmt::If { then, .. } => lets(then),
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn a_value_is_reused_in_its_block_until_what_it_reads_changes() {
        let mut kb = KernelBuilder::new("reuse", 32);
        let table = kb.param("table", Word::U32, Access::ReadWrite);
        let x = kb.var(Ty::U32, u32c(3));
        let entry = || load(table, Expr::Var(x) / u32c(16));
        let (a, fresh_a) = kb.let_reused(Ty::U32, entry());
        let (b, fresh_b) = kb.let_reused(Ty::U32, entry());
        assert!(fresh_a && !fresh_b);
        assert_eq!(a, b);
        // A nested block declares its own.
        kb.begin_if(Expr::Bool(true));
        assert!(kb.let_reused(Ty::U32, entry()).1);
        kb.end();
        // Assigning what it reads, or storing to the buffer it loads, forgets it.
        kb.set(x, u32c(4));
        assert!(kb.let_reused(Ty::U32, entry()).1);
        kb.store(table, u32c(0), u32c(1));
        assert!(kb.let_reused(Ty::U32, entry()).1);
        assert!(!kb.let_reused(Ty::U32, entry()).1);
        // `x`, then the four values declared.
        assert_eq!(lets(&kb.finish().body), 5);
    }
}
