//! The ways of paying, one module each; `registry.rs` lists them. `usage.rs` is what a
//! usage-priced request is charged, shared by the ways that charge after the answer.

pub mod auth_capture;
pub(crate) mod batch;
pub(crate) mod exact;
pub mod mpp;
pub(crate) mod sandbox;
pub(crate) mod upto;
mod usage;
pub(crate) mod window;
