//! Adapters for the peer systems Trellis is compared with.

pub mod alien;
pub mod futures_signals;
pub mod sycamore;
