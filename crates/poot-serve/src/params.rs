//! Checks a request's sampling and stopping fields against OpenAI's ranges and turns them into
//! the driver's terms. A field out of range is a 400 naming it; the driver checks again.

use poot_llm::sampling::CANDIDATES;
use poot_llm::{Constraint, MAX_TOP_LOGPROBS, Penalties, Sampler};

use crate::error::ApiError;
use crate::openai::SamplingFields;

/// Most choices one request may ask for.
pub const MAX_N: usize = 64;
/// Most stop strings (OpenAI's limit).
pub const MAX_STOPS: usize = 4;

/// What every choice of one request shares.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub sampler: Sampler,
    pub n: usize,
    pub stops: Vec<String>,
    pub ignore_eos: bool,
    /// Speculate when the server does (the request's `speculative`, true by default).
    pub speculate: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// The LoRA adapter the request's `model` names (set by the route), `None` for the base.
    pub lora: Option<String>,
    /// Guided decoding: what every choice's output must match (checked by the route).
    pub guide: Option<Constraint>,
}

/// The fields both generation routes share. `vocab` bounds `logit_bias` token ids.
pub fn generation(f: &SamplingFields, vocab: usize) -> Result<Generation, ApiError> {
    let temperature = f.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(ApiError::invalid_value(
            "temperature",
            format!("temperature {temperature} is not in [0, 2]"),
        ));
    }
    let top_p = f.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid_value(
            "top_p",
            format!("top_p {top_p} is not in (0, 1]"),
        ));
    }
    // vLLM spells "no top-k" as -1, llama-server as 0.
    let top_k = match f.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => u32::try_from(k).unwrap_or(u32::MAX),
        k => {
            return Err(ApiError::invalid_value(
                "top_k",
                format!("top_k {k} must be -1, 0 (off) or positive"),
            ));
        }
    };
    // The device draws among at most CANDIDATES tokens; a larger top_k would be cut silently.
    if top_k as usize > CANDIDATES {
        return Err(ApiError::invalid_value(
            "top_k",
            format!("top_k {top_k} exceeds the {CANDIDATES} candidates the device draws from"),
        ));
    }
    let min_p = f.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::invalid_value(
            "min_p",
            format!("min_p {min_p} is not in [0, 1]"),
        ));
    }
    let n = f.n.unwrap_or(1);
    if !(1..=MAX_N as i64).contains(&n) {
        return Err(ApiError::invalid_value(
            "n",
            format!("n {n} is not in [1, {MAX_N}]"),
        ));
    }
    let penalty = |name: &str, v: Option<f32>| -> Result<f32, ApiError> {
        let v = v.unwrap_or(0.0);
        if !(v.is_finite() && (-2.0..=2.0).contains(&v)) {
            return Err(ApiError::invalid_value(
                name,
                format!("{name} {v} is not in [-2, 2]"),
            ));
        }
        Ok(v)
    };
    let presence = penalty("presence_penalty", f.presence_penalty)?;
    let frequency = penalty("frequency_penalty", f.frequency_penalty)?;
    let repetition = f.repetition_penalty.unwrap_or(1.0);
    if !(repetition.is_finite() && repetition > 0.0) {
        return Err(ApiError::invalid_value(
            "repetition_penalty",
            format!("repetition_penalty {repetition} must be finite and > 0"),
        ));
    }
    let mut logit_bias = Vec::new();
    for (key, &bias) in f.logit_bias.iter().flatten() {
        let id = key
            .parse::<u32>()
            .ok()
            .filter(|&id| (id as usize) < vocab)
            .ok_or_else(|| {
                ApiError::invalid_value(
                    "logit_bias",
                    format!("logit_bias key `{key}` is not a token id below {vocab}"),
                )
            })?;
        if !(bias.is_finite() && (-100.0..=100.0).contains(&bias)) {
            return Err(ApiError::invalid_value(
                "logit_bias",
                format!("logit_bias {bias} for token {id} is not in [-100, 100]"),
            ));
        }
        logit_bias.push((id, bias));
    }
    let stops = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stops.len() > MAX_STOPS {
        return Err(ApiError::invalid_value(
            "stop",
            format!("{} stop sequences (at most {MAX_STOPS})", stops.len()),
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid_value("stop", "a stop sequence is empty"));
    }
    let seed = match f.seed {
        Some(s) => s as u64,
        None => fresh_seed(),
    };
    let sampler = Sampler {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
        penalties: Penalties {
            repetition,
            presence,
            frequency,
        },
        logit_bias,
    };
    if f.stream_options.is_some() && !f.stream {
        return Err(ApiError::invalid_value(
            "stream_options",
            "stream_options is only allowed with stream: true",
        ));
    }
    Ok(Generation {
        sampler,
        n: n as usize,
        stops,
        ignore_eos: f.ignore_eos,
        speculate: f.speculative.unwrap_or(true),
        stream: f.stream,
        include_usage: f.stream_options.is_some_and(|o| o.include_usage),
        lora: None,
        guide: None,
    })
}

