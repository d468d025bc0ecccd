//! What an evaluation returns.

use poot_graph_ir::ValueId;

use crate::tensor::HostTensor;

/// The result of [`crate::eval`].
///
/// `'i` is the borrow of the [`crate::Inputs`]: the environment, when kept, holds the graph's
/// inputs as views of their bindings rather than copies.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation<'i> {
    /// The primary outputs, in the graph's order.
    pub outputs: Vec<HostTensor<'static>>,
    /// Each state input's name and its new value, in the graph's state-pair order.
    pub state: Vec<(String, HostTensor<'static>)>,
    /// Every value of the graph by [`ValueId`] index, when [`crate::EvalOptions::keep_env`] is set.
    pub env: Option<Vec<HostTensor<'i>>>,
}

impl<'i> Evaluation<'i> {
    /// Primary output `i`.
    pub fn output(&self, i: usize) -> Option<&HostTensor<'static>> {
        self.outputs.get(i)
    }

    /// The new value of the state input named `name`.
    pub fn state_value(&self, name: &str) -> Option<&HostTensor<'static>> {
        self.state.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The same evaluation, independent of the inputs' borrow (copies the inputs held in the
    /// environment, if it was kept).
    pub fn into_owned(self) -> Evaluation<'static> {
        Evaluation {
            outputs: self.outputs,
            state: self.state,
            env: self
                .env
                .map(|env| env.into_iter().map(HostTensor::into_owned).collect()),
        }
    }

    /// A value of the graph, when the environment was kept.
    pub fn value(&self, id: ValueId) -> Option<&HostTensor<'i>> {
        self.env.as_ref()?.get(id.index())
    }
}
