//! `org/name[:QUANT]`: a Hub repository named on the command line, with the GGUF quantization
//! to take from it.

/// A model repository on the Hub and, for a GGUF repository, the quantization asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoRef {
    /// `org/name`.
    pub repo: String,
    /// `Q4_K_M` in `org/name:Q4_K_M`, as written.
    pub quant: Option<String>,
}

impl RepoRef {
    /// `text` as a repository reference, or `None` when it does not have the shape of one
    /// (`org/name` with the Hub's characters, an optional `:QUANT`): then it is a path. A
    /// caller tries an existing path first; `./x/y`, `/x/y`, `~/x` and names ending in
    /// `.gguf` or `.safetensors` are never repositories.
    pub fn parse(text: &str) -> Option<RepoRef> {
        let (repo, quant) = match text.split_once(':') {
            Some((repo, quant)) => {
                let ok = !quant.is_empty()
                    && quant.len() <= 64
                    && quant
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !ok {
                    return None;
                }
                (repo, Some(quant.to_owned()))
            }
            None => (text, None),
        };
        let (org, name) = repo.split_once('/')?;
        let lower = name.to_ascii_lowercase();
        if !is_hub_name(org) || !is_hub_name(name) {
            return None;
        }
        if lower.ends_with(".gguf") || lower.ends_with(".safetensors") {
            return None;
        }
        Some(RepoRef {
            repo: repo.to_owned(),
            quant,
        })
    }
}

/// One part of a Hub repository id: letters, digits, `-`, `_` and `.`, at most 96, neither
/// starting nor ending with `-` or `.`, and no `--` or `..` (the rules `huggingface_hub`
/// validates).
fn is_hub_name(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 96
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !part.starts_with(['-', '.'])
        && !part.ends_with(['-', '.'])
        && !part.contains("--")
        && !part.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_ids_and_paths_are_told_apart() {
        let r = RepoRef::parse("HuggingFaceTB/SmolLM2-135M-Instruct").unwrap();
        assert_eq!(r.repo, "HuggingFaceTB/SmolLM2-135M-Instruct");
        assert_eq!(r.quant, None);
        let r = RepoRef::parse("bartowski/Llama-3.2-1B-Instruct-GGUF:q4_k_m");
        assert_eq!(
            r.map(|r| (r.repo, r.quant)),
            Some((
                "bartowski/Llama-3.2-1B-Instruct-GGUF".to_owned(),
                Some("q4_k_m".to_owned())
            ))
        );
        for path in [
            "/abs/model",
            "./rel/model",
            "../up/model",
            "~/models/x",
            "models/x.gguf",
            "dir/model.safetensors",
            "a/b/c",
            "noslash",
            "org/name:",
            "org/na me",
            "org/-name",
            "org/name.",
            "org/a--b",
            "org/name:Q4/K",
            "",
            "/",
        ] {
            assert_eq!(RepoRef::parse(path), None, "{path}");
        }
    }
}
