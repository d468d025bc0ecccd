//! Model families as short tracers over shared components.
//!
//! A family is a config reader, a name table and (when its layers are not of the standard
//! shape) a tracer; it implements [`model::Model`], whose `trace` builds the graph of one step.
//! The [`registry`] resolves a checkpoint's config key to its family before any weight is read.

pub mod components;
pub mod config;
pub mod consistency;
pub mod error;
pub mod families;
pub mod limits;
pub mod lora;
pub mod model;
pub mod pipeline;
pub mod registry;
pub mod schema;
pub mod step;
pub mod table;
pub mod tensor_parallel;
pub mod weights;

pub mod test_support;

pub use error::{ModelError, TraceError};
pub use lora::{LoraAdapter, LoraError, LoraShape, LoraTables, LoraTarget, LoraTargets};
pub use model::{Model, ModelConfig, ModelKind, ModelParts};
pub use registry::{FamilyEntry, Registry, SHIPPED};
pub use schema::ModelSchema;
pub use step::{KvLayout, KvType, LogitsMode, Program, Shard, Stage, StepShape, StepSpec};
pub use weights::{WeightMap, WeightRole};
