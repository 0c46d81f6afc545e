//! The tool catalog: the tools a dialog offers, with their display and wire names.

pub mod naming;
pub mod schema;
