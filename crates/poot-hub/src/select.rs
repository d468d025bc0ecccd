//! Which files of a repository make the checkpoint: a safetensors folder, or one GGUF chosen by
//! its quantization name.

use poot_load::safetensors::{SHARD_INDEX_FILE, ShardIndex};
use poot_load::{CONFIG_FILE, SAFETENSORS_FILE, SIDE_FILES};

use crate::{HubError, Listing};

/// The quantization taken when a repository has several GGUFs and none is named (llama.cpp's
/// default for `-hf`).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// What to fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// A Hugging Face checkpoint folder: the side files the loader reads that the repository
    /// has (`config.json`, tokenizer, chat template, ...), and its weights.
    Safetensors {
        side_files: Vec<String>,
        weights: Weights,
    },
    /// A GGUF: its parts in order (one for an unsplit file), and the quantization its name
    /// shows.
    Gguf { parts: Vec<String>, quant: String },
}

/// A safetensors checkpoint's weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Weights {
    /// `model.safetensors`.
    Single(String),
    /// `model.safetensors.index.json`; the shards it names are fetched once it is read.
    Sharded { index: String },
}

/// The files of `listing` that make the checkpoint `quant` asks for: with no quantization, the
/// safetensors checkpoint if the repository has one, else its GGUF (the only one, or the
/// [`DEFAULT_QUANT`] one); with one, the GGUF of that quantization.
pub fn select(repo: &str, listing: &Listing, quant: Option<&str>) -> Result<Selection, HubError> {
    let has = |name: &str| listing.get(name).is_some();
    if quant.is_none() && has(CONFIG_FILE) {
        let weights = if has(SHARD_INDEX_FILE) {
            Some(Weights::Sharded {
                index: SHARD_INDEX_FILE.to_owned(),
            })
        } else if has(SAFETENSORS_FILE) {
            Some(Weights::Single(SAFETENSORS_FILE.to_owned()))
        } else {
            None
        };
        if let Some(weights) = weights {
            let side_files = SIDE_FILES
                .iter()
                .filter(|f| has(f) && **f != SHARD_INDEX_FILE)
                .map(|f| (*f).to_owned())
                .collect();
            return Ok(Selection::Safetensors {
                side_files,
                weights,
            });
        }
    }
    let groups = gguf_groups(repo, listing)?;
    if groups.is_empty() && quant.is_none() {
        return Err(HubError::NoCheckpoint {
            repo: repo.to_owned(),
        });
    }
    let labels = || -> Vec<String> {
        let mut l: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
        l.sort();
        l.dedup();
        l
    };
    let chosen: Vec<&GgufGroup> = match quant {
        Some(q) => {
            let exact: Vec<&GgufGroup> = groups
                .iter()
                .filter(|g| g.label.eq_ignore_ascii_case(q))
                .collect();
            if exact.is_empty() {
                groups.iter().filter(|g| names_quant(&g.stem, q)).collect()
            } else {
                exact
            }
        }
        None if groups.len() == 1 => groups.iter().collect(),
        None => {
            let default: Vec<&GgufGroup> = groups
                .iter()
                .filter(|g| g.label.eq_ignore_ascii_case(DEFAULT_QUANT))
                .collect();
            if default.is_empty() {
                return Err(HubError::QuantNeeded {
                    repo: repo.to_owned(),
                    available: labels(),
                });
            }
            default
        }
    };
    let quant_text = quant.unwrap_or(DEFAULT_QUANT);
    match chosen.as_slice() {
        [] => Err(HubError::NoSuchQuant {
            repo: repo.to_owned(),
            quant: quant_text.to_owned(),
            available: labels(),
        }),
        [one] => Ok(Selection::Gguf {
            parts: one.parts.clone(),
            quant: one.label.clone(),
        }),
        many => Err(HubError::AmbiguousQuant {
            repo: repo.to_owned(),
            quant: quant_text.to_owned(),
            candidates: many
                .iter()
                .filter_map(|g| g.parts.first().cloned())
                .collect(),
        }),
    }
}

