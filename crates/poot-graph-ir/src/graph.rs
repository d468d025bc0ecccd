//! A finished graph: values, equations in topological order, outputs and carried state.

use std::collections::HashSet;

use crate::op::{InferError, OpKind};
use crate::storage::{Slot, Storage};
use crate::types::{DType, TensorType, ValueId};

/// What the graph knows about one value.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    pub ty: TensorType,
    pub storage: Storage,
    /// A role name (`l3.attn.k`) so a device-versus-oracle diff can point at the value that
    /// drifts; empty when the tracer gave none.
    pub label: String,
}

/// One equation: `out = op(inputs)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Eqn {
    pub op: OpKind,
    pub inputs: Vec<ValueId>,
    pub out: ValueId,
}

/// The values a graph returns: primary outputs in order, and carried state pairs
/// (`state_in` value, the value that replaces it after the step).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OutputIds {
    pub primary: Vec<ValueId>,
    pub state: Vec<(ValueId, ValueId)>,
}

/// A well-formed graph: every constructor validates, so holding one is proof of
/// [`Graph::validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    outputs: OutputIds,
}

/// Why a graph is not well formed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ValidationError {
    /// An equation or output names a value id the graph does not have.
    #[error("value {value} does not exist (the graph has {n_values} values)")]
    UnknownValue { value: ValueId, n_values: usize },
    /// An equation reads a device value before any equation defines it.
    #[error("eqn {eqn} ({op}) reads {value} before it is defined")]
    UseBeforeDef {
        eqn: usize,
        op: &'static str,
        value: ValueId,
    },
    /// A device value is defined by no equation, or an input value by an equation.
    #[error("value {value} ({storage}) has {defs} defining eqns")]
    Definition {
        value: ValueId,
        storage: &'static str,
        defs: usize,
    },
    /// An equation's recorded output type is not what its op infers.
    #[error("eqn {eqn}: recorded type {recorded} but {op} infers {inferred}")]
    TypeDrift {
        eqn: usize,
        op: &'static str,
        recorded: TensorType,
        inferred: TensorType,
    },
    /// An equation's op rejects its input types.
    #[error("eqn {eqn}: {source}")]
    Infer { eqn: usize, source: InferError },
    /// A component-format value that is not a constant, or whose shape its format cannot store.
    #[error("value {value}: {source}")]
    Components { value: ValueId, source: InferError },
    /// Two inputs of one kind share a name.
    #[error("two {kind} inputs are named `{name}`")]
    DuplicateName { kind: &'static str, name: String },
    /// A state pair whose first member is not a state input, or whose types differ.
    #[error("state pair ({state_in}, {state_out}) is not a state input with a same-typed output")]
    StatePair {
        state_in: ValueId,
        state_out: ValueId,
    },
    /// A state input paired more than once, or never.
    #[error("state input {value} is paired {pairs} times (exactly once required)")]
    StatePairing { value: ValueId, pairs: usize },
    /// The graph returns nothing.
    #[error("the graph has no primary output")]
    NoOutput,
}

impl Graph {
    /// Builds a graph from parts, checking it.
    pub fn from_parts(
        values: Vec<ValueInfo>,
        eqns: Vec<Eqn>,
        outputs: OutputIds,
    ) -> Result<Graph, ValidationError> {
        let g = Graph {
            values,
            eqns,
            outputs,
        };
        g.validate()?;
        Ok(g)
    }

    pub fn values(&self) -> &[ValueInfo] {
        &self.values
    }

    pub fn eqns(&self) -> &[Eqn] {
        &self.eqns
    }

    pub fn outputs(&self) -> &OutputIds {
        &self.outputs
    }

    pub fn value(&self, id: ValueId) -> Option<&ValueInfo> {
        self.values.get(id.index())
    }

    pub fn ty(&self, id: ValueId) -> Option<&TensorType> {
        self.value(id).map(|v| &v.ty)
    }

    /// The constants, in value order, with their names.
    pub fn consts(&self) -> impl Iterator<Item = (ValueId, &str, &TensorType)> {
        self.ids_with(|s| match s {
            Storage::Const(n) => Some(n.as_str()),
            _ => None,
        })
    }

    /// The state inputs, in value order, with their names.
    pub fn states(&self) -> impl Iterator<Item = (ValueId, &str, &TensorType)> {
        self.ids_with(|s| match s {
            Storage::State(n) => Some(n.as_str()),
            _ => None,
        })
    }

