//! A sequence's generated text against its stop strings. Text that could still become a stop
//! string is held back until a later token shows it does not, so a client never receives the
//! start of a stop string; a match ends the text just before it (the stop is not included, as
//! in OpenAI's API).

/// The text of one sequence so far.
#[derive(Clone, Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    text: String,
    /// How much of `text` was handed out.
    sent: usize,
}

/// What one token adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Text now safe to send (may be empty).
    pub text: String,
    /// A stop string matched: the sequence is over.
    pub stopped: bool,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> StopText {
        StopText {
            stops,
            ..StopText::default()
        }
    }

    /// Adds a token's text.
    pub fn push(&mut self, piece: &str) -> Piece {
        // A match can only end in the new text, but may start up to a stop's length before it.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.text.len().saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.text.push_str(piece);
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|at| from + at))
            .min();
        if let Some(at) = hit {
            let end = at.max(self.sent);
            let text = self.text[self.sent..end].to_owned();
            self.text.truncate(end);
            self.sent = end;
            return Piece {
                text,
                stopped: true,
            };
        }
        let safe = (self.text.len() - self.held_back()).max(self.sent);
        let text = self.text[self.sent..safe].to_owned();
        self.sent = safe;
        Piece {
            text,
            stopped: false,
        }
    }

    /// Ends the text (no stop matched): whatever was held back.
    pub fn finish(&mut self) -> String {
        let rest = self.text[self.sent..].to_owned();
        self.sent = self.text.len();
        rest
    }

    /// The longest suffix of the text that is a proper prefix of a stop string.
    fn held_back(&self) -> usize {
        self.stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .rev()
                    .filter(|&k| s.is_char_boundary(k) && self.text.ends_with(&s[..k]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut t = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for p in pieces {
            let piece = t.push(p);
            out.push(piece.text);
            if piece.stopped {
                return (out, true);
            }
        }
        out.push(t.finish());
        (out, false)
    }

    #[test]
    fn no_stops_passes_text_through() {
        assert_eq!(
            run(&[], &["a", "b"]),
            (vec!["a".into(), "b".into(), "".into()], false)
        );
    }

    #[test]
    fn a_stop_split_over_tokens_is_never_sent() {
        let (out, stopped) = run(&["XY"], &["aX", "Y", "tail"]);
        assert!(stopped);
        assert_eq!(out, vec!["a".to_string(), "".to_string()]);
    }

    #[test]
    fn a_false_start_is_released() {
        let (out, stopped) = run(&["XY"], &["aX", "Z", "b"]);
        assert!(!stopped);
        assert_eq!(out.concat(), "aXZb");
        assert_eq!(out[0], "a");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let (out, stopped) = run(&["world", "lo"], &["hello world"]);
        assert!(stopped);
        assert_eq!(out.concat(), "hel");
    }

    #[test]
    fn held_back_text_comes_out_at_the_end() {
        let (out, stopped) = run(&["END"], &["abc E", "N"]);
        assert!(!stopped);
        assert_eq!(out, vec!["abc ".to_string(), "".into(), "EN".into()]);
    }

    #[test]
    fn multibyte_stops_and_text() {
        let (out, stopped) = run(&["é!"], &["caf", "é", "!x"]);
        assert!(stopped);
        assert_eq!(out.concat(), "caf");
        let (out, _) = run(&["😀"], &["naïve ", "😀"]);
        assert_eq!(out.concat(), "naïve ");
    }
}
