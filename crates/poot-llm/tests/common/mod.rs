pub mod models;
pub mod oracle;
pub mod oracle_executor;
pub mod python;
