//! Where the Hub is, who asks, and where its files are kept: read from the environment variables
//! `huggingface_hub` reads, so both share one cache and one token.

use std::path::{Path, PathBuf};

use crate::HubError;

/// The Hub's public endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How to reach the Hub and where its cache is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, else `https://huggingface.co` (no trailing `/`).
    pub endpoint: String,
    /// `HF_TOKEN`, else the file `HF_TOKEN_PATH` or `$HF_HOME/token` (what
    /// `huggingface-cli login` writes).
    pub token: Option<String>,
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, `HF_HOME` defaulting to
    /// `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`.
    pub cache_dir: PathBuf,
    /// `HF_HUB_OFFLINE` set to `1`, `true`, `yes` or `on`: only the cache is read.
    pub offline: bool,
}

impl HubSettings {
    /// The settings the process environment gives.
    pub fn from_env() -> Result<HubSettings, HubError> {
        HubSettings::from_vars(|key| std::env::var(key).ok().filter(|v| !v.is_empty()))
    }

    /// The settings `var` gives (a lookup of environment variables, for tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<HubSettings, HubError> {
        let endpoint = var("HF_ENDPOINT")
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let hf_home = match var("HF_HOME") {
            Some(home) => Some(PathBuf::from(home)),
            None => var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))
                .map(|cache| cache.join("huggingface")),
        };
        let cache_dir = match var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
            Some(dir) => PathBuf::from(dir),
            None => hf_home.as_ref().ok_or(HubError::NoCacheDir)?.join("hub"),
        };
        let token_file = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .or_else(|| hf_home.as_ref().map(|h| h.join("token")));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                token_file
                    .and_then(|f| std::fs::read_to_string(f).ok())
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
            });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        Ok(HubSettings {
            endpoint,
            token,
            cache_dir,
            offline,
        })
    }

    /// The cache folder of a model repository (`models--org--name`).
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cache_dir
            .join(format!("models--{}", repo.replace('/', "--")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> HubSettings {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubSettings::from_vars(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn the_environment_is_read_as_huggingface_hub_reads_it() {
        let s = from(&[("HOME", "/home/u")]);
        assert_eq!(s.endpoint, "https://huggingface.co");
        assert_eq!(s.cache_dir, Path::new("/home/u/.cache/huggingface/hub"));
        assert_eq!(s.token, None);
        assert!(!s.offline);
        let s = from(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/xdg")]);
        assert_eq!(s.cache_dir, Path::new("/xdg/huggingface/hub"));
        let s = from(&[("HF_HOME", "/hf"), ("HOME", "/home/u")]);
        assert_eq!(s.cache_dir, Path::new("/hf/hub"));
        let s = from(&[
            ("HF_HOME", "/hf"),
            ("HF_HUB_CACHE", "/cache"),
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_TOKEN", "hf_abc"),
            ("HF_HUB_OFFLINE", "1"),
        ]);
        assert_eq!(s.cache_dir, Path::new("/cache"));
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert_eq!(s.token.as_deref(), Some("hf_abc"));
        assert!(s.offline);
        assert_eq!(
            s.repo_dir("org/name"),
            Path::new("/cache/models--org--name")
        );
        assert!(matches!(
            HubSettings::from_vars(|_| None),
            Err(HubError::NoCacheDir)
        ));
    }

    #[test]
    fn the_token_file_is_read_when_hf_token_is_unset() {
        let dir = std::env::temp_dir().join(format!("poot-hub-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "hf_from_file\n").unwrap();
        let home = dir.to_str().unwrap().to_owned();
        let s = from(&[("HF_HOME", &home)]);
        assert_eq!(s.token.as_deref(), Some("hf_from_file"));
        let s = from(&[("HF_HOME", &home), ("HF_TOKEN", "hf_env")]);
        assert_eq!(s.token.as_deref(), Some("hf_env"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
