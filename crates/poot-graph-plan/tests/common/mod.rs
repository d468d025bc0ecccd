pub mod groups;
pub mod reference_models;
