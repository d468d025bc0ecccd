//! Rotary embedding tables: frequencies from the config (with its scaling), angles per absolute
//! position, computed once at build time and bound as constants.

use crate::config::{ConfigReader, Key, key};
use crate::error::ModelError;
use crate::limits::POSITIONS;

/// How a config stretches the rotary frequencies for a longer context.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (equivalently, frequencies).
    Linear {
        factor: f32,
    },
    /// Llama 3's piecewise frequency scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_positions: f32,
    },
    /// YaRN: interpolate low frequencies, extrapolate high ones, scale the tables.
    Yarn {
        factor: f32,
        original_max_positions: f32,
        beta_fast: f32,
        beta_slow: f32,
        attention_factor: f32,
        /// Round the correction range outward to whole features (transformers' `truncate`,
        /// true unless stated; gpt-oss states false).
        truncate: bool,
    },
    /// LongRoPE (Phi-3) within its original context: each frequency divided by its short
    /// factor, the tables scaled by `attention_factor`. Its long factors apply only past
    /// `original_max_positions`, which a step may not reach (see [`RopeScaling::max_positions`]).
    LongRope {
        short_factors: std::sync::Arc<[f32]>,
        original_max_positions: usize,
        attention_factor: f32,
    },
}

/// A rotary embedding over the first `dims` features of each head.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    pub dims: usize,
    pub scaling: RopeScaling,
}

impl RopeConfig {
    pub fn plain(theta: f32, dims: usize) -> RopeConfig {
        RopeConfig {
            theta,
            dims,
            scaling: RopeScaling::None,
        }
    }

    /// The inverse frequencies, computed in f32 as Hugging Face does
    /// (`1 / theta^(2i / dims)`), then scaled.
    pub fn inv_freq(&self) -> Vec<f32> {
        let d = self.dims as f32;
        let base: Vec<f32> = (0..self.dims / 2)
            .map(|i| 1.0 / self.theta.powf((2 * i) as f32 / d))
            .collect();
        match self.scaling.clone() {
            RopeScaling::None => base,
            // As transformers forms it: `1 / (factor * theta^(2i / dims))`.
            RopeScaling::LongRope { short_factors, .. } => (0..self.dims / 2)
                .map(|i| {
                    let factor = short_factors.get(i).copied().unwrap_or(1.0);
                    1.0 / (factor * self.theta.powf((2 * i) as f32 / d))
                })
                .collect(),
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_positions,
            } => {
                let low_wavelen = original_max_positions / low_freq_factor;
                let high_wavelen = original_max_positions / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_positions / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn {
                factor,
                original_max_positions,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let correction = |rotations: f32| {
                    (d * (original_max_positions / (rotations * 2.0 * std::f32::consts::PI)).ln())
                        / (2.0 * self.theta.ln())
                };
                let (low, high) = (correction(beta_fast), correction(beta_slow));
                let (low, high) = match truncate {
                    true => (low.floor(), high.ceil()),
                    false => (low, high),
                };
                let (low, high) = (low.max(0.0), high.min(d - 1.0));
                let high = if low == high { high + 0.001 } else { high };
                (0..self.dims / 2)
                    .map(|i| {
                        let pos_freq = self.theta.powf((2 * i) as f32 / d);
                        let extrapolation = 1.0 / pos_freq;
                        let interpolation = 1.0 / (factor * pos_freq);
                        let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation_weight = 1.0 - ramp;
                        interpolation * (1.0 - extrapolation_weight)
                            + extrapolation * extrapolation_weight
                    })
                    .collect()
            }
        }
    }

