//! JSON objects read as a list of entries, so that a repeated key is seen (serde_json's maps
//! keep the last value silently) and entry order is the file's.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// The entries of one JSON object, in file order, repeats included.
pub(crate) struct ObjectEntries(pub Vec<(String, Value)>);

impl ObjectEntries {
    pub(crate) fn parse(bytes: &[u8]) -> Result<ObjectEntries, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The first key that appears twice, if any.
    pub(crate) fn first_repeated_key(&self) -> Option<&str> {
        let mut seen = std::collections::HashSet::new();
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .find(|k| !seen.insert(*k))
    }
}

impl<'de> Deserialize<'de> for ObjectEntries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EntriesVisitor)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = ObjectEntries;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectEntries, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, Value>()? {
            entries.push(entry);
        }
        Ok(ObjectEntries(entries))
    }
}
