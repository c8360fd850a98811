//! The `paygate` binary's commands (`src/main.rs` calls [`main`]): `serve` runs the gateway
//! (Pingora proxy + axum control plane in one process); `migrate` prepares a PostgreSQL
//! database; `admin` calls the admin API for operators; `routes`, `payments`, `corridors` and
//! `payouts` an organisation's APIs; `pay` pays a paid URL as an agent would; `devchain`
//! prepares and funds a local chain. A library so that its code compiles beside the control
//! plane's rather than after it (a release build's last step is then only the link).

mod admin_cli;
mod devchain;
mod handover;
mod org_cli;
mod pay_cli;
mod payout_setup;
mod runtime;
mod serve;
mod settlement;
mod storage;
mod telemetry;
mod tls;

use clap::{Parser, Subcommand};

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "paygate",
    version,
    about = "Sell HTTP APIs to AI agents per request, paid in USDC over x402"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway: the public listener, the control plane and the store, in one process.
    Serve {
        /// TOML configuration file; without it the embedded defaults apply. Every key can also
        /// be set as PAYGATE__<SECTION>__<KEY> in the environment, which wins over the file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Take over from the running gateway of the same storage path without dropping a
        /// request: it is sent SIGQUIT, hands its listening sockets to this process, finishes
        /// its in-flight requests and exits. Used for binary upgrades and config reloads.
        #[arg(long)]
        upgrade: bool,
    },
    /// Apply the database migrations this build knows (storage.backend = "postgres"), then
    /// exit. `serve` applies them too; this is for deployments that migrate before rolling out.
    Migrate {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Operator commands against a running gateway's admin API.
    Admin(admin_cli::AdminArgs),
    /// An organisation's routes (its API key in PAYGATE_API_KEY).
    Routes {
        #[command(flatten)]
        args: org_cli::OrgArgs,
        /// Without one: `list`.
        #[command(subcommand)]
        command: Option<org_cli::RoutesCommand>,
    },
    /// An organisation's gateway payments (the ledger).
    Payments {
        #[command(flatten)]
        args: org_cli::OrgArgs,
        /// Without one: `list`.
        #[command(subcommand)]
        command: Option<org_cli::PaymentsCommand>,
    },
    /// The ledger against the chain: every decided payment in a time range compared with what
    /// moved on chain for it; exits 1 when any differs (issue 52).
    Audit {
        #[command(flatten)]
        args: org_cli::OrgArgs,
        #[command(flatten)]
        range: org_cli::AuditRange,
    },
    /// An organisation's payout corridors and quotes.
    Corridors {
        #[command(flatten)]
        args: org_cli::OrgArgs,
        /// Without one: `list`.
        #[command(subcommand)]
        command: Option<org_cli::CorridorsCommand>,
    },
    /// An organisation's payouts to bank accounts.
    Payouts {
        #[command(flatten)]
        args: org_cli::OrgArgs,
        #[command(subcommand)]
        command: org_cli::PayoutsCommand,
    },
    /// Pay a paid URL with x402 (the payer key in PAYGATE_PAYER_KEY) and print its answer.
    Pay(pay_cli::PayArgs),
    /// Development chain tools (local anvil only).
    #[command(subcommand)]
    Devchain(DevchainCommand),
}

#[derive(Subcommand)]
enum DevchainCommand {
    /// Place Circle's USDC on a local anvil chain, initialise it and mint test USDC.
    Setup(devchain::SetupArgs),
    /// Mint test USDC to an address (an agent's wallet) on the local chain of `make run`.
    Fund(devchain::FundArgs),
    /// Let the receiver wallet fund its `auth-capture` refunds (approve paygate's receiver
    /// refund collector from its key).
    ApproveRefunds(devchain::ApproveRefundsArgs),
}

/// Runs the command line's command.
pub fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let result = match cli.command {
        // `serve` starts logging (and traces) once its configuration is read.
        Command::Serve { config, upgrade } => serve::run(config.as_deref(), upgrade),
        Command::Migrate { config } => {
            telemetry::init(None).and_then(|_logs| serve::migrate(config.as_deref()))
        }
        Command::Admin(args) => admin_cli::run(args),
        Command::Routes { args, command } => {
            org_cli::routes(args, command.unwrap_or(org_cli::RoutesCommand::List))
        }
        Command::Payments { args, command } => org_cli::payments(
            args,
            command.unwrap_or(org_cli::PaymentsCommand::List {
                route: None,
                status: None,
                payer: None,
                limit: None,
            }),
        ),
        Command::Audit { args, range } => org_cli::audit(args, range),
        Command::Corridors { args, command } => {
            org_cli::corridors(args, command.unwrap_or(org_cli::CorridorsCommand::List))
        }
        Command::Payouts { args, command } => org_cli::payouts(args, command),
        Command::Pay(args) => pay_cli::run(args),
        Command::Devchain(DevchainCommand::Setup(args)) => devchain::run(args),
        Command::Devchain(DevchainCommand::Fund(args)) => devchain::fund(args),
        Command::Devchain(DevchainCommand::ApproveRefunds(args)) => devchain::approve_refunds(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paygate: {e:#}");
            ExitCode::FAILURE
        }
    }
}
