//! The `rebound` binary's library: settings, the planes assembled from adapters, the
//! processes and the operator CLI, kept out of `main.rs` so that tests assemble the planes
//! in process (`tests/in_process.rs`).
//!
//! # Layout
//!
//! - `settings`: everything Rebound is configured with, as validated data.
//! - `config`: the TOML file and `REBOUND_*` variables, read into `Settings`.
//! - `data_plane`: the redirect data plane, `DataPlane::build` and `run(adapters,
//!   listeners, shutdown)`.
//! - `control_plane`: the control plane, `ControlPlaneProcess::build` and `run(listeners,
//!   shutdown)`.
//! - `all_in_one`: both planes on one store with the link events and pending clicks in
//!   process, `AllInOne::build` and `run(listeners, click writes, shutdown)`: the
//!   all-in-one process and `tests/in_process.rs` both run it.
//! - `backends`: opening the store, Redis and the SQS queue the settings choose.
//! - `app`: the processes (the all-in-one, `proxy`, `control-plane`, `provision`), each a
//!   page that opens the backends, binds the listeners and runs the planes.
//! - `signals`: what ends a process (SIGTERM, SIGQUIT, SIGINT, SIGHUP) and the drain.
//! - `listen`: the API and metrics ports through the edge, and the descriptor budget.
//! - `metrics_port`: `/metrics`, `/healthz` and `/readyz`.
//! - `process_metrics`: what every process exports: process collector and build info.
//! - `cli`: the operator CLI that talks HTTP to the control plane.
#![forbid(unsafe_code)]

pub mod all_in_one;
pub mod app;
pub mod backends;
pub mod cli;
pub mod config;
pub mod control_plane;
pub mod data_plane;
pub mod listen;
pub mod logging;
pub mod metrics_port;
pub mod process_metrics;
pub mod regions;
pub mod settings;
pub mod signals;
