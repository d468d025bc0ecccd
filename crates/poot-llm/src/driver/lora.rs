//! LoRA adapters on a driver: the adapter tables are uploaded with the weights (zeros), and
//! loading or unloading an adapter writes its index's part of every table in place through
//! [`Executor::write_const`], so no entry is re-recorded. Each row's adapter index is a slot
//! the driver fills from the sequence's request.

use std::borrow::Cow;

use poot_executor::{ConstBytes, ConstSource, Executor};
use poot_models::{LoraAdapter, LoraError, LoraTables};

use super::{Driver, DriverError};
use crate::weights::HandleWeights;

/// The adapters a driver holds: the host copy of the tables and the name at each index.
pub(super) struct Adapters {
    pub tables: LoraTables,
    /// `names[i - 1]` is the adapter at index `i`.
    pub names: Vec<Option<String>>,
}

impl Adapters {
    pub fn index(&self, name: &str) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n.as_deref() == Some(name))
            .map(|i| i + 1)
    }
}

/// The model's weights and the (zero) adapter tables, as one executable's constants.
pub(super) struct WithTables {
    pub base: HandleWeights,
    pub tables: LoraTables,
}

impl ConstSource for WithTables {
    fn names(&self) -> Vec<String> {
        let mut names = self.base.names();
        names.extend(self.tables.iter().map(|(n, _)| n.to_string()));
        names
    }

    fn byte_len(&self, name: &str) -> Option<u64> {
        match self.tables.table(name) {
            Some(t) => Some(t.data.len() as u64 * 4),
            None => self.base.byte_len(name),
        }
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        match self.tables.table(name) {
            Some(t) => Some(ConstBytes::F32(Cow::Borrowed(&t.data))),
            None => self.base.bytes(name),
        }
    }
}

impl<S> Driver<S> {
    /// The adapters loaded now, by index (1-based).
    pub fn loras(&self) -> Vec<(usize, String)> {
        self.adapters
            .iter()
            .flat_map(|a| a.names.iter().enumerate())
            .filter_map(|(i, n)| n.clone().map(|n| (i + 1, n)))
            .collect()
    }

    /// Loads `adapter` under `name` into a free index and writes it to the device; requests
    /// naming it decode with it from their next step. Refused when the driver was built
    /// without LoRA tables, the name is taken, every index is taken, or the adapter does not
    /// fit the model or the compiled capacity (nothing changes then).
    pub fn load_lora(&mut self, name: &str, adapter: &LoraAdapter) -> Result<usize, DriverError> {
        let handle = std::sync::Arc::clone(&self.handle);
        let adapters = self.adapters.as_mut().ok_or(DriverError::LoraOff)?;
        if adapters.index(name).is_some() {
            return Err(DriverError::LoraExists {
                name: name.to_string(),
            });
        }
        let Some(free) = adapters.names.iter().position(Option::is_none) else {
            return Err(DriverError::LoraFull {
                max_loras: adapters.names.len(),
            });
        };
        let index = free + 1;
        adapters
            .tables
            .write(index, adapter, handle.model().weights())?;
        adapters.names[free] = Some(name.to_string());
        if let Err(e) = write_index(self.exec.as_mut(), self.exe, &adapters.tables, index) {
            // The device may hold part of it: take the name back and clear what was written.
            adapters.names[free] = None;
            let _ = adapters.tables.clear(index);
            let _ = write_index(self.exec.as_mut(), self.exe, &adapters.tables, index);
            return Err(e);
        }
        Ok(index)
    }

    /// Unloads adapter `name`: its index is zeroed on the device and freed. Refused while an
    /// open sequence uses it.
    pub fn unload_lora(&mut self, name: &str) -> Result<(), DriverError> {
        let adapters = self.adapters.as_mut().ok_or(DriverError::LoraOff)?;
        let index = adapters
            .index(name)
            .ok_or_else(|| DriverError::UnknownLora {
                name: name.to_string(),
            })?;
        let users = self
            .seqs
            .open
            .values()
            .filter(|s| s.lora as usize == index)
            .count();
        if users > 0 {
            return Err(DriverError::LoraInUse {
                name: name.to_string(),
                open: users,
            });
        }
        adapters.tables.clear(index)?;
        write_index(self.exec.as_mut(), self.exe, &adapters.tables, index)?;
        adapters.names[index - 1] = None;
        Ok(())
    }

    /// The index of a request's adapter: 0 for none, a typed refusal for an unknown name.
    pub(super) fn lora_index(&self, name: Option<&str>) -> Result<i32, DriverError> {
        let Some(name) = name else {
            return Ok(0);
        };
        let unknown = || DriverError::UnknownLora {
            name: name.to_string(),
        };
        let index = self
            .adapters
            .as_ref()
            .and_then(|a| a.index(name))
            .ok_or_else(unknown)?;
        i32::try_from(index).map_err(|_| unknown())
    }
}

/// Writes index `index` of every table to the device.
fn write_index(
    exec: &mut dyn Executor,
    exe: poot_executor::ExecutableId,
    tables: &LoraTables,
    index: usize,
) -> Result<(), DriverError> {
    for (name, table) in tables.iter() {
        let range = tables.index_range_bytes(table, index);
        let words = table
            .data
            .get(range.start / 4..range.end / 4)
            .ok_or(LoraError::Index {
                index,
                max_loras: tables.shape().max_loras,
            })?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        exec.write_const(exe, name, range.start as u64, &bytes)?;
    }
    Ok(())
}
