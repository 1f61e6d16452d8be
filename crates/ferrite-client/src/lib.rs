//! Ferrite Rust client.
