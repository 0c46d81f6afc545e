//! Trellis facade
