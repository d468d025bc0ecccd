//! C for the host CPU: one function per kernel that runs a range of workgroups along x, each
//! workgroup's threads in turn.
//!
//! The expressions and statements are the CUDA dialect's ([`super::cuda`], in its host C language:
//! built-ins, wide loads and refusals spelled for one core), read through a prelude that
//! spells CUDA's qualifiers and bit casts in C, with host versions of the few helpers that use
//! PTX. What differs is the shape:
//!
//! - **Threads as loops.** A kernel without barriers is one loop over the workgroup's threads
//!   (`poot_tid`). A kernel with barriers is split at them into phases, each its own loop over
//!   the threads, so every thread finishes a phase before any starts the next: what a barrier
//!   guarantees. A loop or branch that holds a barrier is uniform (every thread takes it, the
//!   IR's rule), so it runs once around the phases inside it, its bounds read as thread 0 reads
//!   them. A variable `Let` declares that more than one phase (or a uniform bound) reads lives
//!   in an array with an element per thread, since a value computed in one phase is read in a
//!   later one; the others, and loop counters, stay scalars the compiler keeps in registers.
//! - **Shared memory** is an array local to the workgroup's iteration.
//! - **Faults.** A failed check records its code in the fault words and returns from the
//!   function: the workgroup's remaining threads and workgroups do not run, as a trap stops a
//!   GPU (the step's results are discarded either way).
//!
//! The entry is `void name(void* const* args, unsigned gx0, unsigned gx1, unsigned gy,
//! unsigned gz, unsigned ngx, unsigned* poot_fault)`: the kernel's buffers in parameter order,
//! the workgroups `gx0..gx1` along x at `gy`, `gz`, and the grid's size along x. Compile with
//! `-ffp-contract=off` so products and sums round one by one, as the oracle's do.

use std::collections::HashSet;

use super::check::check;
use super::code::Code;
use super::cuda::{Cuda, Language, ty};
use super::cuda_lib::CudaLib;
use super::walk::Walker;
use super::{RenderError, entry_name, libs_with_deps, names};
use crate::ir::{Access, Expr, Kernel, Stmt, Var};

/// What every host kernel reads first: C spellings of the CUDA names the shared rendering
/// emits.
const PRELUDE: &str = "\
#include <math.h>
#include <stdbool.h>
#include <string.h>
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
";

/// Renders `k` as one C translation unit holding its entry function.
pub fn render_host_c(k: &Kernel) -> Result<String, RenderError> {
    let facts = check(k)?;
    let phased = holds_barrier(&k.body);
    let host = Cuda {
        language: Language::HostC,
        promoted: if phased {
            across_phases(&k.body)
        } else {
            HashSet::new()
        },
        ..Cuda::default()
    };
    let mut r = Walker::new(k, facts, host);
    let mut body = Code::at_depth(2);
    for (i, s) in k.shared.iter().enumerate() {
        body.line(format!(
            "__attribute__((aligned(16))) {} {}[{}];",
            ty(s.ty),
            names::shared(i, &s.name),
            s.len
        ));
    }
    if phased {
        // Outside the phases, a uniform loop or branch reads as thread 0.
        body.line("const unsigned int poot_tid = 0u;");
        body.line("(void)poot_tid;");
        let mut promoted: Vec<Var> = r.d.promoted.iter().copied().collect();
        promoted.sort_by_key(|v| v.0);
        for v in promoted {
            body.line(format!(
                "{} {}[{}];",
                ty(k.vars[v.0 as usize]),
                names::var(v),
                k.workgroup
            ));
        }
        phases(&mut r, &mut body, &k.body)?;
    } else {
        thread_loop(&mut r, &mut body, &k.body)?;
    }

    let entry = entry_name(k);
    let mut out = Code::at_depth(0);
    out.line(format!(
        "// poot kernel {entry} for the host CPU: rendered from a kernel description, do not edit."
    ));
    out.raw(PRELUDE);
    for l in libs_with_deps(&r.d.libs, CudaLib::deps) {
        out.line("");
        out.raw(l.host_source());
    }
    out.line("");
    out.open(format!(
        "void {entry}(void* const* poot_args, unsigned int poot_gx0, unsigned int poot_gx1, \
         unsigned int poot_gy, unsigned int poot_gz, unsigned int poot_ngx, \
         unsigned int* poot_fault) {{"
    ));
    for (i, p) in k.params.iter().enumerate() {
        let constness = match p.access {
            Access::Read => "const ",
            Access::ReadWrite => "",
        };
        let word = ty(p.word.ty());
        out.line(format!(
            "{constness}{word}* __restrict__ {} = ({constness}{word}*)poot_args[{i}];",
            names::param(i, &p.name)
        ));
    }
    out.line("(void)poot_gy; (void)poot_gz; (void)poot_ngx; (void)poot_fault;");
    out.open("for (unsigned int poot_gx = poot_gx0; poot_gx < poot_gx1; poot_gx++) {");
    out.raw(&body.finish());
    out.close("}");
    out.close("}");
    Ok(out.finish())
}

