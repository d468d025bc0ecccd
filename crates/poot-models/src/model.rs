//! The `Model` trait every family implements.

use std::borrow::Cow;

use poot_graph_ir::{Builder, Graph, TraceLimits};

use crate::error::TraceError;
use crate::schema::ModelSchema;
use crate::step::{Program, Shard, Stage, StepSpec};
use crate::weights::WeightMap;

/// Whether a model generates (a decoder with a `step` program) or encodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelKind {
    Decoder,
    Encoder,
}

/// What the driver and the text services need to know about a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The registry key of the family (`llama`, `gemma3`, `bert/cross_encoder`).
    pub family: &'static str,
    pub kind: ModelKind,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub n_layers: usize,
    /// The most positions the model's tables cover (the largest KV capacity it can trace).
    pub max_positions: usize,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// The family's built-in chat format, for a checkpoint that ships no template.
    pub chat_format: Option<&'static str>,
}

/// A model family's traced definition of a checkpoint.
pub trait Model: Send + Sync {
    fn config(&self) -> &ModelConfig;
    fn schema(&self) -> &ModelSchema;
    fn weights(&self) -> &WeightMap;

    /// Narrows the model to its first `positions` positions, the largest capacity a driver will
    /// use: computed tables (rotary angles) then cover only those, and a longer trace is
    /// refused. A checkpoint may declare a context far beyond what any device holds; sizing
    /// its tables by the capacity in use keeps load time and memory bounded by that capacity.
    /// Refused when `positions` exceeds the model's positions.
    fn narrow_positions(&mut self, positions: usize) -> Result<(), TraceError>;

    /// How the stored Q and K projection rows are ordered against a Hugging Face checkpoint's,
    /// which LoRA adapters are trained on (see [`crate::lora::LoraTables::with_qk_rows`]).
    fn lora_qk_rows(&self) -> crate::lora::QkRows {
        crate::lora::QkRows::AsStored
    }

    /// The weight map rank `shard.rank` of a tensor-parallel group reads (its slices of the
    /// split weights, see [`crate::tensor_parallel`]). A group of one reads [`Model::weights`];
    /// a family whose tracer does not split its layers refuses any larger group.
    fn shard_weights(&self, shard: Shard) -> Result<Cow<'_, WeightMap>, TraceError> {
        Shard::new(shard.rank, shard.ranks)?;
        if shard.is_whole() {
            return Ok(Cow::Borrowed(self.weights()));
        }
        Err(TraceError::Unsharded {
            family: self.config().family,
            ranks: shard.ranks,
        })
    }

    /// The weight map one device of a placement reads: rank `shard`'s slices
    /// ([`Model::shard_weights`]), or pipeline stage `stage`'s layers and the model-wide weights
    /// it holds ([`WeightMap::stage`]). A step is a rank or a stage, never both.
    fn placed_weights(&self, shard: Shard, stage: Stage) -> Result<Cow<'_, WeightMap>, TraceError> {
        if stage.is_whole() {
            return self.shard_weights(shard);
        }
        if !shard.is_whole() {
            return Err(TraceError::ShardedStage {
                rank: shard.rank,
                ranks: shard.ranks,
                stage: stage.index,
                stages: stage.stages,
            });
        }
        Ok(Cow::Owned(
            self.weights().stage(stage, self.config().n_layers)?,
        ))
    }

    /// The family's tracer body: the graph of one step. Called through [`Model::trace`], which
    /// has already checked the step against the schema and admitted its tokens.
    fn trace_into(&self, spec: &StepSpec, b: Builder) -> Result<Graph, TraceError>;

    /// Traces one step under `limits`: checks the program, the carried inputs, the shape and
    /// its KV geometry, admits the token count before the body runs, then checks the traced
    /// graph carries exactly the program's declared states (a pipeline stage: those of its
    /// layers), each of the shape the schema declares for this step
    /// ([`crate::schema::StateDecl::dims`]).
    fn trace(&self, spec: &StepSpec, limits: TraceLimits) -> Result<Graph, TraceError> {
        let decl = self
            .schema()
            .program(spec.program)
            .ok_or(TraceError::NoProgram {
                program: spec.program,
            })?;
        for name in &spec.carried {
            if !self.schema().request_inputs.iter().any(|r| &r.name == name) {
                return Err(TraceError::CarriedInput { name: name.clone() });
            }
        }
        let s = spec.shape;
        let bad = |why| TraceError::Shape {
            rows: s.rows,
            tokens: s.tokens,
            capacity: s.capacity,
            why,
        };
        if s.rows == 0 || s.tokens == 0 {
            return Err(bad("rows and tokens must be positive"));
        }
        if spec.program == Program::Step && s.tokens > s.capacity {
            return Err(bad(
                "a step cannot carry more new tokens than the cache holds",
            ));
        }
        if spec.program == Program::Step {
            s.check_kv()?;
        }
        // A family that cannot split its layers refuses before tracing anything, as does a
        // pipeline stage of an encoder or of more stages than layers.
        if !s.stage.is_whole() && spec.program != Program::Step {
            return Err(TraceError::StagedProgram {
                program: spec.program,
            });
        }
        let held = s.stage.layers(self.config().n_layers)?;
        if s.stage.is_whole() {
            self.shard_weights(s.shard)?;
        } else if !s.shard.is_whole() {
            return Err(TraceError::ShardedStage {
                rank: s.shard.rank,
                ranks: s.shard.ranks,
                stage: s.stage.index,
                stages: s.stage.stages,
            });
        }
        let positions = if spec.program == Program::Step {
            s.capacity
        } else {
            s.tokens
        };
        if positions > self.config().max_positions {
            return Err(TraceError::Positions {
                capacity: positions,
                max_positions: self.config().max_positions,
            });
        }
        let b = Builder::new(limits);
        b.admit_tokens(s.total_tokens())?;
        let graph = self.trace_into(spec, b)?;
        let mut declared: Vec<String> = decl
            .states
            .iter()
            .filter(|d| s.stage.is_whole() || held.contains(&d.layer))
            .map(|d| d.name.clone())
            .collect();
        let mut traced: Vec<String> = graph.states().map(|(_, n, _)| n.to_string()).collect();
        declared.sort();
        traced.sort();
        if declared != traced {
            return Err(TraceError::States {
                program: spec.program,
                declared,
                traced,
            });
        }
        for (_, name, ty) in graph.states() {
            if let Some(d) = decl.states.iter().find(|d| d.name == name) {
                let want = d.dims(&s);
                if ty.dims() != want.as_slice() {
                    return Err(TraceError::StateShape {
                        name: name.to_string(),
                        declared: want,
                        traced: ty.dims().to_vec(),
                    });
                }
            }
        }
        Ok(graph)
    }
}

/// The positions a model narrowed to `positions` keeps (at least one), refused beyond the
/// `max_positions` it has.
pub fn narrowed_positions(positions: usize, max_positions: usize) -> Result<usize, TraceError> {
    if positions > max_positions {
        return Err(TraceError::Positions {
            capacity: positions,
            max_positions,
        });
    }
    Ok(positions.max(1))
}

/// What a family's build returns.
pub struct ModelParts {
    pub model: Box<dyn Model>,
}
