//! Fitting a model on the devices of a placement, each against its own memory: the weights a
//! device uploads, and the KV cache a position of a row takes on it, so a driver's rows and
//! capacity can be chosen (or refused, with the numbers) before anything is uploaded.
//!
//! A tensor-parallel rank holds its slices of the split weights, the replicated ones whole, and
//! its share of every layer's key/value heads; a pipeline stage holds its layers whole (the
//! first stage also the embeddings, the last the final norm and head, every stage the rotary
//! tables: the split and the weights of [`poot_models::pipeline`], which the driver uploads).
//! Weight bytes count each constant as the executor uploads it (whole words, and a tied
//! embedding and head once on a device that holds both).

use std::collections::HashSet;
use std::ops::Range;

use poot_graph_plan::Target;
use poot_models::weights::{WeightMap, WeightSource};
use poot_models::{KvType, Program, Shard, Stage, TraceError};

use crate::handle::ModelHandle;
use crate::placement::Placement;

/// One device of a placement, as the planner fits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFit {
    /// The device's place in the placement (a rank, or a pipeline stage).
    pub index: usize,
    /// The device's memory, when it reports it.
    pub memory_bytes: Option<u64>,
    /// The layers whose weights and cache it holds (all of them, split, for a rank).
    pub layers: Range<usize>,
    /// Bytes of weights it uploads.
    pub weight_bytes: u64,
    /// Bytes of KV cache one position of one row takes on it (f32 keys and values).
    pub kv_bytes_per_position: u64,
}

impl DeviceFit {
    /// Bytes left for the KV cache beside the weights and `reserve_bytes` (scratch, slots,
    /// tables), when the device reports its memory.
    pub fn kv_budget(&self, reserve_bytes: u64) -> Option<u64> {
        self.memory_bytes
            .map(|m| m.saturating_sub(self.weight_bytes.saturating_add(reserve_bytes)))
    }
}

/// Why a placement does not fit.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// The targets given are not one per device of the placement.
    #[error("{placement} spans {needed} devices; {given} targets were given")]
    Targets {
        placement: Placement,
        needed: usize,
        given: usize,
    },
    /// The model does not split over the placement (heads that do not divide, a family that
    /// does not run tensor-parallel).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A pipeline of no stages, or of more stages than the model has layers (a stage would
    /// hold none).
    #[error("a pipeline of {stages} stages over {layers} layers")]
    Stages { stages: usize, layers: usize },
    /// A device cannot hold its weights. More devices, or a smaller weight format, may fit.
    #[error("device {index}: its weights need {weight_bytes} B; the device has {memory_bytes} B")]
    Weights {
        index: usize,
        weight_bytes: u64,
        memory_bytes: u64,
    },
    /// A device cannot hold the KV cache asked for beside its weights. Fewer rows, a shorter
    /// capacity or more devices may fit.
    #[error(
        "device {index}: {rows} rows of {capacity} positions need {kv_bytes} B of KV cache beside {weight_bytes} B of weights and {reserve_bytes} B held back; the device has {memory_bytes} B"
    )]
    Kv {
        index: usize,
        rows: usize,
        capacity: usize,
        kv_bytes: u64,
        weight_bytes: u64,
        reserve_bytes: u64,
        memory_bytes: u64,
    },
}

/// A model fitted on the devices of a placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planner {
    placement: Placement,
    devices: Vec<DeviceFit>,
}