/// `body` (no barrier inside) as one loop over the workgroup's threads.
fn thread_loop(r: &mut Walker<'_, Cuda>, out: &mut Code, body: &[Stmt]) -> Result<(), RenderError> {
    if body.is_empty() {
        return Ok(());
    }
    out.open(format!(
        "for (unsigned int poot_tid = 0u; poot_tid < {}u; poot_tid++) {{",
        r.k.workgroup
    ));
    r.block(out, body)?;
    out.close("}");
    Ok(())
}

/// `body` split at its barriers: runs of statements without one as thread loops, the uniform
/// loops and branches that hold one around their own phases.
fn phases(r: &mut Walker<'_, Cuda>, out: &mut Code, body: &[Stmt]) -> Result<(), RenderError> {
    let mut run: Vec<Stmt> = Vec::new();
    for s in body {
        if !holds_barrier(std::slice::from_ref(s)) {
            run.push(s.clone());
            continue;
        }
        thread_loop(r, out, &run)?;
        run.clear();
        match s {
            Stmt::Barrier => {}
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                let cond = r.expr(cond)?;
                out.open(format!("if ({cond}) {{"));
                phases(r, out, then)?;
                if !otherwise.is_empty() {
                    out.reopen("} else {");
                    phases(r, out, otherwise)?;
                }
                out.close("}");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => r.counted_loop(out, *var, [start, end, step], |r, out| phases(r, out, body))?,
            _ => {
                return Err(RenderError::Unsupported {
                    kernel: r.k.name.clone(),
                    what: "a barrier inside a statement other than a loop or branch",
                    language: "host C",
                });
            }
        }
    }
    thread_loop(r, out, &run)
}

/// Whether `body` holds a barrier, at any depth.
fn holds_barrier(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Barrier => true,
        Stmt::If {
            then, otherwise, ..
        } => holds_barrier(then) || holds_barrier(otherwise),
        Stmt::For { body, .. } => holds_barrier(body),
        _ => false,
    })
}

/// The variables `Let`, `LetWords` and `LetShared` declare in `body` that more than one phase
/// refers to (a uniform loop's bounds or branch's condition counting as a phase of its own).
fn across_phases(body: &[Stmt]) -> HashSet<Var> {
    let mut runs: Vec<HashSet<Var>> = Vec::new();
    phase_refs(body, &mut runs);
    let declared = declared_by_let(body);
    let mut seen: HashSet<Var> = HashSet::new();
    let mut promoted = HashSet::new();
    for run in &runs {
        for v in run {
            if !seen.insert(*v) && declared.contains(v) {
                promoted.insert(*v);
            }
        }
    }
    promoted
}

/// The variables each phase of `body` refers to, in the order [`phases`] renders them.
fn phase_refs(body: &[Stmt], runs: &mut Vec<HashSet<Var>>) {
    let mut current = HashSet::new();
    for s in body {
        if !holds_barrier(std::slice::from_ref(s)) {
            stmt_refs(s, &mut current);
            continue;
        }
        if !current.is_empty() {
            runs.push(std::mem::take(&mut current));
        }
        match s {
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                let mut uniform = HashSet::new();
                expr_refs(cond, &mut uniform);
                runs.push(uniform);
                phase_refs(then, runs);
                phase_refs(otherwise, runs);
            }
            Stmt::For {
                start,
                end,
                step,
                body,
                ..
            } => {
                let mut uniform = HashSet::new();
                for e in [start, end, step] {
                    expr_refs(e, &mut uniform);
                }
                runs.push(uniform);
                phase_refs(body, runs);
            }
            _ => {}
        }
    }
    if !current.is_empty() {
        runs.push(current);
    }
}

