//! The tracing builder: model code calls it to record equations into a graph.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::graph::{Eqn, Graph, OutputIds, ValidationError, ValueInfo};
use crate::limits::{Resource, TraceLimits, Usage};
use crate::op::{BinaryOp, CompareOp, InferError, OpKind, ReduceOp, Scalar, UnaryOp};
use crate::storage::{Slot, Storage};
use crate::types::{DType, Shape, TensorType, ValueId};

static NEXT_BRAND: AtomicU64 = AtomicU64::new(1);

/// A type-only handle to a traced value: its id plus the brand of the builder that minted it.
/// It carries no data, so model code cannot branch on activation values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Traced {
    id: ValueId,
    brand: u64,
}

impl Traced {
    pub fn id(self) -> ValueId {
        self.id
    }
}

/// What a graph returns, as traced handles: primary outputs and carried state pairs.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    primary: Vec<Traced>,
    state: Vec<(Traced, Traced)>,
}

impl Outputs {
    pub fn new(out: Traced) -> Outputs {
        Outputs {
            primary: vec![out],
            state: Vec::new(),
        }
    }

    /// Adds another primary output (a validation witness, a hidden-state carry).
    pub fn and(mut self, out: Traced) -> Outputs {
        self.primary.push(out);
        self
    }

    /// Pairs each state input with the value that replaces it after the step.
    pub fn with_state(mut self, pairs: &[(Traced, Traced)]) -> Outputs {
        self.state.extend_from_slice(pairs);
        self
    }
}

/// A finished graph reopened for appending (see [`Builder::extend`]).
pub struct Extension {
    pub builder: Builder,
    /// The graph's primary outputs, in order.
    pub outputs: Vec<Traced>,
    /// Its carried state pairs.
    pub state: Vec<(Traced, Traced)>,
}