    /// The slots, in value order.
    pub fn slots(&self) -> impl Iterator<Item = (ValueId, &Slot, &TensorType)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match &v.storage {
                Storage::Slot(s) => Some((ValueId(i as u32), s, &v.ty)),
                _ => None,
            })
    }

    fn ids_with<'a>(
        &'a self,
        f: impl Fn(&'a Storage) -> Option<&'a str> + 'a,
    ) -> impl Iterator<Item = (ValueId, &'a str, &'a TensorType)> + 'a {
        self.values
            .iter()
            .enumerate()
            .filter_map(move |(i, v)| f(&v.storage).map(|n| (ValueId(i as u32), n, &v.ty)))
    }

    /// The state output paired with a state input.
    pub fn state_out(&self, state_in: ValueId) -> Option<ValueId> {
        self.outputs
            .state
            .iter()
            .find(|(i, _)| *i == state_in)
            .map(|(_, o)| *o)
    }

    /// Starts a checked edit of this graph; see [`GraphEdit`].
    pub fn edit(self) -> GraphEdit {
        GraphEdit {
            values: self.values,
            eqns: self.eqns,
            outputs: self.outputs,
        }
    }

    /// Checks every invariant a finished graph promises: ids in range, each device value defined
    /// exactly once before use and each input never, recorded types equal to inferred types,
    /// input names unique per kind, every state input paired exactly once with a same-typed
    /// value, and at least one primary output.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let n = self.values.len();
        let check = |v: ValueId| {
            if v.index() < n {
                Ok(())
            } else {
                Err(ValidationError::UnknownValue {
                    value: v,
                    n_values: n,
                })
            }
        };
        let mut defined: Vec<bool> = self.values.iter().map(|v| v.storage.is_input()).collect();
        let mut defs = vec![0usize; n];
        for (i, e) in self.eqns.iter().enumerate() {
            check(e.out)?;
            let mut tys = Vec::with_capacity(e.inputs.len());
            for &inp in &e.inputs {
                check(inp)?;
                if !defined[inp.index()] {
                    return Err(ValidationError::UseBeforeDef {
                        eqn: i,
                        op: e.op.name(),
                        value: inp,
                    });
                }
                tys.push(&self.values[inp.index()].ty);
            }
            let inferred =
                e.op.infer(&tys)
                    .map_err(|source| ValidationError::Infer { eqn: i, source })?;
            let recorded = &self.values[e.out.index()].ty;
            if &inferred != recorded {
                return Err(ValidationError::TypeDrift {
                    eqn: i,
                    op: e.op.name(),
                    recorded: recorded.clone(),
                    inferred,
                });
            }
            defs[e.out.index()] += 1;
            defined[e.out.index()] = true;
        }
        for (i, v) in self.values.iter().enumerate() {
            let want = if v.storage.is_input() { 0 } else { 1 };
            if defs[i] != want {
                let storage = match v.storage {
                    Storage::Const(_) => "const",
                    Storage::Slot(_) => "slot",
                    Storage::State(_) => "state",
                    Storage::Device => "device",
                };
                return Err(ValidationError::Definition {
                    value: ValueId(i as u32),
                    storage,
                    defs: defs[i],
                });
            }
        }
        for (i, v) in self.values.iter().enumerate() {
            if let DType::Components(_) = v.ty.dtype {
                let value = ValueId(i as u32);
                if !matches!(v.storage, Storage::Const(_)) {
                    return Err(ValidationError::Components {
                        value,
                        source: InferError::DType {
                            op: "value",
                            input: 0,
                            found: v.ty.dtype,
                            expected: "a constant (component formats are constants)",
                        },
                    });
                }
                crate::op::check_components("const", &v.ty)
                    .map_err(|source| ValidationError::Components { value, source })?;
            }
        }
        let mut names: HashSet<(&'static str, &str)> = HashSet::new();
        for v in &self.values {
            let key = match &v.storage {
                Storage::Const(n) => ("const", n.as_str()),
                Storage::Slot(s) => ("slot", s.name()),
                Storage::State(n) => ("state", n.as_str()),
                Storage::Device => continue,
            };
            if !names.insert(key) {
                return Err(ValidationError::DuplicateName {
                    kind: key.0,
                    name: key.1.to_string(),
                });
            }
        }
        if self.outputs.primary.is_empty() {
            return Err(ValidationError::NoOutput);
        }
        for &o in &self.outputs.primary {
            check(o)?;
        }
        for &(si, so) in &self.outputs.state {
            check(si)?;
            check(so)?;
            let (a, b) = (&self.values[si.index()], &self.values[so.index()]);
            if !matches!(a.storage, Storage::State(_)) || a.ty != b.ty {
                return Err(ValidationError::StatePair {
                    state_in: si,
                    state_out: so,
                });
            }
        }
        for (i, v) in self.values.iter().enumerate() {
            if matches!(v.storage, Storage::State(_)) {
                let pairs = self
                    .outputs
                    .state
                    .iter()
                    .filter(|(si, _)| si.index() == i)
                    .count();
                if pairs != 1 {
                    return Err(ValidationError::StatePairing {
                        value: ValueId(i as u32),
                        pairs,
                    });
                }
            }
        }
        Ok(())
    }
}

