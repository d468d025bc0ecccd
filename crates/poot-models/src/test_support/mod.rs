//! Test support shared with other crates' tests and the feature matrix: the fixture table.

pub mod family_fixtures;