impl Planner {
    /// Fits `handle`'s model on `targets` (one per device of `placement`, in order): what each
    /// device's weights and each position of its KV cache (of `kv_type`) take. Refuses a model
    /// that does not split over the placement, and a device that cannot hold its weights.
    pub fn new(
        handle: &ModelHandle,
        targets: &[Target],
        placement: Placement,
        kv_type: KvType,
    ) -> Result<Planner, CapacityError> {
        let needed = placement.devices();
        if targets.len() != needed {
            return Err(CapacityError::Targets {
                placement,
                needed,
                given: targets.len(),
            });
        }
        let model = handle.model();
        let layers = model.config().n_layers;
        let states = model
            .schema()
            .program(Program::Step)
            .map(|p| p.states.clone())
            .unwrap_or_default();
        if let Placement::Pipeline { stages } = placement
            && (stages == 0 || stages > layers)
        {
            return Err(CapacityError::Stages { stages, layers });
        }
        let mut devices = Vec::with_capacity(needed);
        for (index, target) in targets.iter().enumerate() {
            // The weights the driver uploads to this device, and the layers whose cache it holds.
            let (map, held, shard) = match placement {
                Placement::Single => (model.weights().clone(), 0..layers, Shard::WHOLE),
                Placement::TensorParallel { ranks } => {
                    let shard = Shard::new(index, ranks)?;
                    (model.shard_weights(shard)?.into_owned(), 0..layers, shard)
                }
                Placement::Pipeline { stages } => {
                    let stage = Stage::new(index, stages)?;
                    let map = model.placed_weights(Shard::WHOLE, stage)?.into_owned();
                    (map, stage.layers(layers)?, Shard::WHOLE)
                }
            };
            let weight_bytes = weight_bytes(&map);
            let kv_bytes_per_position = states
                .iter()
                .filter(|s| held.contains(&s.layer))
                .map(|s| (shard.share(s.heads).len() * s.head_dim * kv_type.bytes()) as u64)
                .sum();
            let fit = DeviceFit {
                index,
                memory_bytes: target.limits.memory_bytes,
                layers: held,
                weight_bytes,
                kv_bytes_per_position,
            };
            if let Some(memory_bytes) = fit.memory_bytes
                && fit.weight_bytes > memory_bytes
            {
                return Err(CapacityError::Weights {
                    index,
                    weight_bytes: fit.weight_bytes,
                    memory_bytes,
                });
            }
            devices.push(fit);
        }
        Ok(Planner { placement, devices })
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Every device, in placement order.
    pub fn devices(&self) -> &[DeviceFit] {
        &self.devices
    }

    /// Checks that `rows` sequences of `capacity` positions fit on every device beside its
    /// weights, with `reserve_bytes` held back on each for what a plan adds (scratch, slots,
    /// tables). A device that does not report its memory is not checked.
    pub fn check(
        &self,
        rows: usize,
        capacity: usize,
        reserve_bytes: u64,
    ) -> Result<(), CapacityError> {
        let positions = (rows as u64).saturating_mul(capacity as u64);
        for d in &self.devices {
            let (Some(memory_bytes), Some(budget)) = (d.memory_bytes, d.kv_budget(reserve_bytes))
            else {
                continue;
            };
            let kv_bytes = positions.saturating_mul(d.kv_bytes_per_position);
            if kv_bytes > budget {
                return Err(CapacityError::Kv {
                    index: d.index,
                    rows,
                    capacity,
                    kv_bytes,
                    weight_bytes: d.weight_bytes,
                    reserve_bytes,
                    memory_bytes,
                });
            }
        }
        Ok(())
    }

    /// The most KV positions (rows times capacity) every device holds beside its weights and
    /// `reserve_bytes`; `None` when no device reports its memory.
    pub fn max_positions(&self, reserve_bytes: u64) -> Option<u64> {
        self.devices
            .iter()
            .filter_map(|d| {
                let budget = d.kv_budget(reserve_bytes)?;
                Some(budget / d.kv_bytes_per_position.max(1))
            })
            .min()
    }
}

/// Bytes the executor uploads for the entries of `map`: whole words per constant, constants
/// over the same stored bytes once.
fn weight_bytes(map: &WeightMap) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    for e in map.iter() {
        if let WeightSource::Tensor { name, rows, cols } = &e.source
            && !seen.insert((name.clone(), rows.clone(), cols.clone()))
        {
            continue;
        }
        let bytes = e.ty.size_bytes().unwrap_or(u64::MAX);
        total = total.saturating_add(bytes.div_ceil(4).max(1) * 4);
    }
    total
}