/// Every variable `s` declares, reads or assigns.
fn stmt_refs(s: &Stmt, out: &mut HashSet<Var>) {
    match s {
        Stmt::Let { var, value, .. } | Stmt::Set { var, value } => {
            out.insert(*var);
            expr_refs(value, out);
        }
        Stmt::Store { index, value, .. } | Stmt::StoreShared { index, value, .. } => {
            expr_refs(index, out);
            expr_refs(value, out);
        }
        Stmt::If {
            cond,
            then,
            otherwise,
        } => {
            expr_refs(cond, out);
            then.iter().chain(otherwise).for_each(|s| stmt_refs(s, out));
        }
        Stmt::For {
            var,
            start,
            end,
            step,
            body,
        } => {
            out.insert(*var);
            for e in [start, end, step] {
                expr_refs(e, out);
            }
            body.iter().for_each(|s| stmt_refs(s, out));
        }
        Stmt::LetWords { vars, index, .. } | Stmt::LetShared { vars, index, .. } => {
            out.extend(vars.iter().copied());
            expr_refs(index, out);
        }
        Stmt::TeamSum { var, .. } => {
            out.insert(*var);
        }
        Stmt::MmaTf32 { acc, a, b } => {
            out.extend(acc.iter().copied());
            a.iter().chain(b).for_each(|e| expr_refs(e, out));
        }
        Stmt::MmaHalf { acc, a, b, .. } => {
            out.extend(acc.iter().copied());
            a.iter().chain(b).for_each(|e| expr_refs(e, out));
        }
        Stmt::StoreSharedHalves { index, values, .. } => {
            expr_refs(index, out);
            values.iter().for_each(|e| expr_refs(e, out));
        }
        Stmt::Barrier | Stmt::Fault { .. } => {}
    }
}

/// Every variable `e` reads.
fn expr_refs(e: &Expr, out: &mut HashSet<Var>) {
    match e {
        Expr::Var(v) => {
            out.insert(*v);
        }
        Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) | Expr::Builtin(_) => {}
        Expr::Load { index, .. }
        | Expr::LoadHalf { index, .. }
        | Expr::LoadShared { index, .. } => expr_refs(index, out),
        Expr::LoadByte { byte, .. } => expr_refs(byte, out),
        Expr::Unary(_, x) | Expr::Cast(_, x) => expr_refs(x, out),
        Expr::ShuffleXor { value, .. } => expr_refs(value, out),
        Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
            expr_refs(a, out);
            expr_refs(b, out);
        }
        Expr::Select {
            cond,
            on_true,
            on_false,
        } => {
            expr_refs(cond, out);
            expr_refs(on_true, out);
            expr_refs(on_false, out);
        }
        Expr::MulAdd(a, b, c) => {
            expr_refs(a, out);
            expr_refs(b, out);
            expr_refs(c, out);
        }
    }
}

/// The variables `Let`, `LetWords` and `LetShared` declare in `body`, at any depth.
fn declared_by_let(body: &[Stmt]) -> HashSet<Var> {
    let mut vars = HashSet::new();
    let mut walk = vec![body];
    while let Some(stmts) = walk.pop() {
        for s in stmts {
            match s {
                Stmt::Let { var, .. } => {
                    vars.insert(*var);
                }
                Stmt::LetWords { vars: vs, .. } | Stmt::LetShared { vars: vs, .. } => {
                    vars.extend(vs.iter().copied());
                }
                Stmt::If {
                    then, otherwise, ..
                } => {
                    walk.push(then);
                    walk.push(otherwise);
                }
                Stmt::For { body, .. } => walk.push(body),
                _ => {}
            }
        }
    }
    vars
}
