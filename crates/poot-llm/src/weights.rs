//! A model's constants as an executor reads them: every name its weight map binds, with the
//! stored bytes from the weight store (or the computed table). A component-format constant (a
//! GPTQ, AWQ, FP8 or FP4 linear) is one buffer per component, each its stored bytes as they are
//! in the checkpoint: nothing is decoded or copied on the host.

use std::borrow::Cow;
use std::sync::Arc;

use poot_executor::{ConstBytes, ConstSource};
use poot_models::weights::ConstData;

use crate::handle::ModelHandle;

/// The weights of a handle, shared with the handle.
pub struct HandleWeights {
    handle: Arc<ModelHandle>,
}

impl HandleWeights {
    pub fn new(handle: Arc<ModelHandle>) -> HandleWeights {
        HandleWeights { handle }
    }
}

impl ConstSource for HandleWeights {
    fn names(&self) -> Vec<String> {
        self.handle.model().weights().buffer_names()
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        match self
            .handle
            .model()
            .weights()
            .buffer_data(name, self.handle.store())
            .ok()?
        {
            ConstData::Bytes(b) => Some(ConstBytes::Stored(Cow::Borrowed(b))),
            ConstData::F32(v) => Some(ConstBytes::F32(Cow::Borrowed(v))),
            // Components are served one by one under their own buffer names.
            ConstData::Components(_) => None,
        }
    }
}
