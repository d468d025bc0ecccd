//! The KV capacity and prefill chunk a driver is built with, from the flags, the model's
//! positions and (for one prompt) what the prompt needs.

use crate::error::CliError;

/// The default capacity cap: enough for a chat, small enough to compile and hold quickly.
pub const DEFAULT_CAPACITY: usize = 2048;
/// The smallest default capacity for one known prompt. Capacities for one prompt are powers of
/// two from here, so the kernels compiled for them (cached on disk) come in a few sizes.
pub const MIN_PROMPT_CAPACITY: usize = 256;
/// The largest default prefill chunk: each chunk reads every weight once, so a long prompt
/// prefills faster in few large chunks (measured on the H200 for 512 tokens: 1B Q4_0 3955 ->
/// 6903 tok/s, 8B Q4_0 825 -> 1190 tok/s from chunks of 64 to one of 512).
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// What the driver is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    pub capacity: usize,
    pub prefill_chunk: usize,
}

/// Sizes the driver. `need` is `(prompt tokens, max new)` when the prompt is known up front.
/// An explicit `--capacity` is kept as given and checked. The default is the smaller of
/// [`DEFAULT_CAPACITY`] and the model's positions; for one known prompt, the power of two (at
/// least [`MIN_PROMPT_CAPACITY`]) that holds `need`, if smaller, since steps walk the whole
/// capacity where the device cannot skip past the sequence's end (the CPU's decode attention);
/// either raised to fit `need`. An explicit
/// `--prefill-chunk` is kept as given; the default is at most [`DEFAULT_PREFILL_CHUNK`] and,
/// for a known prompt, the size that prefills it in the fewest steps (the driver runs whole
/// chunks, then the rest one token at a time).
pub fn size(
    capacity: Option<usize>,
    prefill_chunk: Option<usize>,
    max_positions: usize,
    need: Option<(usize, usize)>,
) -> Result<Sizing, CliError> {
    let needed = need.map_or(0, |(prompt, max_new)| prompt + max_new);
    let capacity = match capacity {
        Some(capacity) => {
            if capacity > max_positions {
                return Err(CliError::CapacityOverModel {
                    capacity,
                    max_positions,
                });
            }
            capacity
        }
        None => {
            let cap = DEFAULT_CAPACITY.min(max_positions);
            let fit = need.map_or(cap, |_| needed.next_power_of_two().max(MIN_PROMPT_CAPACITY));
            fit.min(cap).max(needed)
        }
    };
    if let Some((prompt, max_new)) = need {
        if needed > max_positions {
            return Err(CliError::PromptOverModel {
                prompt,
                max_new,
                max_positions,
            });
        }
        if needed > capacity {
            return Err(CliError::PromptOverCapacity {
                prompt,
                max_new,
                capacity,
            });
        }
    }
    let prefill_chunk = match prefill_chunk {
        Some(chunk) if chunk > capacity => {
            return Err(CliError::ChunkOverCapacity { chunk, capacity });
        }
        Some(chunk) => chunk,
        None => {
            let largest = DEFAULT_PREFILL_CHUNK.min(capacity);
            need.map_or(largest, |(prompt, _)| fewest_steps(prompt, largest))
        }
    };
    Ok(Sizing {
        capacity,
        prefill_chunk,
    })
}

/// The chunk of at most `largest` tokens that prefills `prompt` tokens in the fewest steps
/// (whole chunks, then one token per step); the larger chunk on a tie.
fn fewest_steps(prompt: usize, largest: usize) -> usize {
    (1..=largest.max(1))
        .rev()
        .min_by_key(|&chunk| prompt / chunk + prompt % chunk)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_capacity_is_capped_then_raised_to_fit_the_prompt() {
        let s = |cap, chunk, max, need| size(cap, chunk, max, need).ok();
        assert_eq!(
            s(None, None, 8192, Some((10, 128))),
            Some(Sizing {
                capacity: 256,
                prefill_chunk: 10
            })
        );
        assert_eq!(
            s(None, None, 8192, Some((400, 128))).map(|z| z.capacity),
            Some(1024)
        );
        assert_eq!(
            s(None, None, 8192, Some((1500, 128))).map(|z| z.capacity),
            Some(2048)
        );
        assert_eq!(
            s(None, None, 200, Some((10, 128))).map(|z| z.capacity),
            Some(200)
        );
        assert_eq!(
            s(None, Some(4), 8192, Some((10, 128))).map(|z| z.prefill_chunk),
            Some(4)
        );
        assert_eq!(s(None, None, 512, None).map(|z| z.capacity), Some(512));
        assert_eq!(
            s(None, None, 8192, Some((3000, 128))).map(|z| z.capacity),
            Some(3128)
        );
        assert_eq!(
            s(None, None, 32, None),
            Some(Sizing {
                capacity: 32,
                prefill_chunk: 32
            })
        );
    }

    #[test]
    fn the_default_chunk_prefills_in_the_fewest_steps() {
        assert_eq!(fewest_steps(5, 64), 5);
        assert_eq!(fewest_steps(64, 64), 64);
        assert_eq!(fewest_steps(100, 64), 50);
        assert_eq!(fewest_steps(129, 64), 64);
        assert_eq!(fewest_steps(33, 64), 33);
        assert_eq!(fewest_steps(0, 64), 64);
        assert_eq!(fewest_steps(7, 1), 1);
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        assert!(matches!(
            size(Some(64), None, 8192, Some((60, 8))),
            Err(CliError::PromptOverCapacity { .. })
        ));
        assert!(matches!(
            size(None, None, 100, Some((60, 50))),
            Err(CliError::PromptOverModel { .. })
        ));
        assert!(matches!(
            size(Some(9000), None, 8192, None),
            Err(CliError::CapacityOverModel { .. })
        ));
        assert!(matches!(
            size(Some(16), Some(32), 8192, None),
            Err(CliError::ChunkOverCapacity { .. })
        ));
    }
}
