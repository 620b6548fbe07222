//! `rebound`: parse flags, load and validate the configuration, start tracing, run.

use clap::{Parser, Subcommand};
use rebound::cli::{
    self, AbuseCommand, ClientArgs, ClientCommand, DomainsCommand, KeysCommand, LinksCommand, SummaryArgs,
};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// Take the redirect listeners over from the running process, then send that one
    /// SIGQUIT (zero-downtime upgrade; the all-in-one and `rebound proxy`).
    #[arg(long, global = true)]
    upgrade: bool,
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane alone (API).
    ControlPlane,
    /// Run a data plane alone (distributed mode: needs a shared store).
    Proxy,
    /// Create the DynamoDB tables and the SQS queues if they are missing (idempotent).
    Provision,
    /// Manage links.
    #[command(subcommand)]
    Links(LinksCommand),
    /// Take a link down (operators), with a reason for the audit log.
    Takedown {
        code: String,
        #[arg(long)]
        reason: String,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// Manage API keys (operators).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage the domains links are served on.
    #[command(subcommand)]
    Domains(DomainsCommand),
    /// Threat lists, links they took down, and abuse reports.
    #[command(subcommand)]
    Abuse(AbuseCommand),
    /// The summary of a domain's links, or of every domain's (operators): clicks per day,
    /// the links, countries and referrers most clicked.
    Stats(SummaryArgs),
    /// About the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print docs/configuration.md: every setting's key, variable, default and range.
    Docs,
}

/// What this invocation runs.
enum Process {
    AllInOne,
    ControlPlane,
    Proxy,
    Provision,
    Client(ClientCommand),
}

fn main() -> ExitCode {
    // HTTPS clients (the CLI's, the home region's) use aws-lc-rs, as the TLS listener does.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rebound: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let process = match cli.command {
        None => Process::AllInOne,
        Some(Command::ControlPlane) => Process::ControlPlane,
        Some(Command::Proxy) => Process::Proxy,
        Some(Command::Provision) => Process::Provision,
        Some(Command::Links(c)) => Process::Client(ClientCommand::Links(c)),
        Some(Command::Takedown { code, reason, domain }) => {
            Process::Client(ClientCommand::Takedown { code, reason, domain })
        }
        Some(Command::Keys(c)) => Process::Client(ClientCommand::Keys(c)),
        Some(Command::Domains(c)) => Process::Client(ClientCommand::Domains(c)),
        Some(Command::Abuse(c)) => Process::Client(ClientCommand::Abuse(c)),
        Some(Command::Stats(args)) => Process::Client(ClientCommand::Stats(args)),
        Some(Command::Config(ConfigCommand::Docs)) => {
            print!("{}", rebound::config::document());
            return ExitCode::SUCCESS;
        }
    };
    if let Process::Client(command) = process {
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
    let log_format = match rebound::logging::LogFormat::from_env() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rebound: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    rebound::logging::init(log_format);
    let options = rebound::app::RunOptions { take_over: cli.upgrade };
    let result = match process {
        Process::ControlPlane => runtime.block_on(rebound::app::run_control_plane(settings)),
        Process::Proxy => rebound::app::run_proxy(settings, options, &runtime),
        Process::Provision => runtime.block_on(rebound::app::provision(settings)),
        _ => rebound::app::run_all_in_one(settings, options, &runtime),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rebound: {e:#}");
            ExitCode::FAILURE
        }
    }
}
