//! What a caller hears of a download: which file starts, how many of its bytes have arrived.

/// Told about each file as it downloads (a file found in the cache is not announced).
pub trait DownloadProgress {
    /// `file` starts downloading; it has `size_bytes` bytes.
    fn start(&mut self, file: &str, size_bytes: u64);
    /// `bytes` more bytes of the current file arrived.
    fn advance(&mut self, bytes: u64);
    /// The current file is complete.
    fn finish(&mut self);
}

/// No reports.
impl DownloadProgress for () {
    fn start(&mut self, _file: &str, _size_bytes: u64) {}
    fn advance(&mut self, _bytes: u64) {}
    fn finish(&mut self) {}
}

/// `hf-hub`'s progress calls, forwarded.
pub(crate) struct Forward<'a>(pub &'a mut dyn DownloadProgress);

impl hf_hub::api::Progress for Forward<'_> {
    fn init(&mut self, size: usize, filename: &str) {
        self.0.start(filename, size as u64);
    }
    fn update(&mut self, size: usize) {
        self.0.advance(size as u64);
    }
    fn finish(&mut self) {
        self.0.finish();
    }
}
