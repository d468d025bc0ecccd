//! Status lines on stderr (loading, backend, timings), so stdout carries only the model's text
//! or JSON.

/// Where status lines go; `--quiet` silences them.
#[derive(Clone, Copy, Debug)]
pub struct Status {
    pub quiet: bool,
}

impl Status {
    pub fn line(&self, message: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", message.as_ref());
        }
    }
}
