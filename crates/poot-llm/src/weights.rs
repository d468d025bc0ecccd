//! A model's constants as an executor reads them: every name its weight map binds, with the
//! stored bytes from the weight store (or the computed table). A component-format constant (a
//! GPTQ, AWQ, FP8 or FP4 linear) is one buffer per component, each its stored bytes as they are
//! in the checkpoint: nothing is decoded on the host, and only a tensor-parallel rank's column
//! slice of a tensor (dense, blocks or a component) is copied, gathered from its rows.

use std::borrow::Cow;
use std::sync::Arc;

use poot_executor::{ConstBytes, ConstSource};
use poot_models::weights::{ConstData, WeightMap};
use poot_models::{Shard, Stage, TraceError};

use crate::handle::ModelHandle;

/// The weights of a handle, shared with the handle: the whole model's, one tensor-parallel
/// rank's slices of them, or one pipeline stage's.
pub struct HandleWeights {
    handle: Arc<ModelHandle>,
    /// A rank's or a stage's weight map; `None` reads the model's own.
    shard: Option<WeightMap>,
}

impl HandleWeights {
    pub fn new(handle: Arc<ModelHandle>) -> HandleWeights {
        HandleWeights {
            handle,
            shard: None,
        }
    }

    /// The weights rank `shard.rank` of a tensor-parallel group uploads: its slices of the split
    /// projections (a column slice gathered from the stored rows when uploaded), everything else
    /// whole. Refused when the model does not split over the group.
    pub fn for_rank(handle: Arc<ModelHandle>, shard: Shard) -> Result<HandleWeights, TraceError> {
        let map = handle.model().shard_weights(shard)?.into_owned();
        Ok(HandleWeights {
            handle,
            shard: (!shard.is_whole()).then_some(map),
        })
    }

    /// The weights pipeline stage `stage` uploads: its layers', and the embeddings (the first
    /// stage), the final norm and head (the last) and the rotary tables it reads. Refused when
    /// the pipeline has more stages than the model has layers.
    pub fn for_stage(handle: Arc<ModelHandle>, stage: Stage) -> Result<HandleWeights, TraceError> {
        let map = handle
            .model()
            .placed_weights(Shard::WHOLE, stage)?
            .into_owned();
        Ok(HandleWeights {
            handle,
            shard: (!stage.is_whole()).then_some(map),
        })
    }

    fn map(&self) -> &WeightMap {
        self.shard
            .as_ref()
            .unwrap_or_else(|| self.handle.model().weights())
    }
}

impl ConstSource for HandleWeights {
    fn names(&self) -> Vec<String> {
        self.map().buffer_names()
    }

    /// From the bound type (the stored bytes of its rows and columns), so a gathered slice is
    /// not gathered to be measured; a component buffer from its stored bytes.
    fn byte_len(&self, name: &str) -> Option<u64> {
        if let Some(e) = self.map().by_const(name) {
            return e.ty.size_bytes();
        }
        self.bytes(name).map(|b| b.len())
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        match self.map().buffer_data(name, self.handle.store()).ok()? {
            ConstData::Bytes(b) => Some(ConstBytes::Stored(Cow::Borrowed(b))),
            ConstData::Gathered(b) => Some(ConstBytes::Stored(Cow::Owned(b))),
            ConstData::F32(v) => Some(ConstBytes::F32(Cow::Borrowed(v))),
            // Components are served one by one under their own buffer names.
            ConstData::Components(_) => None,
        }
    }
}