/// `max_tokens`: at least 1.
pub fn max_tokens(v: Option<i64>, param: &str) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(m) if m >= 1 => Ok(Some(usize::try_from(m).unwrap_or(usize::MAX))),
        Some(m) => Err(ApiError::invalid_value(
            param,
            format!("{param} {m} must be at least 1"),
        )),
    }
}

/// A log-probability alternatives count: 0 to [`MAX_TOP_LOGPROBS`].
pub fn top_logprobs(v: i64, param: &str) -> Result<usize, ApiError> {
    if (0..=MAX_TOP_LOGPROBS as i64).contains(&v) {
        Ok(v as usize)
    } else {
        Err(ApiError::invalid_value(
            param,
            format!("{param} {v} is not in [0, {MAX_TOP_LOGPROBS}]"),
        ))
    }
}

/// The sampler of choice `index` of a request: choice 0 keeps the request's seed, the others
/// draw from seeds derived from it, so `n` choices differ and a seed reproduces all of them.
pub fn choice_sampler(base: &Sampler, index: usize) -> Sampler {
    let mut s = base.clone();
    if index > 0 {
        s.seed = splitmix64(base.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
    s
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A fresh 64-bit value: the seed of a request that names none, and response ids.
pub fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    splitmix64(nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::OneOrMany;

    fn fields(json: &str) -> SamplingFields {
        serde_json::from_str(json).expect("test JSON is valid")
    }

    #[test]
    fn defaults_are_openai_defaults() {
        let g = generation(&fields("{}"), 100).expect("defaults are valid");
        assert_eq!(g.sampler.temperature, 1.0);
        assert_eq!(g.sampler.top_p, 1.0);
        assert_eq!(g.n, 1);
        assert!(g.sampler.penalties.is_none());
        assert!(!g.stream && !g.include_usage);
    }

    #[test]
    fn out_of_range_fields_name_the_param() {
        for (json, param) in [
            (r#"{"temperature": 2.5}"#, "temperature"),
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"top_k": 33}"#, "top_k"),
            (r#"{"top_k": 4294967296}"#, "top_k"),
            (r#"{"min_p": 1.5}"#, "min_p"),
            (r#"{"n": 0}"#, "n"),
            (r#"{"n": 1000}"#, "n"),
            (r#"{"presence_penalty": 3}"#, "presence_penalty"),
            (r#"{"frequency_penalty": -2.5}"#, "frequency_penalty"),
            (r#"{"repetition_penalty": 0}"#, "repetition_penalty"),
            (r#"{"logit_bias": {"100": 1}}"#, "logit_bias"),
            (r#"{"logit_bias": {"x": 1}}"#, "logit_bias"),
            (r#"{"logit_bias": {"3": 101}}"#, "logit_bias"),
            (r#"{"stop": ["a", "b", "c", "d", "e"]}"#, "stop"),
            (r#"{"stop": ""}"#, "stop"),
            (
                r#"{"stream_options": {"include_usage": true}}"#,
                "stream_options",
            ),
        ] {
            let e = generation(&fields(json), 100).expect_err(json);
            assert_eq!(e.status, 400, "{json}");
            assert_eq!(e.param.as_deref(), Some(param), "{json}");
        }
    }

    #[test]
    fn fields_map_to_the_sampler() {
        let f = SamplingFields {
            stop: Some(OneOrMany::One("END".into())),
            ..fields(
                r#"{"temperature": 0.5, "top_p": 0.9, "top_k": -1, "seed": -1, "n": 3,
                    "presence_penalty": 0.5, "repetition_penalty": 1.1, "logit_bias": {"7": -100},
                    "stream": true, "stream_options": {"include_usage": true}}"#,
            )
        };
        let g = generation(&f, 100).expect("valid");
        assert_eq!(g.sampler.temperature, 0.5);
        assert_eq!(g.sampler.top_k, 0);
        assert_eq!(g.sampler.seed, u64::MAX);
        assert_eq!(g.sampler.penalties.presence, 0.5);
        assert_eq!(g.sampler.penalties.repetition, 1.1);
        assert_eq!(g.sampler.logit_bias, vec![(7, -100.0)]);
        assert_eq!(g.stops, vec!["END".to_string()]);
        assert_eq!(g.n, 3);
        assert!(g.stream && g.include_usage);
    }

    #[test]
    fn choices_get_distinct_reproducible_seeds() {
        let base = Sampler::new(1.0, 0, 1.0, 42);
        let seeds: Vec<u64> = (0..4).map(|i| choice_sampler(&base, i).seed).collect();
        assert_eq!(seeds[0], 42);
        for i in 0..4 {
            for j in 0..i {
                assert_ne!(seeds[i], seeds[j]);
            }
        }
        assert_eq!(
            seeds,
            (0..4)
                .map(|i| choice_sampler(&base, i).seed)
                .collect::<Vec<_>>()
        );
    }
}
