//! Tables a family computes from its config instead of reading them from the checkpoint (rotary
//! cos and sin). A table is described when the model is built and computed on first read, so a
//! declared context far beyond the capacity in use costs nothing at load, and a model narrowed
//! to the positions in use ([`crate::Model::narrow_positions`]) computes only those rows.

use std::sync::{Arc, OnceLock};

use crate::components::RopeConfig;
use crate::error::ModelError;

/// What a table's values are.
#[derive(Clone, Debug, PartialEq)]
pub enum Formula {
    /// Values given as they are (a tensor-parallel rank's slice of a table, say).
    Values(Arc<[f32]>),
    /// `cos` (or `sin`) of each position's rotary angles, `[positions, dims / 2]`.
    Rope { rope: RopeConfig, sin: bool },
}

/// A `[rows, cols]` f32 table, computed once on first read and shared by every clone.
#[derive(Clone, Debug)]
pub struct ComputedTable {
    formula: Formula,
    rows: usize,
    cols: usize,
    values: Arc<OnceLock<Arc<[f32]>>>,
}

/// Two tables are equal when they describe the same values, computed or not.
impl PartialEq for ComputedTable {
    fn eq(&self, other: &ComputedTable) -> bool {
        self.formula == other.formula && self.rows == other.rows && self.cols == other.cols
    }
}

impl ComputedTable {
    /// The cos (or sin) table of `rope` over `positions`, refused (naming `role`) when its
    /// values could not be held in memory at all.
    pub fn rope(
        role: &str,
        rope: RopeConfig,
        sin: bool,
        positions: usize,
    ) -> Result<ComputedTable, ModelError> {
        let cols = rope.dims / 2;
        let too_large = || ModelError::TableTooLarge {
            role: role.to_string(),
            rows: positions,
            cols,
        };
        let bytes = positions
            .checked_mul(cols)
            .and_then(|n| n.checked_mul(size_of::<f32>()))
            .ok_or_else(too_large)?;
        if isize::try_from(bytes).is_err() {
            return Err(too_large());
        }
        Ok(ComputedTable {
            formula: Formula::Rope { rope, sin },
            rows: positions,
            cols,
            values: Arc::default(),
        })
    }

    /// A table of the given values (`rows * cols` of them).
    pub fn values(rows: usize, cols: usize, values: Arc<[f32]>) -> ComputedTable {
        ComputedTable {
            formula: Formula::Values(Arc::clone(&values)),
            rows,
            cols,
            values: Arc::new(OnceLock::from(values)),
        }
    }

    /// `[rows, cols]`.
    pub fn dims(&self) -> Vec<usize> {
        vec![self.rows, self.cols]
    }

    pub fn formula(&self) -> &Formula {
        &self.formula
    }

    /// The values, row-major, computed on the first call.
    pub fn data(&self) -> &[f32] {
        self.values.get_or_init(|| match &self.formula {
            Formula::Values(v) => Arc::clone(v),
            Formula::Rope { rope, sin } => Arc::from(rope.table(self.rows, *sin)),
        })
    }

    /// The first `rows` rows of this table (all of them when it has fewer), not yet computed
    /// unless this one was a table of given values.
    pub fn first_rows(&self, rows: usize) -> ComputedTable {
        let rows = rows.min(self.rows);
        match &self.formula {
            Formula::Rope { .. } => ComputedTable {
                formula: self.formula.clone(),
                rows,
                cols: self.cols,
                values: Arc::default(),
            },
            Formula::Values(v) => {
                let kept = v.get(..rows * self.cols).unwrap_or(v);
                ComputedTable::values(rows, self.cols, Arc::from(kept))
            }
        }
    }
}
