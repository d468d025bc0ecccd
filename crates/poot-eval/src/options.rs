//! How an evaluation runs.

/// Knobs for [`crate::eval`]. The default accumulates in f32 and keeps only the outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvalOptions {
    /// Reductions (`Reduce` sums) and contractions (`MatMul`, `IndexedMatMul`) accumulate in
    /// f64 and round once to f32 at the end. Otherwise they accumulate in f32.
    pub accumulate_f64: bool,
    /// Return every value of the graph in [`crate::Evaluation::env`], so a device-versus-oracle
    /// diff can find the first value that drifts. Otherwise intermediates are released as soon
    /// as their last reader has run.
    pub keep_env: bool,
}
