//! The contract between a family and the driver: what a step may bind besides weights.

use poot_graph_ir::{DType, Slot};

use crate::step::{KvLayout, Program, StepShape};

/// Values the driver computes from its own geometry, the same for every family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepInput {
    /// Token ids `[rows, tokens]` (the `token` slot).
    Tokens,
    /// Absolute positions `[rows, tokens]` (the `pos` slot).
    Positions,
    /// 1 for a real token, 0 for padding, `[rows, tokens]` (the `token_mask` slot).
    TokenMask,
    /// Segment (token type) ids `[rows, tokens]` (the `token_type` slot).
    TokenTypes,
    /// Paged KV only: each row's pool blocks in position order, `i32 [rows, capacity /
    /// block_tokens]` (the `slot_map` slot). See [`KvLayout`] for the contract.
    BlockTable,
    /// Paged KV only: the pool slot each new token writes, `i32 [rows, tokens]` (the
    /// `write_map` slot). See [`KvLayout`] for the contract.
    WriteMap,
}

impl StepInput {
    /// The slot name a traced graph declares for this input.
    pub fn slot_name(self) -> &'static str {
        match self {
            StepInput::Tokens => "token",
            StepInput::Positions => "pos",
            StepInput::TokenMask => "token_mask",
            StepInput::TokenTypes => "token_type",
            StepInput::BlockTable => "slot_map",
            StepInput::WriteMap => "write_map",
        }
    }

    /// The slot a traced graph declares for this input.
    pub fn slot(self) -> Slot {
        match self {
            StepInput::Tokens => Slot::Token,
            StepInput::Positions => Slot::Pos,
            StepInput::BlockTable => Slot::SlotMap,
            StepInput::WriteMap => Slot::WriteMap,
            StepInput::TokenMask | StepInput::TokenTypes => {
                Slot::Named(self.slot_name().to_string())
            }
        }
    }
}

/// Whether a request may omit a request input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Presence {
    Required,
    /// Omitted values are filled with this.
    Defaulted(f32),
    Optional,
}

/// A value a request supplies (embedding rows over some positions, a vision tower's pixels).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestInput {
    pub name: String,
    pub dtype: DType,
    /// Elements per position (or per row when `per_row`).
    pub width: usize,
    pub per_row: bool,
    pub presence: Presence,
}

/// What a carried state holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateRole {
    Keys,
    Values,
}

/// One carried KV state of a program: `heads` key or value heads of `head_dim` features per
/// cached token. [`StateDecl::dims`] gives its traced shape for a step shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StateDecl {
    pub name: String,
    pub layer: usize,
    pub role: StateRole,
    pub heads: usize,
    pub head_dim: usize,
}

impl StateDecl {
    /// The state's dims in a step of `shape` (its type is `shape.kv_type`): `[rows, heads, capacity, head_dim]` for a
    /// contiguous cache, the pool `[blocks * block_tokens, heads, head_dim]` for a paged one
    /// (the same for every step shape over that pool). A tensor-parallel rank holds its share
    /// of the heads.
    pub fn dims(&self, shape: &StepShape) -> Vec<usize> {
        let heads = shape.shard.share(self.heads).len();
        match shape.kv {
            KvLayout::Contiguous => vec![shape.rows, heads, shape.capacity, self.head_dim],
            KvLayout::Paged {
                block_tokens,
                blocks,
            } => vec![blocks.saturating_mul(block_tokens), heads, self.head_dim],
        }
    }
}

/// One program a model offers.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramDecl {
    pub program: Program,
    pub step_inputs: Vec<StepInput>,
    pub states: Vec<StateDecl>,
}

/// A model's input schema: its programs, with their step inputs and states, and the request
/// inputs it declares.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ModelSchema {
    pub programs: Vec<ProgramDecl>,
    pub request_inputs: Vec<RequestInput>,
}

impl ProgramDecl {
    /// The step inputs a step of this program binds under `kv`: the declared ones, plus the
    /// block table and the write map when the program carries a KV cache and `kv` is paged.
    pub fn step_inputs_for(&self, kv: KvLayout) -> Vec<StepInput> {
        let mut inputs = self.step_inputs.clone();
        if matches!(kv, KvLayout::Paged { .. }) && !self.states.is_empty() {
            inputs.extend([StepInput::BlockTable, StepInput::WriteMap]);
        }
        inputs
    }
}

impl ModelSchema {
    pub fn program(&self, p: Program) -> Option<&ProgramDecl> {
        self.programs.iter().find(|d| d.program == p)
    }

    /// The schema of a decoder with one KV pair per layer.
    pub fn decoder(layers: usize, kv_heads: usize, head_dim: usize) -> ModelSchema {
        let mut states = Vec::with_capacity(2 * layers);
        for layer in 0..layers {
            for role in [StateRole::Keys, StateRole::Values] {
                states.push(StateDecl {
                    name: kv_state_name(layer, role),
                    layer,
                    role,
                    heads: kv_heads,
                    head_dim,
                });
            }
        }
        ModelSchema {
            programs: vec![ProgramDecl {
                program: Program::Step,
                step_inputs: vec![StepInput::Tokens, StepInput::Positions],
                states,
            }],
            request_inputs: Vec::new(),
        }
    }

    /// The schema of an encoder (stateless, padded rows).
    pub fn encoder(token_types: bool) -> ModelSchema {
        let mut step_inputs = vec![
            StepInput::Tokens,
            StepInput::Positions,
            StepInput::TokenMask,
        ];
        if token_types {
            step_inputs.push(StepInput::TokenTypes);
        }
        ModelSchema {
            programs: vec![ProgramDecl {
                program: Program::Encode,
                step_inputs,
                states: Vec::new(),
            }],
            request_inputs: Vec::new(),
        }
    }
}

/// The state name of a layer's keys or values: `kv.l3.k`.
pub fn kv_state_name(layer: usize, role: StateRole) -> String {
    match role {
        StateRole::Keys => format!("kv.l{layer}.k"),
        StateRole::Values => format!("kv.l{layer}.v"),
    }
}
