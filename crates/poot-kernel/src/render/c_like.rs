//! Spellings CUDA C and WGSL share: comparison operators, grid axis components.

use super::RenderError;
use crate::ir::{CmpOp, Kernel};

/// The component letter of a grid axis (checked to be 0..=2 before rendering).
pub(crate) fn axis_letter(k: &Kernel, axis: u8) -> Result<char, RenderError> {
    match axis {
        0 => Ok('x'),
        1 => Ok('y'),
        2 => Ok('z'),
        _ => Err(RenderError::NoSuchAxis {
            kernel: k.name.clone(),
            axis,
        }),
    }
}

/// Whether `op` orders its operands (rather than testing equality).
pub(crate) fn is_ordering(op: CmpOp) -> bool {
    match op {
        CmpOp::Eq | CmpOp::Ne => false,
        CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => true,
    }
}

pub(crate) fn cmp_symbol(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

/// `s` without its outer parentheses when one pair encloses all of it (`(a < b)` to `a < b`),
/// for `if` conditions.
pub(crate) fn strip_parens(s: &str) -> &str {
    match s
        .strip_prefix('(')
        .and_then(|inner| inner.strip_suffix(')'))
    {
        Some(inner) if closes_at_end(s) => inner,
        Some(_) | None => s,
    }
}

/// Whether the `(` that opens `s` is closed by its last character.
fn closes_at_end(s: &str) -> bool {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1 == s.len();
                }
            }
            _ => {}
        }
    }
    false
}

/// `s` as an operand of a prefix operator or C cast: unchanged when nothing in it sits outside
/// brackets but name characters (`v3`, `f(x)`, `p0[i]`, `(a + b)`), else parenthesized.
pub(crate) fn operand(s: &str) -> String {
    let mut depth = 0usize;
    let atomic = s.chars().all(|c| match c {
        '(' | '[' => {
            depth += 1;
            true
        }
        ')' | ']' => {
            depth = depth.saturating_sub(1);
            true
        }
        c => depth > 0 || c.is_ascii_alphanumeric() || c == '_' || c == '.',
    });
    if atomic && !s.is_empty() {
        s.to_string()
    } else {
        format!("({s})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parentheses() {
        assert_eq!(strip_parens("(a < b)"), "a < b");
        assert_eq!(strip_parens("(a) + (b)"), "(a) + (b)");
        assert_eq!(strip_parens("f(x)"), "f(x)");
        assert_eq!(operand("v3"), "v3");
        assert_eq!(operand("p0_x[(i + 1u)]"), "p0_x[(i + 1u)]");
        assert_eq!(operand("(a + b)"), "(a + b)");
        assert_eq!(operand("a + b"), "(a + b)");
        assert_eq!(operand("-1"), "(-1)");
        assert_eq!(operand("1.5f"), "1.5f");
    }
}
