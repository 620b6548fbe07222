//! The `rebound` binary's library: configuration loading, process assembly and the
//! operator CLI, kept out of `main.rs` so tests can call them.
//!
//! # Layout
//!
//! - `config`: the TOML file and `REBOUND_*` variables, read into the core's `Settings`.
//! - `app`: assembles and runs the processes (the all-in-one, `proxy`, `control-plane`,
//!   `provision`), and the metrics port's router with `/readyz`.
//! - `listen`: the API and metrics ports through the edge, and the descriptor budget.
//! - `process_metrics`: what every process exports: process collector and build info.
//! - `cli`: the operator CLI that talks HTTP to the control plane.
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod config;
pub mod listen;
pub mod process_metrics;
pub mod settings;
