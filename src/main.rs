//! `rebound`: parse flags, load and validate the configuration, start tracing, run.

use clap::{Parser, Subcommand};
use rebound::cli::{self, ClientArgs, ClientCommand, KeysCommand, LinksCommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "rebound",
    version,
    about = "A URL shortener built as a high-throughput redirect proxy"
)]
struct Cli {
    /// TOML configuration file (REBOUND_* variables override it).
    #[arg(long, env = "REBOUND_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane (API and click consumer).
    ControlPlane,
    /// Manage links.
    #[command(subcommand)]
    Links(LinksCommand),
    /// Take a link down (operators), with a reason for the audit log.
    Takedown {
        code: String,
        #[arg(long)]
        reason: String,
    },
    /// Manage API keys (operators).
    #[command(subcommand)]
    Keys(KeysCommand),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("REBOUND_LOG").unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rebound: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client_command = match cli.command {
        None | Some(Command::ControlPlane) => None,
        Some(Command::Links(c)) => Some(ClientCommand::Links(c)),
        Some(Command::Takedown { code, reason }) => Some(ClientCommand::Takedown { code, reason }),
        Some(Command::Keys(c)) => Some(ClientCommand::Keys(c)),
    };
    if let Some(command) = client_command {
        return match runtime.block_on(cli::run(&cli.client, command)) {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rebound: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match rebound::config::load_from_process(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rebound: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing();
    match runtime.block_on(rebound::app::run_control_plane(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rebound: {e:#}");
            ExitCode::FAILURE
        }
    }
}
