//! Loops the CUDA rendering writes out iteration by iteration.
//!
//! A decode step's kernels are short and latency-bound: a strided loop such as
//! `for (i = threadIdx.x; i < 576; i += 64)` runs nine iterations, each waiting for its own
//! load, because the compiler cannot see the trip count (the start is a thread index) and the
//! overflow guard of every rendered loop blocks unrolling. Where the bounds analysis below
//! proves how many iterations each thread can run, the loop is written out: iterations every
//! thread runs carry no test, the rest test `var < end`. The iterations, their order and their
//! values are the loop's own, so results are bit for bit the same; the loads of all
//! iterations can be issued together.

use std::collections::HashMap;

use crate::ir::{BinOp, Builtin, Expr, Kernel, Stmt, Var};

/// Iterations a written-out loop may have.
pub(crate) const MAX_TRIPS: u64 = 16;

/// Statements a written-out loop may expand to (iterations times body statements). Measured on
/// the H200 (bench/runs/2026-11-29-h200-session4.txt): at 128 the small models' strided
/// prologues are written out (1B Q4_0 decode 595 -> 643 tok/s); at 256 the row walks of large
/// dense and Q4_0 contractions are too, and their decode slows (1B F16 236 -> 140 tok/s).
const MAX_EXPANDED: u64 = 128;

/// The inclusive ranges of the u32 variables whose values are known to be bounded.
#[derive(Default)]
pub(crate) struct Ranges {
    known: HashMap<Var, (u64, u64)>,
    /// The same for i32 variables.
    signed: HashMap<Var, (i64, i64)>,
}

impl Ranges {
    pub(crate) fn set(&mut self, var: Var, range: (u64, u64)) {
        self.known.insert(var, range);
    }

    pub(crate) fn set_signed(&mut self, var: Var, range: (i64, i64)) {
        self.signed.insert(var, range);
    }

