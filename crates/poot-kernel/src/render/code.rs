//! Indented source text, one line at a time.

/// Source text under construction, indented four spaces per open block.
pub(crate) struct Code {
    text: String,
    depth: usize,
}

impl Code {
    /// Empty text whose lines start `depth` blocks deep.
    pub(crate) fn at_depth(depth: usize) -> Code {
        Code {
            text: String::new(),
            depth,
        }
    }

    /// Appends one line at the current depth (an empty line stays empty).
    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        if !s.is_empty() {
            for _ in 0..self.depth {
                self.text.push_str("    ");
            }
            self.text.push_str(s);
        }
        self.text.push('\n');
    }

    /// Appends a line that opens a block (`... {`) and indents what follows.
    pub(crate) fn open(&mut self, s: impl AsRef<str>) {
        self.line(s);
        self.depth += 1;
    }

    /// Closes the innermost block with the line `s` (`}` or `} else {`).
    pub(crate) fn close(&mut self, s: impl AsRef<str>) {
        self.depth = self.depth.saturating_sub(1);
        self.line(s);
    }

    /// Closes the innermost block and opens the next with the line `s` (`} else {`).
    pub(crate) fn reopen(&mut self, s: impl AsRef<str>) {
        self.depth = self.depth.saturating_sub(1);
        self.line(s);
        self.depth += 1;
    }

    /// Appends pre-formatted text verbatim (helper functions).
    pub(crate) fn raw(&mut self, s: &str) {
        self.text.push_str(s);
    }

    pub(crate) fn finish(self) -> String {
        self.text
    }
}
