//! Why an evaluation failed: a binding that does not fit the graph, or a fault while running one
//! equation.

use std::fmt;

use poot_graph_ir::{DType, GgmlType, TensorType, ValueId};

use crate::packed::DecodeError;
use crate::tensor::TensorError;

/// The three kinds of bound graph inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    Const,
    Slot,
    State,
}

impl fmt::Display for InputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputKind::Const => "const",
            InputKind::Slot => "slot",
            InputKind::State => "state",
        })
    }
}

/// Why [`crate::eval`] refused or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A graph input has no binding. Bind it in [`crate::Inputs`] under this kind and name.
    #[error("{kind} `{name}` ({expected}) is not bound")]
    Unbound {
        kind: InputKind,
        name: String,
        expected: TensorType,
    },
    /// A binding's type differs from the input's type in the graph.
    #[error("{kind} `{name}` is bound as {found}, the graph declares {expected}")]
    InputType {
        kind: InputKind,
        name: String,
        expected: TensorType,
        found: TensorType,
    },
    /// A binding names no input of the graph (a typo, or a binding meant for another graph).
    #[error("{kind} `{name}` is bound but the graph has no such input")]
    UnknownBinding { kind: InputKind, name: String },
    /// An equation failed while it ran; `value` (labelled `label`) is the value it defines.
    #[error("eqn {eqn} ({op}) defining {value} `{label}`: {fault}")]
    Fault {
        eqn: usize,
        op: &'static str,
        value: ValueId,
        label: String,
        fault: Box<Fault>,
    },
    /// [`crate::eval_group`] was given a different number of graphs and input sets.
    #[error("a group of {graphs} graphs was given {inputs} input sets")]
    GroupInputs { graphs: usize, inputs: usize },
    /// The ranks of a group did not meet at the same collective: rank `rank` reached `found`
    /// where rank 0 reached `expected` (the graphs were not traced as one group).
    #[error("rank {rank} reached {found} where rank 0 reached {expected}")]
    GroupDiverged {
        rank: usize,
        expected: String,
        found: String,
    },
    /// Rank `rank` of a group failed.
    #[error("rank {rank}: {source}")]
    Rank { rank: usize, source: Box<EvalError> },
    /// An output value was released before the walk collected it. This is an evaluator bug
    /// (its liveness analysis), reported rather than a panic.
    #[error("output value {value} is no longer available")]
    Released { value: ValueId },
}

/// What went wrong inside one equation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Fault {
    /// A runtime index (gather, take-along, scatter, indexed matmul expert id) lies outside the
    /// axis it indexes. `input` is the operand holding it, `element` its flat position there.
    /// Indices never wrap: a negative index is out of range too.
    #[error("input {input} element {element} is index {index}, outside [0, {bound})")]
    IndexOutOfRange {
        input: usize,
        element: usize,
        index: i64,
        bound: usize,
    },
    /// A dynamic slice or update whose runtime start puts the window outside its axis. Starts
    /// are not clamped: the window `[start, start + size)` must lie inside `[0, dim)`.
    #[error("axis {axis}: window [{start}, {start} + {size}) from input {input} outside dim {dim}")]
    WindowOutOfRange {
        input: usize,
        axis: usize,
        start: i64,
        size: usize,
        dim: usize,
    },
    /// An integer division or remainder by zero.
    #[error("integer {op} by zero at element {element}")]
    DivisionByZero { op: &'static str, element: usize },
    /// An arg-max over an empty axis has no index to return.
    #[error("arg-max over axis {axis} of size 0")]
    EmptyArgMax { axis: usize },
    /// Packed weights that could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A packed row of `k` elements that is not whole blocks of its format.
    #[error("a packed {format:?} row of {k} elements is not whole blocks")]
    PackedRow { format: GgmlType, k: usize },
    /// An index result (arg-max, top-k) along an axis too long for i32 indices.
    #[error("an axis of {dim} elements is too long for i32 indices")]
    IndexOverflow { dim: usize },
    /// An input's element type is not one this op is defined on. A validated graph never does
    /// this; it points at a disagreement between `poot-graph-ir`'s type inference and the
    /// evaluator.
    #[error("input {input} is {dtype}, which this op does not read")]
    Unsupported { input: usize, dtype: DType },
    /// The equation has fewer inputs than its op reads. A validated graph never does this (it
    /// points at a disagreement between `poot-graph-ir`'s type inference and the evaluator).
    #[error("operand {operand} is missing")]
    MissingOperand { operand: usize },
    /// An input value had already been released. This is an evaluator bug (its liveness
    /// analysis), reported rather than a panic.
    #[error("input value {value} is no longer available")]
    Released { value: ValueId },
    /// A computed window reaches past the buffer it reads or writes (`len` elements). This is an
    /// evaluator bug, reported rather than a panic.
    #[error("a window at element {base} reaches past a buffer of {len} elements")]
    WindowLayout { base: usize, len: usize },
    /// A collective (`op`: an all-reduce, a broadcast) over a group of `ranks` in a graph
    /// evaluated alone: a rank's value means nothing without the others'. Evaluate the group's
    /// graphs together with [`crate::eval_group`].
    #[error("{op} over {ranks} ranks needs the whole group (eval_group)")]
    Collective { op: &'static str, ranks: usize },
    /// The op produced data that does not match the type the graph records for its output.
    /// This is an evaluator bug, reported rather than a panic.
    #[error("produced data that does not fit the recorded type: {0}")]
    Produced(#[source] TensorError),
}
