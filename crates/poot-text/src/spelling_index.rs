//! Finding which of many fixed spellings (special-token texts) start at a position, without a
//! scan per spelling: an index of first bytes and of the distinct spelling lengths.

use std::collections::{HashMap, HashSet};

/// Spellings mapped to values of type `T`.
#[derive(Debug)]
pub(crate) struct SpellingIndex<T> {
    by_text: HashMap<String, T>,
    /// Distinct lengths in bytes, longest first.
    lengths: Vec<usize>,
    first_bytes: HashSet<u8>,
}

impl<T> Default for SpellingIndex<T> {
    fn default() -> Self {
        SpellingIndex {
            by_text: HashMap::new(),
            lengths: Vec::new(),
            first_bytes: HashSet::new(),
        }
    }
}

impl<T> SpellingIndex<T> {
    /// Builds the index; the first value given for a spelling wins, empty spellings are skipped.
    pub(crate) fn new(entries: impl IntoIterator<Item = (String, T)>) -> SpellingIndex<T> {
        let mut by_text = HashMap::new();
        for (text, value) in entries {
            if !text.is_empty() {
                by_text.entry(text).or_insert(value);
            }
        }
        let mut lengths: Vec<usize> = by_text.keys().map(String::len).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.dedup();
        let first_bytes = by_text
            .keys()
            .filter_map(|t| t.as_bytes().first().copied())
            .collect();
        SpellingIndex {
            by_text,
            lengths,
            first_bytes,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_text.is_empty()
    }

    /// The spellings starting at byte `pos` of `text`, longest first, as (length, value).
    pub(crate) fn matches_at<'a>(
        &'a self,
        text: &'a str,
        pos: usize,
    ) -> impl Iterator<Item = (usize, &'a T)> + 'a {
        let bytes = text.as_bytes();
        let lengths: &[usize] = if bytes.get(pos).is_some_and(|b| self.first_bytes.contains(b)) {
            &self.lengths
        } else {
            &[]
        };
        lengths.iter().filter_map(move |&len| {
            // Spellings are UTF-8, so a byte match is a match of whole characters.
            let slice = text.get(pos..pos + len)?;
            self.by_text.get(slice).map(|v| (len, v))
        })
    }

    /// The longest spelling starting at `pos`, as (length, value).
    pub(crate) fn longest_at<'a>(&'a self, text: &'a str, pos: usize) -> Option<(usize, &'a T)> {
        self.matches_at(text, pos).next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_longest_first() {
        let idx = SpellingIndex::new([
            ("<a>".to_owned(), 1),
            ("<a><b>".to_owned(), 2),
            ("é".to_owned(), 3),
        ]);
        let text = "x<a><b>é";
        assert_eq!(
            idx.matches_at(text, 1)
                .map(|(l, v)| (l, *v))
                .collect::<Vec<_>>(),
            [(6, 2), (3, 1)]
        );
        assert_eq!(idx.longest_at(text, 0), None);
        assert_eq!(idx.longest_at(text, 7).map(|(l, v)| (l, *v)), Some((2, 3)));
        // Not a char boundary: no match, no panic.
        assert_eq!(idx.longest_at(text, 8), None);
    }
}
