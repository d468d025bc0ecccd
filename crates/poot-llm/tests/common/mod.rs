pub mod models;
pub mod oracle;
pub mod python;
