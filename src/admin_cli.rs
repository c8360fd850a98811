//! `paygate admin ...`: thin client of the admin API for operators.

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Args)]
pub struct AdminArgs {
    /// Base URL of the running gateway.
    #[arg(long, env = "PAYGATE_URL", default_value = "http://127.0.0.1:8402")]
    url: String,
    /// Admin token (read from the environment; never pass it on a shared command line).
    #[arg(long, env = "PAYGATE_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an organisation; prints its first API key (shown once).
    CreateOrg {
        #[arg(long)]
        slug: String,
        #[arg(long)]
        name: Option<String>,
        /// Payee address for gateway payments (0x...).
        #[arg(long)]
        receiver_wallet: Option<String>,
        #[arg(long)]
        plan: Option<String>,
    },
    /// List organisations.
    ListOrgs,
    /// Show one organisation.
    GetOrg { slug: String },
    /// Change an organisation: suspension, receiver wallet ("none" clears it), plan, name.
    UpdateOrg {
        slug: String,
        #[arg(long)]
        suspended: Option<bool>,
        #[arg(long)]
        receiver_wallet: Option<String>,
        #[arg(long)]
        plan: Option<String>,
        #[arg(long)]
        name: Option<String>,
        /// Daily cap on MCP tool-call spending in USD ("default" returns to the configured one).
        #[arg(long)]
        mcp_daily_cap_usd: Option<String>,
        /// Corridor platform fee in basis points, 25 to 65 ("default" returns to the configured).
        #[arg(long)]
        platform_fee_bps: Option<String>,
    },
    /// Approve a corridor's KYC: PENDING_KYC -> ACTIVE.
    ApproveKyc { corridor_id: String },
    /// Create another API key for an organisation (shown once).
    CreateKey { slug: String },
    /// List an organisation's keys (ids and dates only).
    ListKeys { slug: String },
    /// Revoke a key; effective immediately.
    RevokeKey { slug: String, key_id: String },
    /// Store the payer wallet for MCP tool calls; the private key is read from the environment
    /// variable named by --key-env (never from the command line, which shells keep).
    SetPayerWallet {
        slug: String,
        #[arg(long, default_value = "PAYGATE_PAYER_KEY")]
        key_env: String,
    },
}

pub fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(call(args))
}

async fn call(args: AdminArgs) -> anyhow::Result<ExitCode> {
    use reqwest::Method;
    let (method, path, body) = match args.command {
        AdminCommand::CreateOrg {
            slug,
            name,
            receiver_wallet,
            plan,
        } => {
            let mut b = json!({ "slug": slug });
            if let Some(v) = name {
                b["name"] = json!(v);
            }
            if let Some(v) = receiver_wallet {
                b["receiverWallet"] = json!(v);
            }
            if let Some(v) = plan {
                b["plan"] = json!(v);
            }
            (Method::POST, "/admin/orgs".to_string(), Some(b))
        }
        AdminCommand::ListOrgs => (Method::GET, "/admin/orgs".into(), None),
        AdminCommand::GetOrg { slug } => (Method::GET, format!("/admin/orgs/{slug}"), None),
        AdminCommand::UpdateOrg {
            slug,
            suspended,
            receiver_wallet,
            plan,
            name,
            mcp_daily_cap_usd,
            platform_fee_bps,
        } => {
            let mut b = json!({});
            if let Some(v) = mcp_daily_cap_usd {
                b["mcpDailyCapUSD"] = if v == "default" {
                    Value::Null
                } else {
                    json!(v)
                };
            }
            if let Some(v) = platform_fee_bps {
                b["platformFeeBps"] = match v.as_str() {
                    "default" => Value::Null,
                    n => json!(n
                        .parse::<u64>()
                        .map_err(|_| anyhow::anyhow!("--platform-fee-bps takes a number"))?),
                };
            }
            if let Some(v) = suspended {
                b["suspended"] = json!(v);
            }
            if let Some(v) = receiver_wallet {
                b["receiverWallet"] = if v == "none" { Value::Null } else { json!(v) };
            }
            if let Some(v) = plan {
                b["plan"] = json!(v);
            }
            if let Some(v) = name {
                b["name"] = json!(v);
            }
            (Method::PATCH, format!("/admin/orgs/{slug}"), Some(b))
        }
        AdminCommand::ApproveKyc { corridor_id } => (
            Method::POST,
            format!("/admin/corridors/{corridor_id}/approve-kyc"),
            None,
        ),
        AdminCommand::CreateKey { slug } => {
            (Method::POST, format!("/admin/orgs/{slug}/keys"), None)
        }
        AdminCommand::ListKeys { slug } => (Method::GET, format!("/admin/orgs/{slug}/keys"), None),
        AdminCommand::SetPayerWallet { slug, key_env } => {
            let key = std::env::var(&key_env)
                .map_err(|_| anyhow::anyhow!("set {key_env} to the payer's private key"))?;
            (
                Method::PUT,
                format!("/admin/orgs/{slug}/payer-wallet"),
                Some(json!({ "privateKey": key })),
            )
        }
        AdminCommand::RevokeKey { slug, key_id } => (
            Method::DELETE,
            format!("/admin/orgs/{slug}/keys/{key_id}"),
            None,
        ),
    };
    let url = format!("{}{}", args.url.trim_end_matches('/'), path);
    let mut req = reqwest::Client::new()
        .request(method, &url)
        .bearer_auth(&args.token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    let pretty = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text);
    if status.is_success() {
        if !pretty.is_empty() {
            println!("{pretty}");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{status}\n{pretty}");
        Ok(ExitCode::FAILURE)
    }
}