/// Why the builder refused a call. Nothing is recorded by a refused call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BuilderError {
    /// A handle minted by another builder was passed to this one.
    #[error("handle {value} belongs to builder #{handle_brand}, not this builder #{builder_brand}")]
    ForeignHandle {
        value: ValueId,
        handle_brand: u64,
        builder_brand: u64,
    },
    /// The op rejects its input types (mismatched shapes, wrong dtype, axis out of range...).
    #[error("at `{at}`: {source}")]
    Infer { at: String, source: InferError },
    /// The trace would exceed one of its limits; nothing past the limit was built.
    #[error("trace budget: {resource} would reach {attempted}, the limit is {limit}")]
    Budget {
        resource: Resource,
        limit: u64,
        attempted: u64,
    },
    /// Two inputs of one kind were given one name.
    #[error("a {kind} input named `{name}` already exists")]
    DuplicateName { kind: &'static str, name: String },
    /// The finished graph is not well formed (an unpaired state, say).
    #[error(transparent)]
    Validation(#[from] ValidationError),
}

struct State {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    usage: Usage,
    scope: Vec<String>,
}

/// Records equations. Every call returns a `Result`; a refused call changes nothing.
pub struct Builder {
    brand: u64,
    limits: TraceLimits,
    state: RefCell<State>,
}

impl Builder {
    pub fn new(limits: TraceLimits) -> Builder {
        Builder {
            brand: NEXT_BRAND.fetch_add(1, Ordering::Relaxed),
            limits,
            state: RefCell::new(State {
                values: Vec::new(),
                eqns: Vec::new(),
                usage: Usage::default(),
                scope: Vec::new(),
            }),
        }
    }

    /// Continues a finished graph: a builder holding its values and equations, with handles to
    /// its primary outputs and its state pairs, so a pass can append equations (a sampling
    /// suffix) with the same helpers a tracer uses and finish a new graph. The graph's size is
    /// charged against `limits` first.
    pub fn extend(graph: Graph, limits: TraceLimits) -> Result<Extension, BuilderError> {
        let b = Builder::new(limits);
        {
            let mut st = b.state.borrow_mut();
            let values = graph.values().len() as u64;
            let eqns = graph.eqns().len() as u64;
            b.charge(
                &mut st.usage,
                &[(Resource::Values, values), (Resource::Equations, eqns)],
            )?;
            st.values = graph.values().to_vec();
            st.eqns = graph.eqns().to_vec();
        }
        let handle = |id: ValueId| Traced { id, brand: b.brand };
        let outputs = graph.outputs().primary.iter().map(|&o| handle(o)).collect();
        let state = graph
            .outputs()
            .state
            .iter()
            .map(|&(i, o)| (handle(i), handle(o)))
            .collect();
        Ok(Extension {
            builder: b,
            outputs,
            state,
        })
    }

    pub fn limits(&self) -> TraceLimits {
        self.limits
    }

    pub fn usage(&self) -> Usage {
        self.state.borrow().usage
    }

    /// Charges the step's new tokens against the limit.
    pub fn admit_tokens(&self, n: u64) -> Result<(), BuilderError> {
        let mut st = self.state.borrow_mut();
        self.charge(&mut st.usage, &[(Resource::Tokens, n)])
    }

    /// The host-computed type of a traced value.
    pub fn aval(&self, t: Traced) -> Result<TensorType, BuilderError> {
        self.own(t)?;
        Ok(self.state.borrow().values[t.id.index()].ty.clone())
    }

    /// Shorthand for the dims of a traced value.
    pub fn dims(&self, t: Traced) -> Result<Vec<usize>, BuilderError> {
        Ok(self.aval(t)?.shape.0)
    }

    /// Runs `f` with `name` pushed on the label scope (`l3`, then `attn`), so values it creates are
    /// labelled `l3.attn.<op>`.
    pub fn scope<R>(&self, name: &str, f: impl FnOnce(&Builder) -> R) -> R {
        self.state.borrow_mut().scope.push(name.to_string());
        let r = f(self);
        self.state.borrow_mut().scope.pop();
        r
    }

    /// Gives a value a role label within the current scope.
    pub fn name(&self, t: Traced, role: &str) -> Result<Traced, BuilderError> {
        self.own(t)?;
        let mut st = self.state.borrow_mut();
        let label = scoped(&st.scope, role);
        self.charge(&mut st.usage, &[(Resource::OwnedBytes, label.len() as u64)])?;
        st.values[t.id.index()].label = label;
        Ok(t)
    }

    /// Declares a named weight or table.
    pub fn constant(&self, name: &str, ty: TensorType) -> Result<Traced, BuilderError> {
        self.input(ty, Storage::Const(name.to_string()), "const", name)
    }

    /// Declares a per-step input.
    pub fn slot(&self, slot: Slot, ty: TensorType) -> Result<Traced, BuilderError> {
        let name = slot.name().to_string();
        self.input(ty, Storage::Slot(slot), "slot", &name)
    }

    /// Declares a custom named per-step input.
    pub fn slot_named(&self, name: &str, ty: TensorType) -> Result<Traced, BuilderError> {
        self.slot(Slot::Named(name.to_string()), ty)
    }

    /// Declares the input half of a carried state pair (pair it in [`Outputs::with_state`]).
    pub fn state_input(&self, name: &str, ty: TensorType) -> Result<Traced, BuilderError> {
        self.input(ty, Storage::State(name.to_string()), "state", name)
    }

    fn input(
        &self,
        ty: TensorType,
        storage: Storage,
        kind: &'static str,
        name: &str,
    ) -> Result<Traced, BuilderError> {
        let mut st = self.state.borrow_mut();
        let clash = st.values.iter().any(|v| match (&v.storage, &storage) {
            (Storage::Const(a), Storage::Const(b)) | (Storage::State(a), Storage::State(b)) => {
                a == b
            }
            (Storage::Slot(a), Storage::Slot(b)) => a.name() == b.name(),
            _ => false,
        });
        if clash {
            return Err(BuilderError::DuplicateName {
                kind,
                name: name.to_string(),
            });
        }
        if ty.shape.n_elems().is_none() {
            return Err(BuilderError::Infer {
                at: name.to_string(),
                source: InferError::Overflow { op: kind },
            });
        }
        if let DType::Components(_) = ty.dtype {
            // Only a constant has stored components to bind.
            if !matches!(storage, Storage::Const(_)) {
                return Err(BuilderError::Infer {
                    at: name.to_string(),
                    source: InferError::DType {
                        op: kind,
                        input: 0,
                        found: ty.dtype,
                        expected: "a dense type (component formats are constants)",
                    },
                });
            }
            crate::op::check_components(kind, &ty).map_err(|source| BuilderError::Infer {
                at: name.to_string(),
                source,
            })?;
        }
        let owned = (name.len() + 8 * ty.rank()) as u64;
        self.charge(
            &mut st.usage,
            &[(Resource::Values, 1), (Resource::OwnedBytes, owned)],
        )?;
        st.values.push(ValueInfo {
            ty,
            storage,
            label: name.to_string(),
        });
        Ok(Traced {
            id: ValueId(st.values.len() as u32 - 1),
            brand: self.brand,
        })
    }

    /// Records `op(inputs)`: checks ownership of every handle, infers the output type, charges the
    /// limits, then appends.
    pub fn eqn(&self, op: OpKind, inputs: &[Traced]) -> Result<Traced, BuilderError> {
        for &t in inputs {
            self.own(t)?;
        }
        let mut st = self.state.borrow_mut();
        let ty = {
            let tys: Vec<&TensorType> =
                inputs.iter().map(|t| &st.values[t.id.index()].ty).collect();
            op.infer(&tys).map_err(|source| BuilderError::Infer {
                at: scoped(&st.scope, op.name()),
                source,
            })?
        };
        let label = scoped(&st.scope, op.name());
        let owned = (label.len() + 4 * inputs.len() + param_bytes(&op) + 8 * ty.rank()) as u64;
        let literal = if matches!(op, OpKind::Literal(_)) {
            4
        } else {
            0
        };
        self.charge(
            &mut st.usage,
            &[
                (Resource::Values, 1),
                (Resource::Equations, 1),
                (Resource::OwnedBytes, owned),
                (Resource::LiteralBytes, literal),
            ],
        )?;
        st.values.push(ValueInfo {
            ty,
            storage: Storage::Device,
            label,
        });
        let out = ValueId(st.values.len() as u32 - 1);
        st.eqns.push(Eqn {
            op,
            inputs: inputs.iter().map(|t| t.id).collect(),
            out,
        });
        Ok(Traced {
            id: out,
            brand: self.brand,
        })
    }

    /// Closes the trace, validating the graph.
    pub fn finish(self, outputs: Outputs) -> Result<Graph, BuilderError> {
        for &t in outputs
            .primary
            .iter()
            .chain(outputs.state.iter().flat_map(|(a, b)| [a, b]))
        {
            self.own(t)?;
        }
        let st = self.state.into_inner();
        let ids = OutputIds {
            primary: outputs.primary.iter().map(|t| t.id).collect(),
            state: outputs.state.iter().map(|(a, b)| (a.id, b.id)).collect(),
        };
        Ok(Graph::from_parts(st.values, st.eqns, ids)?)
    }

    fn own(&self, t: Traced) -> Result<(), BuilderError> {
        if t.brand != self.brand {
            return Err(BuilderError::ForeignHandle {
                value: t.id,
                handle_brand: t.brand,
                builder_brand: self.brand,
            });
        }
        Ok(())
    }

    fn charge(&self, usage: &mut Usage, costs: &[(Resource, u64)]) -> Result<(), BuilderError> {
        for &(resource, cost) in costs {
            let limit = self.limits.limit(resource);
            let attempted = usage.get(resource).saturating_add(cost);
            if attempted > limit {
                return Err(BuilderError::Budget {
                    resource,
                    limit,
                    attempted,
                });
            }
        }
        for &(resource, cost) in costs {
            *usage.get_mut(resource) += cost;
        }
        Ok(())
    }

    // ---- One method per primitive, so model code reads as equations. ----

    pub fn literal(&self, s: Scalar) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Literal(s), &[])
    }

    pub fn lit_f32(&self, v: f32) -> Result<Traced, BuilderError> {
        self.literal(Scalar::F32(v))
    }

    pub fn lit_i32(&self, v: i32) -> Result<Traced, BuilderError> {
        self.literal(Scalar::I32(v))
    }

    pub fn iota(
        &self,
        shape: impl Into<Shape>,
        axis: usize,
        dtype: DType,
    ) -> Result<Traced, BuilderError> {
        self.eqn(
            OpKind::Iota {
                shape: shape.into(),
                axis,
                dtype,
            },
            &[],
        )
    }

    pub fn unary(&self, op: UnaryOp, x: Traced) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Unary(op), &[x])
    }

    pub fn binary(&self, op: BinaryOp, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Binary(op), &[x, y])
    }

    pub fn compare(&self, op: CompareOp, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Compare(op), &[x, y])
    }

    pub fn neg(&self, x: Traced) -> Result<Traced, BuilderError> {
        self.unary(UnaryOp::Neg, x)
    }

    pub fn exp(&self, x: Traced) -> Result<Traced, BuilderError> {
        self.unary(UnaryOp::Exp, x)
    }

    pub fn tanh(&self, x: Traced) -> Result<Traced, BuilderError> {
        self.unary(UnaryOp::Tanh, x)
    }

    pub fn rsqrt(&self, x: Traced) -> Result<Traced, BuilderError> {
        self.unary(UnaryOp::Rsqrt, x)
    }

    pub fn add(&self, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.binary(BinaryOp::Add, x, y)
    }

    pub fn sub(&self, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.binary(BinaryOp::Sub, x, y)
    }

    pub fn mul(&self, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.binary(BinaryOp::Mul, x, y)
    }

    pub fn div(&self, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.binary(BinaryOp::Div, x, y)
    }

    pub fn max(&self, x: Traced, y: Traced) -> Result<Traced, BuilderError> {
        self.binary(BinaryOp::Max, x, y)
    }

    pub fn select(
        &self,
        cond: Traced,
        on_true: Traced,
        on_false: Traced,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Select, &[cond, on_true, on_false])
    }

    pub fn cast(&self, x: Traced, to: DType) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Cast { to }, &[x])
    }

    pub fn reshape(&self, x: Traced, shape: impl Into<Shape>) -> Result<Traced, BuilderError> {
        self.eqn(
            OpKind::Reshape {
                shape: shape.into(),
            },
            &[x],
        )
    }

    pub fn broadcast(&self, x: Traced, shape: impl Into<Shape>) -> Result<Traced, BuilderError> {
        self.eqn(
            OpKind::Broadcast {
                shape: shape.into(),
            },
            &[x],
        )
    }

    pub fn transpose(&self, x: Traced, perm: Vec<usize>) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Transpose { perm }, &[x])
    }

    pub fn slice(
        &self,
        x: Traced,
        starts: Vec<usize>,
        ends: Vec<usize>,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Slice { starts, ends }, &[x])
    }

    pub fn concat(&self, xs: &[Traced], axis: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Concat { axis }, xs)
    }

    pub fn gather(&self, data: Traced, idx: Traced, axis: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Gather { axis }, &[data, idx])
    }

    pub fn take_along(
        &self,
        data: Traced,
        idx: Traced,
        axis: usize,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::TakeAlong { axis }, &[data, idx])
    }

    pub fn dynamic_slice(
        &self,
        x: Traced,
        starts: &[Traced],
        sizes: Vec<usize>,
    ) -> Result<Traced, BuilderError> {
        let mut inputs = vec![x];
        inputs.extend_from_slice(starts);
        self.eqn(OpKind::DynamicSlice { sizes }, &inputs)
    }

    pub fn dynamic_update_slice(
        &self,
        operand: Traced,
        update: Traced,
        starts: &[Traced],
    ) -> Result<Traced, BuilderError> {
        let mut inputs = vec![operand, update];
        inputs.extend_from_slice(starts);
        self.eqn(OpKind::DynamicUpdateSlice, &inputs)
    }

    pub fn scatter_update(
        &self,
        operand: Traced,
        idx: Traced,
        updates: Traced,
        axis: usize,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::ScatterUpdate { axis }, &[operand, idx, updates])
    }

    pub fn reduce(&self, op: ReduceOp, x: Traced, axis: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::Reduce { op, axis }, &[x])
    }

    pub fn reduce_sum(&self, x: Traced, axis: usize) -> Result<Traced, BuilderError> {
        self.reduce(ReduceOp::Sum, x, axis)
    }

    pub fn reduce_max(&self, x: Traced, axis: usize) -> Result<Traced, BuilderError> {
        self.reduce(ReduceOp::Max, x, axis)
    }

    pub fn argmax(&self, x: Traced, axis: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::ArgMax { axis }, &[x])
    }

    pub fn arg_top_k(&self, x: Traced, k: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::ArgTopK { k }, &[x])
    }

    pub fn matmul(
        &self,
        lhs: Traced,
        rhs: Traced,
        transpose_rhs: bool,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::MatMul { transpose_rhs }, &[lhs, rhs])
    }

    pub fn indexed_matmul(
        &self,
        lhs: Traced,
        rhs: Traced,
        idx: Traced,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::IndexedMatMul, &[lhs, rhs, idx])
    }

    /// The sum of `x` over the `ranks` graphs of a tensor-parallel group.
    pub fn all_reduce_sum(&self, x: Traced, ranks: usize) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::AllReduceSum { ranks }, &[x])
    }

    /// Rank `root`'s `x` on every one of the `ranks` graphs of a group (each rank passes a value
    /// of the same type; only root's is read).
    pub fn broadcast_from(
        &self,
        x: Traced,
        root: usize,
        ranks: usize,
    ) -> Result<Traced, BuilderError> {
        self.eqn(OpKind::BroadcastFrom { root, ranks }, &[x])
    }
}

fn scoped(scope: &[String], leaf: &str) -> String {
    if scope.is_empty() {
        leaf.to_string()
    } else {
        format!("{}.{leaf}", scope.join("."))
    }
}

fn param_bytes(op: &OpKind) -> usize {
    match op {
        OpKind::Iota { shape, .. } | OpKind::Reshape { shape } | OpKind::Broadcast { shape } => {
            8 * shape.rank()
        }
        OpKind::Transpose { perm } => 8 * perm.len(),
        OpKind::Slice { starts, ends } => 8 * (starts.len() + ends.len()),
        OpKind::DynamicSlice { sizes } => 8 * sizes.len(),
        OpKind::Literal(_)
        | OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::Cast { .. }
        | OpKind::Concat { .. }
        | OpKind::Gather { .. }
        | OpKind::TakeAlong { .. }
        | OpKind::DynamicUpdateSlice
        | OpKind::ScatterUpdate { .. }
        | OpKind::Reduce { .. }
        | OpKind::ArgMax { .. }
        | OpKind::ArgTopK { .. }
        | OpKind::MatMul { .. }
        | OpKind::IndexedMatMul
        | OpKind::AllReduceSum { .. }
        | OpKind::BroadcastFrom { .. } => 0,
    }
}