/// A graph being rewritten. Every edit goes through here and [`GraphEdit::finish`] validates the
/// result, so a pass can never publish a malformed graph.
#[derive(Clone, Debug)]
pub struct GraphEdit {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    outputs: OutputIds,
}

impl GraphEdit {
    pub fn values(&self) -> &[ValueInfo] {
        &self.values
    }

    pub fn eqns(&self) -> &[Eqn] {
        &self.eqns
    }

    /// Changes the type of an input value (a constant bound as stored, say); the equations that
    /// read it are re-inferred at [`GraphEdit::finish`].
    pub fn retype_input(&mut self, id: ValueId, ty: TensorType) -> Result<(), ValidationError> {
        let n = self.values.len();
        let v = self
            .values
            .get_mut(id.index())
            .ok_or(ValidationError::UnknownValue {
                value: id,
                n_values: n,
            })?;
        v.ty = ty;
        Ok(())
    }

    /// Adds an input value (const, slot or state) and returns its id.
    pub fn add_input(
        &mut self,
        ty: TensorType,
        storage: Storage,
        label: impl Into<String>,
    ) -> ValueId {
        self.values.push(ValueInfo {
            ty,
            storage,
            label: label.into(),
        });
        ValueId(self.values.len() as u32 - 1)
    }

    /// Inserts `op(inputs)` before equation `at`, inferring its type, and returns its value.
    pub fn insert_eqn(
        &mut self,
        at: usize,
        op: OpKind,
        inputs: Vec<ValueId>,
        label: impl Into<String>,
    ) -> Result<ValueId, ValidationError> {
        let n = self.values.len();
        let mut tys = Vec::with_capacity(inputs.len());
        for &i in &inputs {
            tys.push(
                &self
                    .values
                    .get(i.index())
                    .ok_or(ValidationError::UnknownValue {
                        value: i,
                        n_values: n,
                    })?
                    .ty,
            );
        }
        let ty = op
            .infer(&tys)
            .map_err(|source| ValidationError::Infer { eqn: at, source })?;
        self.values.push(ValueInfo {
            ty,
            storage: Storage::Device,
            label: label.into(),
        });
        let out = ValueId(self.values.len() as u32 - 1);
        let at = at.min(self.eqns.len());
        self.eqns.insert(at, Eqn { op, inputs, out });
        Ok(out)
    }

    /// Makes every equation (after `after`, if given) and output that reads `old` read `new`.
    pub fn replace_uses(&mut self, old: ValueId, new: ValueId, after: Option<ValueId>) {
        let mut active = after.is_none();
        for e in &mut self.eqns {
            if active {
                for i in &mut e.inputs {
                    if *i == old {
                        *i = new;
                    }
                }
            }
            if Some(e.out) == after {
                active = true;
            }
        }
        for o in &mut self.outputs.primary {
            if *o == old {
                *o = new;
            }
        }
        for (_, so) in &mut self.outputs.state {
            if *so == old {
                *so = new;
            }
        }
    }

    /// Re-infers every equation's output type in order (after an input was retyped).
    pub fn reinfer(&mut self) -> Result<(), ValidationError> {
        let n = self.values.len();
        let unknown = |value: ValueId| ValidationError::UnknownValue { value, n_values: n };
        for (i, e) in self.eqns.iter().enumerate() {
            let mut tys = Vec::with_capacity(e.inputs.len());
            for &v in &e.inputs {
                tys.push(&self.values.get(v.index()).ok_or(unknown(v))?.ty);
            }
            let ty =
                e.op.infer(&tys)
                    .map_err(|source| ValidationError::Infer { eqn: i, source })?;
            self.values.get_mut(e.out.index()).ok_or(unknown(e.out))?.ty = ty;
        }
        Ok(())
    }

    /// Validates and publishes the edited graph.
    pub fn finish(self) -> Result<Graph, ValidationError> {
        Graph::from_parts(self.values, self.eqns, self.outputs)
    }
}
