//! Embedding poot: load a checkpoint into a [`ModelHandle`] (its family's model, its weights as
//! stored, its tokenizer and chat template). The driver that runs a handle on an executor joins
//! this crate with the executor backends.

pub mod handle;

pub use handle::{HandleError, LoadOptions, ModelHandle};