    /// The inclusive range of the i32 expression `e`, when it is a constant, a known variable,
    /// a bounded u32 value reinterpreted, or a sum, difference or product of those that cannot
    /// wrap.
    pub(crate) fn signed_of(&self, k: &Kernel, e: &Expr) -> Option<(i64, i64)> {
        let fits = |(lo, hi): (i64, i64)| {
            (lo >= i64::from(i32::MIN) && hi <= i64::from(i32::MAX)).then_some((lo, hi))
        };
        match e {
            Expr::I32(c) => Some((i64::from(*c), i64::from(*c))),
            Expr::Var(v) => self.signed.get(v).copied(),
            Expr::Cast(crate::ir::Ty::I32, x) => {
                let (lo, hi) = self.of(k, x)?;
                fits((i64::try_from(lo).ok()?, i64::try_from(hi).ok()?))
            }
            Expr::Binary(op, a, b) => {
                let (la, ua) = self.signed_of(k, a)?;
                let (lb, ub) = self.signed_of(k, b)?;
                match op {
                    BinOp::Add => fits((la + lb, ua + ub)),
                    BinOp::Sub => fits((la - ub, ua - lb)),
                    BinOp::Mul => {
                        let p = [la * lb, la * ub, ua * lb, ua * ub];
                        fits((*p.iter().min()?, *p.iter().max()?))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The inclusive range of the u32 expression `e`, when every operation in it is one whose
    /// result range follows from its operands' without wrapping.
    pub(crate) fn of(&self, k: &Kernel, e: &Expr) -> Option<(u64, u64)> {
        const MAX: u64 = u32::MAX as u64;
        let fits = |r: (u64, u64)| (r.1 <= MAX).then_some(r);
        match e {
            Expr::U32(c) => Some((u64::from(*c), u64::from(*c))),
            Expr::Var(v) => self.known.get(v).copied(),
            Expr::Builtin(Builtin::LocalId) => Some((0, u64::from(k.workgroup.max(1)) - 1)),
            Expr::Binary(op, a, b) => {
                let (ra, rb) = (self.of(k, a), self.of(k, b));
                // A mask, a shift or a remainder bounds its result whatever the other operand.
                match (op, ra, rb) {
                    (BinOp::And, None, Some((_, ub))) | (BinOp::And, Some((_, ub)), None) => {
                        return Some((0, ub));
                    }
                    (BinOp::Shr, None, Some((lb, ub))) if lb == ub && lb < 32 => {
                        return Some((0, MAX >> lb));
                    }
                    (BinOp::Rem, None, Some((lb, ub))) if lb == ub && lb > 0 => {
                        return Some((0, lb - 1));
                    }
                    _ => {}
                }
                let ((la, ua), (lb, ub)) = (ra?, rb?);
                match op {
                    BinOp::Add => fits((la + lb, ua + ub)),
                    BinOp::Sub if la >= ub => Some((la - ub, ua - lb)),
                    BinOp::Mul => fits((la.checked_mul(lb)?, ua.checked_mul(ub)?)),
                    BinOp::And => Some((0, ua.min(ub))),
                    // Below the next power of two of the larger operand.
                    BinOp::Or | BinOp::Xor => {
                        let top = ua.max(ub);
                        Some((0, (1u64 << (64 - top.leading_zeros())) - 1))
                    }
                    BinOp::Shr if lb == ub && lb < 32 => Some((la >> lb, ua >> lb)),
                    BinOp::Shl if lb == ub && lb < 32 => fits((la << lb, ua << lb)),
                    BinOp::Div if lb == ub && lb > 0 => Some((la / lb, ua / lb)),
                    BinOp::Rem if lb == ub && lb > 0 => {
                        if ua < lb {
                            Some((la, ua))
                        } else {
                            Some((0, lb - 1))
                        }
                    }
                    BinOp::Min => Some((la.min(lb), ua.min(ub))),
                    BinOp::Max => Some((la.max(lb), ua.max(ub))),
                    _ => None,
                }
            }
            Expr::Select {
                on_true, on_false, ..
            } => {
                let (lt, ut) = self.of(k, on_true)?;
                let (lf, uf) = self.of(k, on_false)?;
                Some((lt.min(lf), ut.max(uf)))
            }
            _ => None,
        }
    }
}

/// How a loop is written out: `trips` iterations in all, of which the first `unchecked` run
/// on every thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Unrolled {
    pub(crate) step: u64,
    pub(crate) end: u64,
    pub(crate) trips: u64,
    pub(crate) unchecked: u64,
    /// The counter's range over the iterations that run.
    pub(crate) counter: (u64, u64),
}

/// Whether loop `for var in start..end step step` over `body` is written out, and how.
pub(crate) fn plan(
    k: &Kernel,
    ranges: &Ranges,
    start: &Expr,
    end: &Expr,
    step: &Expr,
    body: &[Stmt],
) -> Option<Unrolled> {
    let (end, end_hi) = ranges.of(k, end)?;
    let (step, step_hi) = ranges.of(k, step)?;
    if end != end_hi || step != step_hi || step == 0 {
        return None;
    }
    let (lo, hi) = ranges.of(k, start)?;
    if lo >= end {
        return None;
    }
    // Iterations t with lo + t * step < end run on some thread, those with hi + t * step < end
    // on all.
    let trips = (end - lo).div_ceil(step);
    let unchecked = if hi >= end {
        0
    } else {
        (end - hi).div_ceil(step)
    };
    if trips > MAX_TRIPS || trips * count(body) > MAX_EXPANDED || has_barrier(body) {
        return None;
    }
    let last = hi + (trips - 1) * step;
    if last > u64::from(u32::MAX) {
        return None;
    }
    Some(Unrolled {
        step,
        end,
        trips,
        unchecked,
        counter: (lo, last.min(end - 1)),
    })
}

/// A loop's constant `end` and `step` when its counter cannot wrap (`end - 1 + step` fits in
/// u32), so it needs no overflow guard.
pub(crate) fn cannot_wrap(
    k: &Kernel,
    ranges: &Ranges,
    end: &Expr,
    step: &Expr,
) -> Option<(u64, u64)> {
    let (end, end_hi) = ranges.of(k, end)?;
    let (step, step_hi) = ranges.of(k, step)?;
    (end == end_hi && step == step_hi && step > 0 && end + step <= u64::from(u32::MAX) + 1)
        .then_some((end, step))
}

/// Statements in `body`, nested ones included.
fn count(body: &[Stmt]) -> u64 {
    body.iter()
        .map(|s| match s {
            Stmt::If {
                then, otherwise, ..
            } => 1 + count(then) + count(otherwise),
            Stmt::For { body, .. } => 1 + count(body),
            _ => 1,
        })
        .sum()
}

/// Whether `body` assigns `var` (then a loop counter's range says nothing of its values, and a
/// written-out iteration, which declares it constant, would not compile).
pub(crate) fn assigns(body: &[Stmt], var: Var) -> bool {
    body.iter().any(|s| match s {
        Stmt::Set { var: v, .. } | Stmt::TeamSum { var: v, .. } => *v == var,
        Stmt::MmaTf32 { acc, .. } | Stmt::MmaHalf { acc, .. } => acc.contains(&var),
        Stmt::If {
            then, otherwise, ..
        } => assigns(then, var) || assigns(otherwise, var),
        Stmt::For { body, .. } => assigns(body, var),
        _ => false,
    })
}

/// Whether `body` holds a barrier or a team sum (a written-out iteration that tests its counter
/// would put it under a branch some threads skip).
fn has_barrier(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Barrier | Stmt::TeamSum { .. } | Stmt::MmaTf32 { .. } | Stmt::MmaHalf { .. } => true,
        Stmt::If {
            then, otherwise, ..
        } => has_barrier(then) || has_barrier(otherwise),
        Stmt::For { body, .. } => has_barrier(body),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{local_id, u32c};

    fn kernel(workgroup: u32) -> Kernel {
        Kernel {
            name: "t".to_string(),
            workgroup,
            min_resident: 0,
            params: Vec::new(),
            shared: Vec::new(),
            vars: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn a_thread_strided_loop_is_written_out_with_only_its_last_iteration_tested() {
        let k = kernel(64);
        let r = Ranges::default();
        // 576 / 64: nine iterations, all unconditional.
        let u = plan(&k, &r, &local_id(), &u32c(576), &u32c(64), &[]).unwrap();
        assert_eq!((u.trips, u.unchecked, u.counter), (9, 9, (0, 575)));
        // 600 / 64: ten iterations, the tenth runs on threads 0..24 only.
        let u = plan(&k, &r, &local_id(), &u32c(600), &u32c(64), &[]).unwrap();
        assert_eq!((u.trips, u.unchecked), (10, 9));
        // A tail loop starting past the unrolled part: lanes 32 + (0..8) below 36.
        let lane = local_id() & u32c(7);
        let u = plan(&k, &r, &(u32c(32) + lane), &u32c(36), &u32c(8), &[]).unwrap();
        assert_eq!((u.trips, u.unchecked, u.counter), (1, 0, (32, 35)));
    }

    #[test]
    fn loops_without_known_bounds_stay_loops() {
        let k = kernel(64);
        let r = Ranges::default();
        let unknown = Expr::Builtin(Builtin::GroupId(0));
        assert_eq!(plan(&k, &r, &unknown, &u32c(576), &u32c(64), &[]), None);
        assert_eq!(plan(&k, &r, &local_id(), &unknown, &u32c(64), &[]), None);
        // Too many iterations.
        assert_eq!(
            plan(&k, &r, &local_id(), &u32c(64 * 17), &u32c(64), &[]),
            None
        );
        // No iteration runs: nothing to write out.
        assert_eq!(plan(&k, &r, &u32c(9), &u32c(9), &u32c(1), &[]), None);
        // A barrier in the body.
        let body = [Stmt::Barrier];
        assert_eq!(plan(&k, &r, &u32c(0), &u32c(2), &u32c(1), &body), None);
    }

    #[test]
    fn only_loops_whose_counter_cannot_wrap_drop_the_guard() {
        let k = kernel(64);
        let r = Ranges::default();
        assert_eq!(cannot_wrap(&k, &r, &u32c(64), &u32c(1)), Some((64, 1)));
        assert_eq!(
            cannot_wrap(&k, &r, &u32c(u32::MAX), &u32c(1)),
            Some((u64::from(u32::MAX), 1))
        );
        assert_eq!(cannot_wrap(&k, &r, &u32c(u32::MAX), &u32c(2)), None);
        assert_eq!(cannot_wrap(&k, &r, &u32c(64), &u32c(0)), None);
        assert_eq!(cannot_wrap(&k, &r, &local_id(), &u32c(1)), None);
    }

    #[test]
    fn signed_ranges_follow_the_block_formats_small_integers() {
        let k = kernel(64);
        let r = Ranges::default();
        let word = crate::build::load(crate::ParamId(0), u32c(0));
        let i32_of = |e: Expr| crate::build::cast(crate::ir::Ty::I32, e);
        // Q4_0: a nibble less 8.
        let q4 = i32_of((word.clone() >> u32c(4)) & u32c(15)) - Expr::I32(8);
        assert_eq!(r.signed_of(&k, &q4), Some((-8, 7)));
        // Q8_0: a byte sign-extended as the decoders write it.
        let byte = (word.clone() >> u32c(8)) & u32c(255);
        let i8 = i32_of(byte.clone()) - i32_of((byte >> u32c(7)) << u32c(8));
        assert_eq!(r.signed_of(&k, &i8), Some((-256, 255)));
        // Q6_K: four low bits and two high ones, less 32.
        let q6 = ((word.clone() >> u32c(8)) & u32c(15))
            | (((word.clone() >> u32c(2)) & u32c(3)) << u32c(4));
        assert_eq!(r.of(&k, &q6), Some((0, 63)));
        assert_eq!(
            r.signed_of(&k, &(i32_of(q6) - Expr::I32(32))),
            Some((-32, 31))
        );
        // A whole word reinterpreted could be anything.
        assert_eq!(r.signed_of(&k, &i32_of(word)), None);
    }

    #[test]
    fn a_counter_assigned_in_its_body_is_seen() {
        let set = Stmt::Set {
            var: Var(3),
            value: u32c(0),
        };
        let nested = [Stmt::If {
            cond: Expr::Bool(true),
            then: vec![set.clone()],
            otherwise: Vec::new(),
        }];
        assert!(assigns(&nested, Var(3)));
        assert!(!assigns(&nested, Var(4)));
        assert!(!assigns(&[Stmt::Barrier], Var(3)));
    }

    #[test]
    fn ranges_follow_variables_and_refuse_what_could_wrap() {
        let k = kernel(256);
        let mut r = Ranges::default();
        r.set(Var(0), (0, 31));
        let e = (Expr::Var(Var(0)) >> u32c(2)) * u32c(20) + u32c(4);
        assert_eq!(r.of(&k, &e), Some((4, 144)));
        assert_eq!(r.of(&k, &(u32c(3) - Expr::Var(Var(0)))), None);
        assert_eq!(r.of(&k, &(u32c(u32::MAX) + local_id())), None);
        assert_eq!(r.of(&k, &(local_id() % u32c(8))), Some((0, 7)));
        // A loaded word is unknown, but masked or shifted it is bounded.
        let word = crate::build::load(crate::ParamId(0), u32c(0));
        assert_eq!(r.of(&k, &word), None);
        assert_eq!(
            r.of(&k, &((word.clone() >> u32c(4)) & u32c(15))),
            Some((0, 15))
        );
        assert_eq!(r.of(&k, &(word.clone() >> u32c(24))), Some((0, 255)));
        assert_eq!(r.of(&k, &(word % u32c(10))), Some((0, 9)));
    }
}