    /// The factor the cos/sin tables are multiplied by (YaRN's attention scaling; 1 otherwise).
    pub fn table_scale(&self) -> f32 {
        match self.scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            }
            | RopeScaling::LongRope {
                attention_factor, ..
            } => attention_factor,
            RopeScaling::None | RopeScaling::Linear { .. } | RopeScaling::Llama3 { .. } => 1.0,
        }
    }

    /// `(cos, sin)` tables `[positions, dims / 2]`, row-major. The angle is the f32 product of
    /// position and frequency (as Hugging Face forms it); cos and sin are taken in f64 and rounded.
    pub fn tables(&self, positions: usize) -> (Vec<f32>, Vec<f32>) {
        (self.table(positions, false), self.table(positions, true))
    }

    /// The cos table (the sin table when `sin`) of [`RopeConfig::tables`]. The caller bounds
    /// `positions` (see [`crate::table::ComputedTable::rope`]).
    pub fn table(&self, positions: usize, sin: bool) -> Vec<f32> {
        let inv = self.inv_freq();
        let scale = self.table_scale();
        let mut out = Vec::with_capacity(positions.saturating_mul(inv.len()));
        for p in 0..positions {
            for &f in &inv {
                let angle = (p as f32 * f) as f64;
                let v = if sin { angle.sin() } else { angle.cos() };
                out.push((v as f32) * scale);
            }
        }
        out
    }

    /// Reads the scaling a config asks for: Hugging Face's `rope_scaling` (or `rope_parameters`)
    /// object, or GGUF's `rope.scaling.*` keys. A kind the engine does not implement is refused.
    /// `dims` is the rotary feature count (LongRoPE gives one factor per pair of them).
    pub fn read_scaling(cfg: &ConfigReader, dims: usize) -> Result<RopeScaling, ModelError> {
        let scaling = Self::read_scaling_values(cfg, dims)?;
        scaling.check()?;
        Ok(scaling)
    }

    fn read_scaling_values(cfg: &ConfigReader, dims: usize) -> Result<RopeScaling, ModelError> {
        const GGUF_TYPE: Key = key("", "rope.scaling.type");
        const GGUF_FACTOR: Key = key("", "rope.scaling.factor");
        const GGUF_ORIG: Key = key("", "rope.scaling.original_context_length");
        if let Some(kind) = cfg.opt_str(GGUF_TYPE)? {
            return match kind {
                "none" => Ok(RopeScaling::None),
                "linear" => Ok(RopeScaling::Linear {
                    factor: cfg.f32(GGUF_FACTOR)?,
                }),
                "yarn" => {
                    let factor = cfg.f32(GGUF_FACTOR)?;
                    Ok(RopeScaling::Yarn {
                        factor,
                        original_max_positions: cfg.usize_at_most(GGUF_ORIG, POSITIONS)? as f32,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                        attention_factor: yarn_mscale(factor),
                        truncate: true,
                    })
                }
                other => Err(cfg.unsupported(GGUF_TYPE, other, "none, linear, yarn")),
            };
        }
        let obj = match cfg.hf("rope_scaling").or_else(|| cfg.hf("rope_parameters")) {
            Some(v) if v.is_object() => v,
            _ => return Ok(RopeScaling::None),
        };
        let num = |k: &str| obj.get(k).and_then(|v| v.as_f64()).map(|f| f as f32);
        let need = |k: &'static str| {
            num(k).ok_or(ModelError::MissingKey {
                key: format!("rope_scaling.{k}"),
            })
        };
        let kind = obj
            .get("rope_type")
            .or_else(|| obj.get("type"))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        match kind {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear {
                factor: need("factor")?,
            }),
            "llama3" => Ok(RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_positions: need("original_max_position_embeddings")?,
            }),
            "yarn" => {
                let factor = need("factor")?;
                let original = match num("original_max_position_embeddings") {
                    Some(o) => o,
                    None => {
                        cfg.usize_at_most(key("max_position_embeddings", ""), POSITIONS)? as f32
                            / factor
                    }
                };
                let attention_factor = match num("attention_factor") {
                    Some(a) => a,
                    None => match (num("mscale"), num("mscale_all_dim")) {
                        (Some(m), Some(all)) => {
                            yarn_mscale_with(factor, m) / yarn_mscale_with(factor, all)
                        }
                        _ => yarn_mscale(factor),
                    },
                };
                let truncate = match obj.get("truncate") {
                    None => true,
                    Some(v) if v.is_null() => true,
                    Some(v) => v.as_bool().ok_or(ModelError::KeyType {
                        key: "rope_scaling.truncate".into(),
                        expected: "a boolean",
                    })?,
                };
                Ok(RopeScaling::Yarn {
                    factor,
                    original_max_positions: original,
                    beta_fast: num("beta_fast").unwrap_or(32.0),
                    beta_slow: num("beta_slow").unwrap_or(1.0),
                    attention_factor,
                    truncate,
                })
            }
            "longrope" => {
                let short_key = "rope_scaling.short_factor";
                let bad = || ModelError::KeyType {
                    key: short_key.into(),
                    expected: "a list of numbers",
                };
                let short_factors = obj
                    .get("short_factor")
                    .ok_or(ModelError::MissingKey {
                        key: short_key.into(),
                    })?
                    .as_array()
                    .ok_or_else(bad)?
                    .iter()
                    .map(|f| f.as_f64().map(|f| f as f32))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(bad)?;
                if short_factors.len() != dims / 2 {
                    return Err(ModelError::OutOfRange {
                        key: short_key.into(),
                        value: format!("{} factors", short_factors.len()),
                        expected: "one factor per pair of rotary features",
                    });
                }
                if let Some(bad) = short_factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(ModelError::OutOfRange {
                        key: short_key.into(),
                        value: bad.to_string(),
                        expected: "finite factors > 0",
                    });
                }
                // Phi-3 states the original context beside `max_position_embeddings`.
                let orig_key = key("original_max_position_embeddings", "");
                let original = match num("original_max_position_embeddings") {
                    Some(o) if o.is_finite() && o >= 1.0 && o <= POSITIONS.max as f32 => o as usize,
                    Some(o) => return Err(cfg.out_of_range(orig_key, o, "a positive context")),
                    None => cfg.usize_at_most(orig_key, POSITIONS)?,
                };
                if original == 0 {
                    return Err(cfg.out_of_range(orig_key, original, "a positive context"));
                }
                let max = cfg.usize_at_most(key("max_position_embeddings", ""), POSITIONS)?;
                let factor = num("factor").unwrap_or(max as f32 / original as f32);
                let attention_factor = match num("attention_factor") {
                    Some(a) => a,
                    None if factor <= 1.0 => 1.0,
                    None => {
                        let (f, o) = (f64::from(factor), original as f64);
                        (1.0 + f.ln() / o.ln()).sqrt() as f32
                    }
                };
                Ok(RopeScaling::LongRope {
                    short_factors: short_factors.into(),
                    original_max_positions: original,
                    attention_factor,
                })
            }
            other => Err(ModelError::Unsupported {
                key: "rope_scaling.rope_type".to_string(),
                value: other.to_string(),
                supported: "default, linear, llama3, yarn, longrope",
            }),
        }
    }
}

