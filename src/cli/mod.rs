//! The operator CLI: `rebound links …`, `rebound takedown …`, `rebound keys …`,
//! `rebound domains …`, `rebound stats`, talking HTTP to the control plane. Readable tables by default, the
//! API's JSON with `--json`.
//!
//! - this file: the commands and their flags (clap), and [`run`].
//! - `client`: the HTTP calls to the API, and a refusal as one clear line.
//! - `output`: tables, field lists and what `--json` prints instead.
//! - `links`, `import`, `takedown`, `keys`, `domains`, `stats`: the commands, a file per
//!   group.

mod abuse;
mod client;
mod domains;
mod import;
mod keys;
mod links;
mod output;
mod stats;
mod takedown;

use clap::{Args, Subcommand};
use client::Client;

/// Where the control plane is and who we are.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Base URL of the control-plane API.
    #[arg(
        long,
        env = "REBOUND_API_URL",
        default_value = "http://127.0.0.1:8081",
        global = true
    )]
    pub api_url: String,
    /// API key (sent as a Bearer token).
    #[arg(long, env = "REBOUND_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum LinksCommand {
    /// Create a short link.
    Create {
        /// The target URL.
        long_url: String,
        /// A custom code instead of a generated one.
        #[arg(long)]
        alias: Option<String>,
        /// Expire after this many seconds.
        #[arg(long, conflicts_with = "expires_at")]
        ttl: Option<i64>,
        /// Expire at this RFC 3339 time.
        #[arg(long)]
        expires_at: Option<String>,
        /// 301, 302 (default), 307 or 308.
        #[arg(long)]
        redirect: Option<u16>,
        /// Append the visitor's query string to the target.
        #[arg(long)]
        forward_query: bool,
        /// Makes a retried create return the first answer.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The domain to create it on (default: the service's default domain, or a scoped
        /// key's first domain).
        #[arg(long)]
        domain: Option<String>,
        /// A password visitors give before the redirect (4 to 128 characters).
        #[arg(long)]
        password: Option<String>,
        /// Rules that choose the target by who clicks (docs/http.md "Rules"): a JSON array
        /// of rules, `@FILE` for a file holding one, or `-` for standard input.
        #[arg(long)]
        rules: Option<String>,
    },
    /// Create many links from a file: CSV (RFC 4180: quote a field holding a comma; columns
    /// `long_url[,alias]`, or named by a header row among long_url, alias, expires_at,
    /// ttl_seconds, redirect, forward_query) or JSON lines with the fields of `create` (`-`
    /// reads standard input). Prints `code,short_url,long_url` per created link, also when a
    /// chunk fails; a refused line is named by its number; links over the rate limit are
    /// sent again when it allows; a chunk refused as a whole is named by its lines and exits
    /// non-zero. Each request carries an Idempotency-Key derived from the file and its
    /// lines, so running the same file again (same --batch) never creates a link twice.
    /// A `domain` column (or field) puts a link on that domain.
    Import {
        /// The file (`.csv`, or JSON lines), or `-` for standard input.
        file: String,
        /// `csv` or `jsonl` (default: from the file name; standard input is JSON lines).
        #[arg(long)]
        format: Option<String>,
        /// Links per request (1 to 1000).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Show one link.
    Get {
        code: String,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// List links, newest first.
    List {
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Change where a link goes, how it redirects, or its expiry (only what is given
    /// changes). Guarded by the link's version: the one given with --if-match, or the one
    /// read just before (an edit made meanwhile by someone else is then refused, 412, never
    /// overwritten). Once it returns, no proxy answers with the old target.
    Edit {
        code: String,
        /// The new target URL.
        #[arg(long = "url")]
        long_url: Option<String>,
        /// 301, 302, 307 or 308.
        #[arg(long)]
        redirect: Option<u16>,
        /// Append the visitor's query string to the target.
        #[arg(long, conflicts_with = "no_forward_query")]
        forward_query: bool,
        /// Stop appending the visitor's query string.
        #[arg(long)]
        no_forward_query: bool,
        /// Expire this many seconds from now.
        #[arg(long, conflicts_with_all = ["expires_at", "no_expiry"])]
        ttl: Option<i64>,
        /// Expire at this RFC 3339 time.
        #[arg(long, conflicts_with = "no_expiry")]
        expires_at: Option<String>,
        /// Never expire.
        #[arg(long)]
        no_expiry: bool,
        /// A new password visitors give before the redirect.
        #[arg(long, conflicts_with = "no_password")]
        password: Option<String>,
        /// Remove the password.
        #[arg(long)]
        no_password: bool,
        /// Replace the link's rules (docs/http.md "Rules"): a JSON array of rules, `@FILE`,
        /// or `-` for standard input.
        #[arg(long, conflicts_with = "no_rules")]
        rules: Option<String>,
        /// Remove the link's rules.
        #[arg(long)]
        no_rules: bool,
        /// The version to change (the link's ETag, without quotes); default: the version
        /// the link has when the command reads it.
        #[arg(long)]
        if_match: Option<u64>,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// A link's rules, one line each, in the order they are tried, then the link's own
    /// target (`--json` prints the JSON that `--rules` takes). The clicks each rule and
    /// split variant sent: `stats CODE --by rule`.
    Rules {
        code: String,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// Delete a link.
    Delete {
        code: String,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// The QR code of a link's short URL, as SVG on standard output
    /// (`rebound links qr CODE > code.svg`).
    Qr {
        code: String,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
    },
    /// Daily clicks of a link, or with --by its people's clicks by value of a dimension.
    Stats {
        code: String,
        /// First day, YYYY-MM-DD (default: 29 days before --to).
        #[arg(long)]
        from: Option<String>,
        /// Last day, YYYY-MM-DD (default: today, UTC).
        #[arg(long)]
        to: Option<String>,
        /// The domain the link is on (default: the default domain, or a scoped key's first).
        #[arg(long)]
        domain: Option<String>,
        /// Break people's clicks over the range down by country, referrer, device, browser,
        /// os, utm_source, utm_medium, utm_campaign or rule.
        #[arg(long)]
        by: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key (shown once).
    Create {
        #[arg(long)]
        name: String,
        /// creator or operator.
        #[arg(long)]
        role: String,
        /// Scope a creator key to this domain (repeat for more); every domain when not
        /// given. Its links are created on the first one unless they name another.
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
    },
    /// Revoke an API key; it stops working at once.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum DomainsCommand {
    /// Add a domain to serve links on (operators).
    Add {
        /// A DNS name of two labels or more (an internationalized name is stored as its
        /// ASCII form).
        name: String,
        /// Where its certificate comes from: `acme` (default: ordered and renewed when
        /// the TLS port has ACME) or `files` (the TLS port's certificate files).
        #[arg(long)]
        certificate: Option<String>,
        /// Where a code this domain does not have, or a deleted or taken-down link of it,
        /// redirects (default: the 404 page).
        #[arg(long)]
        not_found_url: Option<String>,
        /// Where an expired link of this domain redirects (default: the 410 page).
        #[arg(long)]
        expired_url: Option<String>,
        /// Where `/` of this domain redirects (default: the built-in page).
        #[arg(long)]
        root_url: Option<String>,
    },
    /// List the domains, the default one first, with their certificates' state.
    List,
    /// Show one domain and its certificate's state.
    Show { name: String },
    /// Remove a domain (operators): its links stop redirecting.
    Remove {
        name: String,
        /// Take its active links down too (each recorded in the audit log); without it a
        /// domain with active links is refused.
        #[arg(long)]
        take_down: bool,
    },
    /// Show a domain's app links, or change them (operators): the documents its redirect
    /// port serves at /.well-known/apple-app-site-association and
    /// /.well-known/assetlinks.json. A document not named is kept.
    AppLinks {
        /// The domain (the default one included).
        name: String,
        /// Serve this JSON file (`-`: standard input) as the Apple app-site-association:
        /// a JSON object.
        #[arg(long, value_name = "FILE", conflicts_with = "remove_apple_app_site_association")]
        apple_app_site_association: Option<String>,
        /// Serve this JSON file (`-`: standard input) as the Android asset links: an array
        /// of statements.
        #[arg(long, value_name = "FILE", conflicts_with = "remove_assetlinks")]
        assetlinks: Option<String>,
        /// Serve no Apple app-site-association (404).
        #[arg(long)]
        remove_apple_app_site_association: bool,
        /// Serve no asset links (404).
        #[arg(long)]
        remove_assetlinks: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AbuseCommand {
    /// The threat lists in force, each one's last load, and the last check of the links
    /// (operators).
    Lists,
    /// The newest abuse reports, newest first (operators).
    Reports,
    /// Report a short link (no key needed).
    Report {
        /// The short URL, or a code of the default domain.
        link: String,
        /// What is wrong with it.
        #[arg(long)]
        reason: String,
    },
    /// Reinstate a link a threat list took down (operators): served again, and never taken
    /// down by a list again.
    Reinstate {
        code: String,
        /// The domain the link is on (default: the default domain).
        #[arg(long)]
        domain: Option<String>,
    },
}

/// `rebound stats`: the operators' summary.
#[derive(Debug, Clone, Args)]
pub struct SummaryArgs {
    /// Summarise this domain's links (default: every domain's).
    #[arg(long)]
    pub domain: Option<String>,
    /// First day, YYYY-MM-DD (default: 29 days before --to).
    #[arg(long)]
    pub from: Option<String>,
    /// Last day, YYYY-MM-DD (default: today, UTC).
    #[arg(long)]
    pub to: Option<String>,
    /// Entries of each top list, 1 to 1000 (default 10).
    #[arg(long)]
    pub top: Option<u32>,
}

/// What the CLI was asked to do.
#[derive(Debug)]
pub enum ClientCommand {
    Links(LinksCommand),
    Takedown {
        code: String,
        reason: String,
        domain: Option<String>,
    },
    Keys(KeysCommand),
    Domains(DomainsCommand),
    Abuse(AbuseCommand),
    Stats(SummaryArgs),
}

/// A failed CLI call, printed as one clear line.
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

/// Runs one CLI command and returns what to print.
pub async fn run(args: &ClientArgs, command: ClientCommand) -> Result<String, CliError> {
    let client = Client::new(args)?;
    let printed = match command {
        ClientCommand::Links(command) => links::run(&client, command, args.json).await?,
        ClientCommand::Takedown { code, reason, domain } => {
            takedown::run(&client, code, reason, domain.as_deref()).await?
        }
        ClientCommand::Keys(command) => keys::run(&client, command).await?,
        ClientCommand::Domains(command) => domains::run(&client, command).await?,
        ClientCommand::Abuse(command) => abuse::run(&client, command).await?,
        ClientCommand::Stats(args) => stats::run(&client, args).await?,
    };
    Ok(printed.render(args.json))
}
