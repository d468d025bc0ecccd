pub mod reference_models;
