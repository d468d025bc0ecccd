//! What a device whose failures surface asynchronously (PTX, ROCm) knows of their cause: the
//! work submitted since its queue was last seen idle, named for fault reports.

use std::sync::Arc;

/// Which work could have raised an asynchronous error: the launches and replays submitted since
/// the stream was last seen idle.
#[derive(Debug, Default)]
pub struct InFlight {
    /// The most recent submissions, oldest first (at most [`InFlight::KEEP`]).
    recent: Vec<Arc<str>>,
    /// All submissions since the last idle stream, including those no longer in `recent`.
    count: u64,
}

impl InFlight {
    const KEEP: usize = 8;

    pub fn push(&mut self, what: Arc<str>) {
        if self.recent.len() == Self::KEEP {
            self.recent.remove(0);
        }
        self.recent.push(what);
        self.count += 1;
    }

    /// The stream was seen idle: nothing is in flight.
    pub fn clear(&mut self) {
        self.recent.clear();
        self.count = 0;
    }

    /// The culprit when exactly one submission is in flight; otherwise a description of the
    /// candidates, newest first; `None` when nothing was submitted.
    pub fn suspect(&self) -> Option<String> {
        let last = self.recent.last()?;
        if self.count == 1 {
            return Some(last.to_string());
        }
        let mut names: Vec<&str> = self.recent.iter().rev().map(|s| &**s).collect();
        names.dedup();
        let more = self.count.saturating_sub(self.recent.len() as u64);
        let tail = if more > 0 {
            format!(" and {more} earlier")
        } else {
            String::new()
        };
        Some(format!(
            "one of {} submissions since the last sync: {}{tail}",
            self.count,
            names.join(", ")
        ))
    }
}

/// How fault reports name a recording: its serial number and (some of) its kernels.
pub fn recording_label(serial: u64, kernels: &[&str]) -> String {
    const SHOW: usize = 4;
    let names = if kernels.len() <= SHOW {
        kernels.join(", ")
    } else {
        format!(
            "{}, …, {}",
            kernels[..SHOW - 1].join(", "),
            kernels[kernels.len() - 1]
        )
    };
    format!("recording #{serial} ({} launches: {names})", kernels.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspects() {
        let mut f = InFlight::default();
        assert_eq!(f.suspect(), None);
        f.push("a".into());
        assert_eq!(f.suspect().as_deref(), Some("a"));
        f.push("b".into());
        let s = f.suspect().unwrap_or_default();
        assert!(s.contains("one of 2") && s.contains("b, a"), "{s}");
        for i in 0..20 {
            f.push(format!("k{i}").into());
        }
        let s = f.suspect().unwrap_or_default();
        assert!(
            s.contains("one of 22") && s.contains("k19") && s.contains("14 earlier"),
            "{s}"
        );
        f.clear();
        assert_eq!(f.suspect(), None);
    }

    #[test]
    fn recording_labels_name_the_kernels() {
        assert_eq!(
            recording_label(1, &["a", "b"]),
            "recording #1 (2 launches: a, b)"
        );
        assert_eq!(
            recording_label(2, &["a", "b", "c", "d", "e", "f"]),
            "recording #2 (6 launches: a, b, c, …, f)"
        );
        assert_eq!(recording_label(3, &[]), "recording #3 (0 launches: )");
    }
}
