//! `poot embed`: sentence embeddings of the texts on the command line, with the pooling,
//! normalization and length limit the checkpoint's sentence-transformers files ask for.

use std::path::{Path, PathBuf};
use std::time::Instant;

use poot_llm::SentenceEncoder;
use serde_json::{Value as Json, json};

use crate::catalog::Purpose;
use crate::cli::EmbedArgs;
use crate::encoder_load::{self, LONGEST_BUCKET, MAX_ROWS};
use crate::error::CliError;
use crate::output;
use crate::resolve;
use crate::status::Status;

/// What the checkpoint's sentence-transformers files say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SentenceConfig {
    /// The pipeline ends with a Normalize module.
    normalize: bool,
    /// `max_seq_length`: longer texts are truncated to it.
    max_tokens: usize,
}

pub fn embed(args: EmbedArgs, status: Status) -> Result<(), CliError> {
    let resolved = resolve::model(&args.model, &args.revision, Purpose::Embed, &status)?;
    let path = resolved.path.clone();
    // A manifest that cannot be read fails before the backend opens.
    let options = crate::run::load_options(resolved.verify(args.verify.as_deref()))?;
    let config = sentence_config(&path)?;
    let normalize = args.normalize.unwrap_or(config.normalize);
    // Each WordPiece token covers at least one character, plus [CLS] and [SEP]: lengths up to
    // the longest text's are enough, and fewer entries compile faster.
    let longest = args
        .texts
        .iter()
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(0)
        + 2;
    let (prepared, buckets) = encoder_load::prepared_lengths(longest, config.max_tokens);
    let rows = args.texts.len().min(MAX_ROWS);
    let started = Instant::now();
    let loaded =
        encoder_load::open_and_load(args.backend.choice(), &path, buckets, &status, |exec| {
            SentenceEncoder::load_with(&path, exec, rows, prepared, &options)
        })?;
    let mut encoder = loaded.encoder;
    status.line(format!(
        "loaded {} and compiled lengths up to {prepared} for {rows} rows in {:.1} s",
        encoder.handle().config().family,
        started.elapsed().as_secs_f64()
    ));

    // The estimate above must hold: a text is never truncated below the model's limit.
    let text = encoder
        .handle()
        .text()
        .map_err(|e| CliError::Encoder(e.into()))?;
    for t in &args.texts {
        let n = text.encode(t)?.len();
        if n > prepared && prepared < config.max_tokens {
            return Err(CliError::SentenceConfig {
                path: path.clone(),
                reason: format!(
                    "a text of {} characters has {n} tokens, more than the {prepared} prepared",
                    t.chars().count()
                ),
            });
        }
    }

    let started = Instant::now();
    let mut vectors = Vec::with_capacity(args.texts.len());
    for chunk in args.texts.chunks(rows.max(1)) {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        vectors.extend(encoder.embed_with(&texts, normalize)?);
    }
    status.line(format!(
        "{} texts embedded in {:.0} ms{}",
        vectors.len(),
        started.elapsed().as_secs_f64() * 1e3,
        if normalize { ", L2-normalized" } else { "" }
    ));
    let dim = vectors.first().map_or(0, Vec::len);
    // A closed stdout (a pipe) ends the command quietly.
    let _ = if args.json {
        output::write_line(&json!({
            "model": path.display().to_string(),
            "backend": loaded.backend,
            "device": loaded.device,
            "dim": dim,
            "normalized": normalize,
            "embeddings": vectors,
        }))
    } else {
        vectors
            .iter()
            .try_for_each(|v| output::write_line(&json!(v)))
    };
    Ok(())
}

/// Reads `modules.json` (a Normalize module; the Pooling module must pool means) and
/// `sentence_bert_config.json` (`max_seq_length`). Missing files mean sentence-transformers'
/// defaults: mean pooling, no normalization, the model's own length.
fn sentence_config(dir: &Path) -> Result<SentenceConfig, CliError> {
    let mut config = SentenceConfig {
        normalize: false,
        max_tokens: LONGEST_BUCKET,
    };
    if !dir.is_dir() {
        return Ok(config);
    }
    if let Some(modules) = read_json(&dir.join("modules.json"))? {
        let list = modules.as_array().cloned().unwrap_or_default();
        for m in &list {
            let kind = m.get("type").and_then(Json::as_str).unwrap_or_default();
            if kind.ends_with(".Normalize") {
                config.normalize = true;
            }
            if kind.ends_with(".Pooling") {
                let sub = m.get("path").and_then(Json::as_str).unwrap_or_default();
                check_pooling(&dir.join(sub).join("config.json"))?;
            }
        }
    }
    if let Some(st) = read_json(&dir.join("sentence_bert_config.json"))?
        && let Some(n) = st.get("max_seq_length").and_then(Json::as_u64)
    {
        config.max_tokens = (n as usize).clamp(1, LONGEST_BUCKET);
    }
    Ok(config)
}

/// The encoder pools means over the tokens; refuse a checkpoint that pools otherwise.
fn check_pooling(path: &Path) -> Result<(), CliError> {
    let Some(pooling) = read_json(path)? else {
        return Ok(());
    };
    let flag = |k: &str| pooling.get(k).and_then(Json::as_bool).unwrap_or(false);
    let others = [
        "pooling_mode_cls_token",
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ];
    if !flag("pooling_mode_mean_tokens") || others.iter().any(|k| flag(k)) {
        return Err(CliError::SentenceConfig {
            path: path.to_owned(),
            reason: "poot embed pools token means only; this checkpoint asks for another pooling"
                .to_owned(),
        });
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Option<Json>, CliError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| CliError::SentenceConfig {
            path: PathBuf::from(path),
            reason: format!("not valid JSON: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentence_transformers_files_set_normalization_and_length() {
        let dir = std::env::temp_dir().join(format!("poot-embed-config-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1_Pooling")).ok();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).ok();
        assert_eq!(
            sentence_config(&dir).ok(),
            Some(SentenceConfig {
                normalize: false,
                max_tokens: 512
            })
        );
        write(
            "modules.json",
            r#"[{"type": "sentence_transformers.models.Transformer", "path": ""},
                {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},
                {"type": "sentence_transformers.models.Normalize", "path": "2_Normalize"}]"#,
        );
        write(
            "1_Pooling/config.json",
            r#"{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false}"#,
        );
        write("sentence_bert_config.json", r#"{"max_seq_length": 256}"#);
        assert_eq!(
            sentence_config(&dir).ok(),
            Some(SentenceConfig {
                normalize: true,
                max_tokens: 256
            })
        );
        write(
            "1_Pooling/config.json",
            r#"{"pooling_mode_mean_tokens": false, "pooling_mode_cls_token": true}"#,
        );
        assert!(matches!(
            sentence_config(&dir),
            Err(CliError::SentenceConfig { .. })
        ));
        write("modules.json", "[not json");
        assert!(matches!(
            sentence_config(&dir),
            Err(CliError::SentenceConfig { .. })
        ));
        std::fs::remove_dir_all(&dir).ok();
    }
}
