pub mod oracle;
pub mod python;
