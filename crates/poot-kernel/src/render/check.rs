//! The checks both renderers run before writing anything: the kernel validates, every variable
//! is declared once and used only inside the block that declares it, and the few shapes neither
//! language can spell (an empty workgroup, an empty shared array, a fourth grid axis) are
//! refused. Also collects the facts rendering needs: which variables are ever assigned.

use std::collections::BTreeSet;

use super::RenderError;
use crate::ir::{Builtin, Expr, Kernel, Stmt, Var};

/// What the renderers need to know about a checked kernel.
pub(crate) struct Facts {
    /// Variables assigned after their declaration (by `Set`, or as a loop counter).
    pub(crate) mutated: BTreeSet<Var>,
}

/// Checks `k` for rendering.
pub(crate) fn check(k: &Kernel) -> Result<Facts, RenderError> {
    k.validate()?;
    if k.workgroup == 0 {
        return Err(RenderError::EmptyWorkgroup {
            kernel: k.name.clone(),
        });
    }
    if let Some(s) = k.shared.iter().find(|s| s.len == 0) {
        return Err(RenderError::EmptyShared {
            kernel: k.name.clone(),
            name: s.name.clone(),
        });
    }
    let mut scopes = Scopes {
        kernel: k,
        visible: BTreeSet::new(),
        frames: vec![Vec::new()],
        declared: BTreeSet::new(),
        mutated: BTreeSet::new(),
    };
    scopes.block(&k.body)?;
    Ok(Facts {
        mutated: scopes.mutated,
    })
}

struct Scopes<'k> {
    kernel: &'k Kernel,
    /// Variables visible at this point.
    visible: BTreeSet<Var>,
    /// The variables each open block declared, innermost last.
    frames: Vec<Vec<Var>>,
    /// Every variable declared so far anywhere.
    declared: BTreeSet<Var>,
    mutated: BTreeSet<Var>,
}

impl Scopes<'_> {
    fn block(&mut self, body: &[Stmt]) -> Result<(), RenderError> {
        self.frames.push(Vec::new());
        for s in body {
            self.stmt(s)?;
        }
        for v in self.frames.pop().unwrap_or_default() {
            self.visible.remove(&v);
        }
        Ok(())
    }

    fn declare(&mut self, var: Var) -> Result<(), RenderError> {
        if !self.declared.insert(var) {
            return Err(RenderError::Redeclared {
                kernel: self.kernel.name.clone(),
                var: var.0,
            });
        }
        self.visible.insert(var);
        if let Some(frame) = self.frames.last_mut() {
            frame.push(var);
        }
        Ok(())
    }

    fn visible(&self, var: Var) -> Result<(), RenderError> {
        if self.visible.contains(&var) {
            Ok(())
        } else {
            Err(RenderError::Undeclared {
                kernel: self.kernel.name.clone(),
                var: var.0,
            })
        }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), RenderError> {
        match s {
            Stmt::Let { var, ty: _, value } => {
                self.expr(value)?;
                self.declare(*var)
            }
            Stmt::Set { var, value } => {
                self.visible(*var)?;
                self.expr(value)?;
                self.mutated.insert(*var);
                Ok(())
            }
            Stmt::Store {
                buf: _,
                index,
                value,
            }
            | Stmt::StoreShared {
                arr: _,
                index,
                value,
            } => {
                self.expr(index)?;
                self.expr(value)
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond)?;
                self.block(then)?;
                self.block(otherwise)
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                if matches!(step, Expr::U32(0)) {
                    return Err(RenderError::ZeroStep {
                        kernel: self.kernel.name.clone(),
                        var: var.0,
                    });
                }
                self.expr(start)?;
                self.expr(end)?;
                self.expr(step)?;
                // The counter lives in its own block around the body.
                self.frames.push(Vec::new());
                self.declare(*var)?;
                self.mutated.insert(*var);
                self.block(body)?;
                for v in self.frames.pop().unwrap_or_default() {
                    self.visible.remove(&v);
                }
                Ok(())
            }
            Stmt::LetWords {
                vars,
                buf: _,
                index,
            } => {
                self.expr(index)?;
                vars.iter().try_for_each(|&v| self.declare(v))
            }
            Stmt::LetShared {
                vars,
                arr: _,
                index,
            } => {
                self.expr(index)?;
                vars.iter().try_for_each(|&v| self.declare(v))
            }
            Stmt::TeamSum { var, lanes: _ } => {
                self.visible(*var)?;
                self.mutated.insert(*var);
                Ok(())
            }
            Stmt::MmaTf32 { acc, a, b } => self.mma(acc, a.iter().chain(b)),
            Stmt::MmaHalf { half: _, acc, a, b } => self.mma(acc, a.iter().chain(b)),
            Stmt::StoreSharedHalves {
                half: _,
                arr: _,
                index,
                values,
            } => {
                self.expr(index)?;
                values.iter().try_for_each(|e| self.expr(e))
            }
            Stmt::Barrier | Stmt::Fault { code: _ } => Ok(()),
        }
    }

    /// A matrix-unit product: its operands are read, then its sums updated in place.
    fn mma<'e>(
        &mut self,
        acc: &[Var],
        operands: impl Iterator<Item = &'e Expr>,
    ) -> Result<(), RenderError> {
        for e in operands {
            self.expr(e)?;
        }
        for &v in acc {
            self.visible(v)?;
            self.mutated.insert(v);
        }
        Ok(())
    }

    fn expr(&mut self, e: &Expr) -> Result<(), RenderError> {
        match e {
            Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) => Ok(()),
            Expr::Var(v) => self.visible(*v),
            Expr::Builtin(b) => match b {
                Builtin::GroupId(axis) if *axis > 2 => Err(RenderError::NoSuchAxis {
                    kernel: self.kernel.name.clone(),
                    axis: *axis,
                }),
                Builtin::LocalId | Builtin::GroupId(_) | Builtin::GroupCountX => Ok(()),
            },
            Expr::Load { buf: _, index }
            | Expr::LoadByte {
                buf: _,
                byte: index,
            }
            | Expr::LoadHalf {
                buf: _,
                index,
                half: _,
            }
            | Expr::LoadShared { arr: _, index } => self.expr(index),
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::ShuffleXor { value: x, mask: _ } => {
                self.expr(x)
            }
            Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
                self.expr(a)?;
                self.expr(b)
            }
            Expr::Select {
                cond,
                on_true,
                on_false,
            }
            | Expr::MulAdd(cond, on_true, on_false) => {
                self.expr(cond)?;
                self.expr(on_true)?;
                self.expr(on_false)
            }
        }
    }
}