/// The shards `index` (the bytes of `model.safetensors.index.json`) names, each checked to be
/// in the listing.
pub fn shards(repo: &str, listing: &Listing, index: &[u8]) -> Result<Vec<String>, HubError> {
    let parsed = ShardIndex::parse(index).map_err(|source| HubError::ShardIndex {
        repo: repo.to_owned(),
        file: SHARD_INDEX_FILE.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for shard in parsed.shards() {
        if listing.get(shard).is_none() {
            return Err(HubError::MissingShard {
                repo: repo.to_owned(),
                shard: shard.to_owned(),
            });
        }
        out.push(shard.to_owned());
    }
    Ok(out)
}

/// One GGUF model of a repository: a single file, or the parts of a split one.
struct GgufGroup {
    /// The path without `.gguf` and without a split suffix.
    stem: String,
    parts: Vec<String>,
    /// The quantization the name ends with (`Q4_K_M` in `Model-Q4_K_M.gguf`).
    label: String,
}

/// The GGUF models of `listing`, multimodal projectors (`mmproj`) left out.
fn gguf_groups(repo: &str, listing: &Listing) -> Result<Vec<GgufGroup>, HubError> {
    // (stem, part index, part count, file name)
    let mut found: Vec<(String, usize, usize, String)> = Vec::new();
    for f in &listing.files {
        let lower = f.name.to_ascii_lowercase();
        if !lower.ends_with(".gguf") || lower.contains("mmproj") {
            continue;
        }
        let stem = &f.name[..f.name.len() - ".gguf".len()];
        let (stem, index, count) = split_suffix(stem).unwrap_or((stem, 1, 1));
        found.push((stem.to_owned(), index, count, f.name.clone()));
    }
    found.sort();
    let mut groups: Vec<GgufGroup> = Vec::new();
    let mut i = 0;
    while let Some((stem, _, count, _)) = found.get(i) {
        let members: Vec<&(String, usize, usize, String)> = found[i..]
            .iter()
            .take_while(|m| &m.0 == stem && m.2 == *count)
            .collect();
        i += members.len();
        let complete =
            members.len() == *count && members.iter().enumerate().all(|(k, m)| m.1 == k + 1);
        if !complete {
            return Err(HubError::IncompleteSplit {
                repo: repo.to_owned(),
                file: members.first().map(|m| m.3.clone()).unwrap_or_default(),
                found: members.len(),
                count: *count,
            });
        }
        groups.push(GgufGroup {
            label: label(stem),
            stem: stem.clone(),
            parts: members.iter().map(|m| m.3.clone()).collect(),
        });
    }
    Ok(groups)
}

/// `(stem, index, count)` of `stem-00002-of-00005`.
fn split_suffix(stem: &str) -> Option<(&str, usize, usize)> {
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (base, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) {
        return None;
    }
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    (index >= 1 && index <= count).then_some((base, index, count))
}

/// The last `-` or `.` separated part of the file name.
fn label(stem: &str) -> String {
    let file = stem.rsplit('/').next().unwrap_or(stem);
    file.rsplit(['-', '.']).next().unwrap_or(file).to_owned()
}

/// Whether the file name of `stem` names `quant` as a whole word: after its start or a `-`,
/// `.` or `_`, before its end or a `-` or `.` (so `Q4_K` does not name `Q4_K_M`, nor `Q4_XS`
/// `IQ4_XS`).
fn names_quant(stem: &str, quant: &str) -> bool {
    let file = stem.rsplit('/').next().unwrap_or(stem).to_ascii_uppercase();
    let quant = quant.to_ascii_uppercase();
    file.match_indices(&quant).any(|(at, m)| {
        let before = file[..at].chars().next_back();
        let after = file[at + m.len()..].chars().next();
        before.is_none_or(|c| matches!(c, '-' | '.' | '_'))
            && after.is_none_or(|c| matches!(c, '-' | '.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ListedFile;

    fn listing(names: &[&str]) -> Listing {
        Listing {
            commit: "0".repeat(40),
            files: names
                .iter()
                .map(|n| ListedFile {
                    name: (*n).to_owned(),
                    size_bytes: Some(1),
                    sha256: None,
                })
                .collect(),
        }
    }

    fn gguf(names: &[&str], quant: Option<&str>) -> Result<Vec<String>, HubError> {
        match select("org/m", &listing(names), quant)? {
            Selection::Gguf { parts, .. } => Ok(parts),
            other => panic!("{other:?}"),
        }
    }

    const QUANTS: &[&str] = &[
        "README.md",
        "Model-IQ4_XS.gguf",
        "Model-Q4_K_M.gguf",
        "Model-Q4_K_S.gguf",
        "Model-Q8_0.gguf",
        "mmproj-Model-f16.gguf",
        "Q6_K/Model-Q6_K-00001-of-00002.gguf",
        "Q6_K/Model-Q6_K-00002-of-00002.gguf",
    ];

    #[test]
    fn a_gguf_is_chosen_by_its_quantization_in_any_case() {
        assert_eq!(gguf(QUANTS, Some("q8_0")).unwrap(), ["Model-Q8_0.gguf"]);
        assert_eq!(gguf(QUANTS, Some("Q4_K_M")).unwrap(), ["Model-Q4_K_M.gguf"]);
        assert_eq!(gguf(QUANTS, Some("iq4_xs")).unwrap(), ["Model-IQ4_XS.gguf"]);
        assert_eq!(
            gguf(QUANTS, Some("q6_k")).unwrap(),
            [
                "Q6_K/Model-Q6_K-00001-of-00002.gguf",
                "Q6_K/Model-Q6_K-00002-of-00002.gguf"
            ]
        );
        // The default, as llama.cpp's.
        assert_eq!(gguf(QUANTS, None).unwrap(), ["Model-Q4_K_M.gguf"]);
        assert_eq!(
            gguf(&["tinyllama.Q2_K.gguf"], None).unwrap(),
            ["tinyllama.Q2_K.gguf"]
        );
        assert_eq!(
            gguf(&["m-Q4_K_M-imat.gguf", "m-Q8_0-imat.gguf"], Some("Q8_0")).unwrap(),
            ["m-Q8_0-imat.gguf"]
        );
    }

    #[test]
    fn a_missing_or_ambiguous_quantization_names_the_available_ones() {
        match gguf(QUANTS, Some("Q5_K_M")) {
            Err(HubError::NoSuchQuant { available, .. }) => {
                assert_eq!(available, ["IQ4_XS", "Q4_K_M", "Q4_K_S", "Q6_K", "Q8_0"])
            }
            other => panic!("{other:?}"),
        }
        // Q4_K names neither Q4_K_M nor Q4_K_S, and Q4_XS not IQ4_XS.
        assert!(matches!(
            gguf(QUANTS, Some("Q4_K")),
            Err(HubError::NoSuchQuant { .. })
        ));
        assert!(matches!(
            gguf(QUANTS, Some("Q4_XS")),
            Err(HubError::NoSuchQuant { .. })
        ));
        match gguf(&["a/M-Q8_0.gguf", "b/M-Q8_0.gguf"], Some("q8_0")) {
            Err(HubError::AmbiguousQuant { candidates, .. }) => {
                assert_eq!(candidates, ["a/M-Q8_0.gguf", "b/M-Q8_0.gguf"])
            }
            other => panic!("{other:?}"),
        }
        match gguf(&["M-Q8_0.gguf", "M-F16.gguf"], None) {
            Err(HubError::QuantNeeded { available, .. }) => assert_eq!(available, ["F16", "Q8_0"]),
            other => panic!("{other:?}"),
        }
        let err = gguf(&["config.json", "model.safetensors"], Some("Q8_0")).unwrap_err();
        assert!(err.to_string().contains("has no GGUF files"), "{err}");
        match gguf(&["M-00001-of-00003.gguf", "M-00003-of-00003.gguf"], None) {
            Err(HubError::IncompleteSplit { found, count, .. }) => {
                assert_eq!((found, count), (2, 3))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            select("org/m", &listing(&["README.md", "config.json"]), None),
            Err(HubError::NoCheckpoint { .. })
        ));
    }

    #[test]
    fn a_safetensors_repository_takes_its_side_files_and_weights() {
        let l = listing(&[
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors",
            "pytorch_model.bin",
            "1_Pooling/config.json",
            "Model-Q8_0.gguf",
        ]);
        assert_eq!(
            select("org/m", &l, None).unwrap(),
            Selection::Safetensors {
                side_files: vec![
                    "config.json".into(),
                    "tokenizer.json".into(),
                    "tokenizer_config.json".into(),
                    "1_Pooling/config.json".into()
                ],
                weights: Weights::Single("model.safetensors".into()),
            }
        );
        // A quantization asks for the GGUF beside it.
        assert!(matches!(
            select("org/m", &l, Some("q8_0")),
            Ok(Selection::Gguf { .. })
        ));
        let l = listing(&[
            "config.json",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]);
        let index = br#"{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}"#;
        assert_eq!(
            shards("org/m", &l, index).unwrap(),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
        let index = br#"{"weight_map": {"a": "model-00003-of-00003.safetensors"}}"#;
        assert!(matches!(
            shards("org/m", &l, index),
            Err(HubError::MissingShard { .. })
        ));
    }
}
