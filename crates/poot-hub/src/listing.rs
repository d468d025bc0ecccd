//! A repository's files at one commit, as the Hub's API lists them
//! (`/api/models/{repo}/revision/{rev}?blobs=true`) or as a cached snapshot holds them.

use std::path::Path;

use serde::Deserialize;

use crate::HubError;

/// One file of the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedFile {
    /// The path inside the repository, `/`-separated.
    pub name: String,
    /// Its length, when the listing gives one.
    pub size_bytes: Option<u64>,
    /// The SHA-256 of an LFS file's content (lowercase hex), when the listing gives one.
    pub sha256: Option<String>,
}

/// The files of a repository at one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The commit the listing is of.
    pub commit: String,
    pub files: Vec<ListedFile>,
}

#[derive(Deserialize)]
struct RawListing {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<RawSibling>,
}

#[derive(Deserialize)]
struct RawSibling {
    rfilename: String,
    size: Option<u64>,
    lfs: Option<RawLfs>,
}

#[derive(Deserialize)]
struct RawLfs {
    sha256: Option<String>,
    size: Option<u64>,
}

impl Listing {
    /// The API's JSON answer for `repo`.
    pub fn parse(repo: &str, bytes: &[u8]) -> Result<Listing, HubError> {
        let bad = |detail: String| HubError::BadListing {
            repo: repo.to_owned(),
            detail,
        };
        let raw: RawListing = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let commit = raw.sha.ok_or_else(|| bad("no `sha` (commit)".to_owned()))?;
        if !is_commit(&commit) {
            return Err(bad(format!("`sha` {commit:?} is not a commit hash")));
        }
        let mut files = Vec::with_capacity(raw.siblings.len());
        for s in raw.siblings {
            if !is_repo_path(&s.rfilename) {
                return Err(bad(format!("file name {:?}", s.rfilename)));
            }
            let (sha256, lfs_size) = match s.lfs {
                Some(lfs) => (lfs.sha256, lfs.size),
                None => (None, None),
            };
            if let Some(d) = &sha256
                && !(d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(bad(format!("{}: sha256 {d:?}", s.rfilename)));
            }
            files.push(ListedFile {
                name: s.rfilename,
                size_bytes: lfs_size.or(s.size),
                sha256: sha256.map(|d| d.to_ascii_lowercase()),
            });
        }
        Ok(Listing { commit, files })
    }

    /// The files a cached snapshot folder holds (sizes as they are on disk, no digests).
    pub fn of_snapshot(commit: &str, dir: &Path) -> Result<Listing, HubError> {
        let mut files = Vec::new();
        walk(dir, "", &mut files)?;
        files.sort_by(|a: &ListedFile, b| a.name.cmp(&b.name));
        Ok(Listing {
            commit: commit.to_owned(),
            files,
        })
    }

    /// The file called `name`.
    pub fn get(&self, name: &str) -> Option<&ListedFile> {
        self.files.iter().find(|f| f.name == name)
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<ListedFile>) -> Result<(), HubError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HubError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| HubError::io(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        let rel = format!("{prefix}{name}");
        // Follows the snapshot's links into the blobs; a dangling link is no file.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => walk(&path, &format!("{rel}/"), out)?,
            Ok(m) => out.push(ListedFile {
                name: rel,
                size_bytes: Some(m.len()),
                sha256: None,
            }),
            Err(_) => {}
        }
    }
    Ok(())
}

/// A 40-digit hexadecimal commit hash.
pub(crate) fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A relative `/`-separated path with no empty, `.` or `..` component: safe to join to a
/// snapshot folder.
fn is_repo_path(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\\', '\0'])
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn the_api_listing_gives_sizes_and_lfs_digests() {
        let json = format!(
            r#"{{"id": "org/name", "sha": "{COMMIT}", "siblings": [
                {{"rfilename": "config.json", "size": 12, "blobId": "x"}},
                {{"rfilename": "model.safetensors", "size": 99,
                  "lfs": {{"sha256": "{}", "size": 99, "pointerSize": 134}}}},
                {{"rfilename": "sub/dir/f.txt"}}
            ]}}"#,
            "AB".repeat(32)
        );
        let l = Listing::parse("org/name", json.as_bytes()).unwrap();
        assert_eq!(l.commit, COMMIT);
        assert_eq!(l.get("config.json").unwrap().size_bytes, Some(12));
        let st = l.get("model.safetensors").unwrap();
        assert_eq!(st.sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!(l.get("sub/dir/f.txt").unwrap().size_bytes, None);
    }

    #[test]
    fn a_listing_naming_files_outside_the_repository_is_refused() {
        for name in ["../escape", "/abs", "a//b", "a/./b", "a\\b", ""] {
            let json = format!(r#"{{"sha": "{COMMIT}", "siblings": [{{"rfilename": {name:?}}}]}}"#);
            let err = Listing::parse("org/name", json.as_bytes()).unwrap_err();
            assert!(matches!(err, HubError::BadListing { .. }), "{name}: {err}");
        }
        for json in ["[]", "{}", r#"{"sha": "main", "siblings": []}"#, "not json"] {
            let err = Listing::parse("org/name", json.as_bytes()).unwrap_err();
            assert!(matches!(err, HubError::BadListing { .. }), "{json}: {err}");
        }
    }
}