impl RopeScaling {
    /// Refuses parameters the frequency formulas cannot use: a factor or context that is not
    /// finite and positive, equal Llama 3 frequency factors (a division by their difference),
    /// non-finite YaRN betas or attention factor.
    fn check(&self) -> Result<(), ModelError> {
        let positive = |name: &'static str, v: f32| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ModelError::OutOfRange {
                    key: format!("rope_scaling.{name}"),
                    value: v.to_string(),
                    expected: "a finite value > 0",
                })
            }
        };
        match self.clone() {
            RopeScaling::None => Ok(()),
            RopeScaling::Linear { factor } => positive("factor", factor),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_positions,
            } => {
                positive("factor", factor)?;
                positive("low_freq_factor", low_freq_factor)?;
                positive("high_freq_factor", high_freq_factor)?;
                positive("original_max_position_embeddings", original_max_positions)?;
                if low_freq_factor == high_freq_factor {
                    return Err(ModelError::OutOfRange {
                        key: "rope_scaling.high_freq_factor".into(),
                        value: high_freq_factor.to_string(),
                        expected: "a value other than low_freq_factor",
                    });
                }
                Ok(())
            }
            RopeScaling::Yarn {
                factor,
                original_max_positions,
                beta_fast,
                beta_slow,
                attention_factor,
                ..
            } => {
                positive("factor", factor)?;
                positive("original_max_position_embeddings", original_max_positions)?;
                positive("beta_fast", beta_fast)?;
                positive("beta_slow", beta_slow)?;
                positive("attention_factor", attention_factor)
            }
            RopeScaling::LongRope {
                attention_factor, ..
            } => positive("attention_factor", attention_factor),
        }
    }

    /// The most positions a step may hold under this scaling: LongRoPE's original context
    /// (past it the long factors would apply, which are not implemented), else no limit.
    pub fn max_positions(&self) -> Option<usize> {
        match self {
            RopeScaling::LongRope {
                original_max_positions,
                ..
            } => Some(*original_max_positions),
            RopeScaling::None
            | RopeScaling::Linear { .. }
            | RopeScaling::Llama3 { .. }
            | RopeScaling::Yarn { .. } => None,
        }
    }
}

fn yarn_mscale(factor: f32) -> f32 {
    yarn_mscale_with(factor, 1.0)
}

fn yarn_mscale_with(factor: f32, mscale: f32) -> f32 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_frequencies_follow_the_formula() {
        let r = RopeConfig::plain(10000.0, 8);
        let inv = r.inv_freq();
        for (i, f) in inv.iter().enumerate() {
            let want = 1.0 / 10000f64.powf(2.0 * i as f64 / 8.0);
            assert!(
                ((*f as f64) - want).abs() <= want * 1e-6,
                "{i}: {f} vs {want}"
            );
        }
        let (cos, sin) = r.tables(3);
        assert_eq!(cos.len(), 12);
        assert_eq!(cos[0], 1.0);
        assert_eq!(sin[0], 0.0);
        assert!((cos[4] as f64 - 1f64.cos()).abs() < 1e-7);
    }

    #[test]
    fn llama3_scaling_keeps_high_and_divides_low_frequencies() {
        let r = RopeConfig {
            theta: 500000.0,
            dims: 128,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_positions: 8192.0,
            },
        };
        let base = RopeConfig::plain(500000.0, 128).inv_freq();
        let scaled = r.inv_freq();
        assert_eq!(scaled[0], base[0]);
        assert_eq!(*scaled.last().unwrap(), base.last().unwrap() / 8.0);
    }
}
