//! Bindings for a graph's inputs: constants and state by name, slots by [`Slot`].

use std::collections::{BTreeMap, BTreeSet};

use poot_graph_ir::{Graph, Slot, Storage, TensorType};

use crate::error::{EvalError, InputKind};
use crate::tensor::HostTensor;

/// A tensor for every constant, slot and state input of one graph.
///
/// [`crate::eval`] checks the bindings against the graph before it runs anything: an input
/// with no binding, a binding of another type, and a binding the graph has no input for are
/// each a typed error naming it.
#[derive(Clone, Debug, Default)]
pub struct Inputs<'a> {
    consts: BTreeMap<String, HostTensor<'a>>,
    slots: BTreeMap<Slot, HostTensor<'a>>,
    states: BTreeMap<String, HostTensor<'a>>,
}

impl<'a> Inputs<'a> {
    pub fn new() -> Inputs<'a> {
        Inputs::default()
    }

    /// Binds a constant, returning the tensor it replaces.
    pub fn set_const(
        &mut self,
        name: impl Into<String>,
        t: HostTensor<'a>,
    ) -> Option<HostTensor<'a>> {
        self.consts.insert(name.into(), t)
    }

    /// Binds a slot, returning the tensor it replaces.
    pub fn set_slot(&mut self, slot: Slot, t: HostTensor<'a>) -> Option<HostTensor<'a>> {
        self.slots.insert(slot, t)
    }

    /// Binds a state input, returning the tensor it replaces.
    pub fn set_state(
        &mut self,
        name: impl Into<String>,
        t: HostTensor<'a>,
    ) -> Option<HostTensor<'a>> {
        self.states.insert(name.into(), t)
    }

    pub fn with_const(mut self, name: impl Into<String>, t: HostTensor<'a>) -> Inputs<'a> {
        self.set_const(name, t);
        self
    }

    pub fn with_slot(mut self, slot: Slot, t: HostTensor<'a>) -> Inputs<'a> {
        self.set_slot(slot, t);
        self
    }

    pub fn with_state(mut self, name: impl Into<String>, t: HostTensor<'a>) -> Inputs<'a> {
        self.set_state(name, t);
        self
    }

    pub fn constant(&self, name: &str) -> Option<&HostTensor<'a>> {
        self.consts.get(name)
    }

    pub fn slot(&self, slot: &Slot) -> Option<&HostTensor<'a>> {
        self.slots.get(slot)
    }

    pub fn state(&self, name: &str) -> Option<&HostTensor<'a>> {
        self.states.get(name)
    }

    /// The binding of every input value of `graph`, by value index (`None` for values that
    /// equations define), after checking that the bindings and the graph's inputs match one to
    /// one with equal types.
    pub(crate) fn resolve<'s>(
        &'s self,
        graph: &Graph,
    ) -> Result<Vec<Option<&'s HostTensor<'a>>>, EvalError> {
        let mut bound = Vec::with_capacity(graph.values().len());
        let (mut consts, mut slots, mut states) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for v in graph.values() {
            let (kind, name, found) = match &v.storage {
                Storage::Device => {
                    bound.push(None);
                    continue;
                }
                Storage::Const(name) => {
                    consts.insert(name.as_str());
                    (InputKind::Const, name.as_str(), self.consts.get(name))
                }
                Storage::Slot(slot) => {
                    slots.insert(slot);
                    (InputKind::Slot, slot.name(), self.slots.get(slot))
                }
                Storage::State(name) => {
                    states.insert(name.as_str());
                    (InputKind::State, name.as_str(), self.states.get(name))
                }
            };
            let t = found.ok_or_else(|| EvalError::Unbound {
                kind,
                name: name.to_string(),
                expected: v.ty.clone(),
            })?;
            check_type(kind, name, &v.ty, t.ty())?;
            bound.push(Some(t));
        }
        let unknown = |kind, name: &str| EvalError::UnknownBinding {
            kind,
            name: name.to_string(),
        };
        if let Some(name) = self.consts.keys().find(|n| !consts.contains(n.as_str())) {
            return Err(unknown(InputKind::Const, name));
        }
        if let Some(slot) = self.slots.keys().find(|s| !slots.contains(s)) {
            return Err(unknown(InputKind::Slot, slot.name()));
        }
        if let Some(name) = self.states.keys().find(|n| !states.contains(n.as_str())) {
            return Err(unknown(InputKind::State, name));
        }
        Ok(bound)
    }
}

fn check_type(
    kind: InputKind,
    name: &str,
    expected: &TensorType,
    found: &TensorType,
) -> Result<(), EvalError> {
    if expected == found {
        Ok(())
    } else {
        Err(EvalError::InputType {
            kind,
            name: name.to_string(),
            expected: expected.clone(),
            found: found.clone(),
        })
    }
}
