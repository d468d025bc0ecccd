//! What `poot embed` and `poot rerank` share: the input lengths an encoder is prepared for, and
//! opening the backend and loading the encoder with the same progress lines.

use std::path::Path;
use std::time::Instant;

use poot_executor::Executor;
use poot_llm::{BackendChoice, EncoderError, open_executor};

use crate::error::CliError;
use crate::progress::{Progress, Reporting};
use crate::status::Status;

/// Inputs encoded per device step (the entries are prepared for this many rows).
pub const MAX_ROWS: usize = 16;
/// The shortest and longest prepared lengths (powers of two between).
pub const SHORTEST_BUCKET: usize = 16;
pub const LONGEST_BUCKET: usize = 512;

/// The prepared length for inputs of at most `longest` tokens (a power of two between the
/// buckets, at most `cap`), and how many power-of-two lengths up to it are prepared.
pub fn prepared_lengths(longest: usize, cap: usize) -> (usize, usize) {
    let prepared = longest
        .next_power_of_two()
        .clamp(SHORTEST_BUCKET, LONGEST_BUCKET)
        .min(cap.max(SHORTEST_BUCKET));
    (prepared, (prepared / SHORTEST_BUCKET).ilog2() as usize + 1)
}

/// An encoder loaded on an opened backend.
pub struct Loaded<E> {
    pub encoder: E,
    /// The backend's and the device's names, for the JSON output.
    pub backend: String,
    pub device: String,
}

/// Opens `backend` and loads the encoder at `path` through `load` (given the executor, which
/// reports compiling `buckets` lengths as progress), saying what each took.
pub fn open_and_load<E>(
    backend: BackendChoice,
    path: &Path,
    buckets: usize,
    status: &Status,
    load: impl FnOnce(Box<dyn Executor>) -> Result<E, EncoderError>,
) -> Result<Loaded<E>, CliError> {
    let started = Instant::now();
    let opened = open_executor(backend)?;
    status.line(format!(
        "backend {} on {} (opened in {:.1} s)",
        opened.backend,
        opened.device_name,
        started.elapsed().as_secs_f64()
    ));
    status.line(format!("loading {}", path.display()));
    let progress = Progress::new(status);
    progress.spinner(format!("reading {}", path.display()));
    let (backend, device) = (opened.backend.to_string(), opened.device_name);
    let executor = Box::new(Reporting::new(opened.executor, progress.clone(), buckets));
    let encoder = load(executor)?;
    progress.clear();
    Ok(Loaded {
        encoder,
        backend,
        device,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepared_lengths_are_powers_of_two_within_the_buckets_and_the_cap() {
        assert_eq!(prepared_lengths(3, 512), (16, 1));
        assert_eq!(prepared_lengths(100, 512), (128, 4));
        assert_eq!(prepared_lengths(100, 64), (64, 3));
        assert_eq!(prepared_lengths(5000, 512), (512, 6));
        assert_eq!(prepared_lengths(5000, 8), (16, 1));
    }
}
