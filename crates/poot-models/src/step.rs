//! What one traced step is: the program, its semantic shape, and the carried inputs it binds.

use std::fmt;

/// The programs a model may offer, named by the driver service that runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Program {
    /// Continue each row's carried state and return logits; prefill and decode are one program.
    Step,
    /// One stateless pass over whole rows, returning hidden states or scores.
    Encode,
    /// A multi-token-prediction layer over the hidden-state carry.
    Draft,
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Program::Step => "step",
            Program::Encode => "encode",
            Program::Draft => "draft",
        })
    }
}

/// How the KV cache is laid out on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvLayout {
    /// One `[heads, capacity, head_dim]` region per row.
    Contiguous,
    /// A shared pool of `blocks` blocks of `block_tokens` positions, addressed through the
    /// slot and write maps.
    Paged { block_tokens: usize, blocks: usize },
}

/// Which positions' logits a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogitsMode {
    /// Only each row's last new token (prefill and decode).
    Last,
    /// Every new token (verification windows, scoring).
    All,
}

/// The semantic shape of one step: `rows` sequences of `tokens` new tokens each, over a cache of
/// `capacity` positions. Built with [`StepShape::new`] and `with_*` setters so a new field never
/// breaks a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepShape {
    pub rows: usize,
    pub tokens: usize,
    pub capacity: usize,
    pub kv: KvLayout,
    pub logits: LogitsMode,
    /// Also return the final hidden state of every new token.
    pub hidden_carry: bool,
}

impl StepShape {
    pub fn new(rows: usize, tokens: usize, capacity: usize) -> StepShape {
        StepShape {
            rows,
            tokens,
            capacity,
            kv: KvLayout::Contiguous,
            logits: LogitsMode::Last,
            hidden_carry: false,
        }
    }

    pub fn with_kv(mut self, kv: KvLayout) -> StepShape {
        self.kv = kv;
        self
    }

    pub fn with_logits(mut self, logits: LogitsMode) -> StepShape {
        self.logits = logits;
        self
    }

    pub fn with_hidden_carry(mut self, carry: bool) -> StepShape {
        self.hidden_carry = carry;
        self
    }

    /// New tokens the whole step carries.
    pub fn total_tokens(&self) -> u64 {
        (self.rows as u64).saturating_mul(self.tokens as u64)
    }
}

/// One step to trace: the program, its shape, and the names of the carried request inputs it binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepSpec {
    pub program: Program,
    pub shape: StepShape,
    pub carried: Vec<String>,
}

impl StepSpec {
    pub fn new(program: Program, shape: StepShape) -> StepSpec {
        StepSpec {
            program,
            shape,
            carried: Vec::new(),
        }
    }

    /// A decoder step (prefill chunk or decode).
    pub fn step(shape: StepShape) -> StepSpec {
        StepSpec::new(Program::Step, shape)
    }

    /// An encoder pass over `rows` rows of `tokens` tokens.
    pub fn encode(rows: usize, tokens: usize) -> StepSpec {
        StepSpec::new(Program::Encode, StepShape::new(rows, tokens, tokens))
    }
}
