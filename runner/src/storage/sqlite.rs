//! SQLite storage (to be written).
