//! `paygate routes|payments|corridors|payouts ...`: an organisation's client of the management
//! and corridor APIs, its API key read from the environment (`PAYGATE_API_KEY`). Lists print one
//! line per item (`--json`: the API's JSON as it came); single records print as pretty JSON.

use crate::admin_cli::{given, print_answer, send};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Args)]
pub struct OrgArgs {
    /// Base URL of the running gateway.
    #[arg(
        long,
        env = "PAYGATE_URL",
        default_value = "http://127.0.0.1:8402",
        global = true
    )]
    url: String,
    /// The organisation's API key (read from the environment; never on a shared command line).
    #[arg(long, env = "PAYGATE_API_KEY", hide_env_values = true, global = true)]
    key: Option<String>,
    /// Print the API's JSON exactly as answered.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
pub enum RoutesCommand {
    /// The organisation's routes, newest first.
    List,
    /// One route.
    Get { id: String },
    /// Create a route.
    Create {
        /// Path below /gateway/{orgSlug}.
        #[arg(long)]
        path: String,
        /// USD per request (a decimal, at most 6 places).
        #[arg(long)]
        price: String,
        /// The upstream URL.
        #[arg(long)]
        target: String,
        #[arg(long, default_value = "base-sepolia")]
        network: String,
        #[arg(long)]
        description: Option<String>,
        /// Listed in discovery.
        #[arg(long)]
        discoverable: bool,
        /// Offered at /mcp/x402/{orgSlug}, paid by the calling agent.
        #[arg(long)]
        public_tool: bool,
        /// A way of paying the route offers, in order (repeat it): exact, upto,
        /// batch-settlement, auth-capture; without one, exact.
        #[arg(long = "scheme")]
        schemes: Vec<String>,
        /// `fixed` (default) or `usage` (the origin states the charge, at most the price).
        #[arg(long)]
        pricing: Option<String>,
        /// Seconds after the capture deadline an `auth-capture` payment may be refunded.
        #[arg(long)]
        refund_window: Option<u64>,
    },
    /// Change a route's price, activity, description or listings (only what is given).
    Update {
        /// The route's id (`rt_...`).
        id: String,
        /// USD per request (a decimal, at most 6 places).
        #[arg(long)]
        price: Option<String>,
        /// true or false.
        #[arg(long)]
        active: Option<bool>,
        #[arg(long)]
        description: Option<String>,
        /// Listed in discovery: true or false.
        #[arg(long)]
        discoverable: Option<bool>,
        /// Offered at /mcp/x402/{orgSlug}, paid by the calling agent: true or false.
        #[arg(long)]
        public_tool: Option<bool>,
    },
    /// Delete a route.
    Delete { id: String },
}

#[derive(Subcommand)]
pub enum PaymentsCommand {
    /// The ledger of gateway payments, newest first.
    List {
        #[arg(long)]
        route: Option<String>,
        /// RESERVED, SETTLED, FAILED or UNKNOWN.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        payer: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One payment with its transaction and receipt.
    Get { id: String },
    /// Refund a captured `auth-capture` payment to its payer, within its refund window.
    Refund {
        id: String,
        /// USD to refund (a decimal); without it, all that is refundable.
        #[arg(long)]
        amount: Option<String>,
        /// Any unique text: the same key never refunds twice (repeat it to learn the outcome).
        #[arg(long)]
        idempotency_key: String,
    },
}

/// The time range `paygate audit` reads (RFC 3339; `from` inclusive, `to` exclusive; either
/// may be left open).
#[derive(Args)]
pub struct AuditRange {
    /// Payments taken at or after this time (2026-11-28T00:00:00Z).
    #[arg(long)]
    from: Option<String>,
    /// Payments taken before this time.
    #[arg(long)]
    to: Option<String>,
}

/// `paygate audit`: the organisation's ledger against the chain; exits 1 when any payment
/// differs (each difference listed), 0 when none does.
pub fn audit(args: OrgArgs, range: AuditRange) -> anyhow::Result<ExitCode> {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in [("from", range.from), ("to", range.to)] {
        if let Some(v) = v {
            q.append_pair(k, &v);
        }
    }
    let path = format!("/api/ledger/audit?{}", q.finish());
    let key = args
        .key
        .clone()
        .ok_or_else(|| anyhow::anyhow!("set PAYGATE_API_KEY to the organisation's API key"))?;
    let (ok, answer) =
        crate::runtime::block_on(send(&args.url, &key, Method::GET, &path, None, &[]))??;
    let differs = answer
        .json
        .as_ref()
        .and_then(|v| v["differences"].as_array())
        .is_some_and(|d| !d.is_empty());
    let code = print_answer(ok, &answer, !args.json)?;
    Ok(if differs { ExitCode::FAILURE } else { code })
}

#[derive(Subcommand)]
pub enum CorridorsCommand {
    /// The organisation's payout corridors.
    List,
    /// Open a corridor to BRL, MXN, NGN, KES or ZAR (PENDING_KYC until the operator approves).
    Create { currency: String },
    /// An FX quote for an amount of USDC, with every fee (valid for payout.quote_ttl_seconds).
    Quote {
        /// The corridor's id (`cor_...`, from `corridors list`).
        corridor: String,
        /// USDC to pay out, a decimal with at most 6 places (e.g. 100 or 12.5).
        amount: String,
    },
}

#[derive(Subcommand)]
pub enum PayoutsCommand {
    /// A corridor's payouts, newest first.
    List { corridor: String },
    /// One payout with its status timeline.
    Get { corridor: String, id: String },
    /// Pay out a quote to a bank account. The same --idempotency-key never pays twice.
    Pay(Box<PayArgs>),
}

/// `payouts pay`: the corridor, the quote and the beneficiary.
#[derive(Args)]
pub struct PayArgs {
    /// The corridor's id (`cor_...`).
    corridor: String,
    /// The quote's id (`qt_...`, from `corridors quote`; single-use, it expires). Without it,
    /// the payout is quoted now for --amount, the quote shown, and paid at once.
    #[arg(long)]
    quote: Option<String>,
    /// The amount of USDC, exactly as quoted.
    #[arg(long)]
    amount: String,
    /// The wallet the payout is funded from (the organisation's payout wallet when payouts
    /// are funded on chain: GET /api/payout-wallet).
    #[arg(long)]
    from: String,
    /// Any unique text: the same key never pays twice (repeat it to learn the outcome).
    #[arg(long)]
    idempotency_key: String,
    /// The beneficiary's name.
    #[arg(long)]
    name: String,
    /// The bank (or, for a PIX key or an M-Pesa number, the institution).
    #[arg(long)]
    bank: String,
    /// The account number: a CLABE for MXN, a NUBAN for NGN (with --bank-code); not needed
    /// with --pix-key (BRL) or --mobile-number (KES).
    #[arg(long)]
    account: Option<String>,
    /// The beneficiary's country (BR, MX, NG, KE, ZA).
    #[arg(long)]
    country: String,
    /// The corridor's currency (BRL, MXN, NGN, KES, ZAR).
    #[arg(long)]
    currency: String,
    /// BRL: a PIX key (CPF, CNPJ, e-mail, +55 phone or random key).
    #[arg(long)]
    pix_key: Option<String>,
    /// NGN: the bank's NUBAN code (3 or 6 digits).
    #[arg(long)]
    bank_code: Option<String>,
    /// ZAR: the branch code (6 digits).
    #[arg(long)]
    branch_code: Option<String>,
    /// KES: an M-Pesa number instead of a bank account.
    #[arg(long)]
    mobile_number: Option<String>,
}

/// One resource command, as the API call it makes and how a list is summarised.
struct Call {
    method: Method,
    path: String,
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
    /// For a list: the field holding the items (`""`: the answer is the array), and the
    /// fields shown per line.
    list: Option<(&'static str, &'static [&'static str])>,
}

fn call(method: Method, path: String, body: Option<Value>) -> Call {
    Call {
        method,
        path,
        body,
        headers: Vec::new(),
        list: None,
    }
}

fn listing(path: String, field: &'static str, shown: &'static [&'static str]) -> Call {
    Call {
        list: Some((field, shown)),
        ..call(Method::GET, path, None)
    }
}

pub fn routes(args: OrgArgs, cmd: RoutesCommand) -> anyhow::Result<ExitCode> {
    let c = match cmd {
        RoutesCommand::List => listing(
            "/api/routes".into(),
            "",
            &["id", "path", "priceUSD", "network", "active"],
        ),
        RoutesCommand::Get { id } => call(Method::GET, format!("/api/routes/{id}"), None),
        RoutesCommand::Create {
            path,
            price,
            target,
            network,
            description,
            discoverable,
            public_tool,
            schemes,
            pricing,
            refund_window,
        } => {
            let b = given([
                ("path", Some(json!(path))),
                ("priceUSD", Some(json!(price))),
                ("targetUrl", Some(json!(target))),
                ("network", Some(json!(network))),
                ("discoverable", Some(json!(discoverable))),
                ("publicTool", Some(json!(public_tool))),
                ("description", description.map(Value::from)),
                ("schemes", (!schemes.is_empty()).then(|| json!(schemes))),
                ("pricing", pricing.map(Value::from)),
                ("refundWindowSeconds", refund_window.map(Value::from)),
            ]);
            call(Method::POST, "/api/routes".into(), Some(b))
        }
        RoutesCommand::Update {
            id,
            price,
            active,
            description,
            discoverable,
            public_tool,
        } => {
            let b = given([
                ("priceUSD", price.map(Value::from)),
                ("active", active.map(Value::from)),
                ("description", description.map(Value::from)),
                ("discoverable", discoverable.map(Value::from)),
                ("publicTool", public_tool.map(Value::from)),
            ]);
            call(Method::PATCH, format!("/api/routes/{id}"), Some(b))
        }
        RoutesCommand::Delete { id } => call(Method::DELETE, format!("/api/routes/{id}"), None),
    };
    run(args, c)
}

pub fn payments(args: OrgArgs, cmd: PaymentsCommand) -> anyhow::Result<ExitCode> {
    let c = match cmd {
        PaymentsCommand::List {
            route,
            status,
            payer,
            limit,
        } => {
            let mut q = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in [("route", route), ("status", status), ("payer", payer)] {
                if let Some(v) = v {
                    q.append_pair(k, &v);
                }
            }
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
            let query = q.finish();
            listing(
                format!("/api/payments?{query}"),
                "payments",
                &[
                    "id",
                    "status",
                    "amountUSDC",
                    "payer",
                    "routePath",
                    "createdAt",
                ],
            )
        }
        PaymentsCommand::Get { id } => call(Method::GET, format!("/api/payments/{id}"), None),
        PaymentsCommand::Refund {
            id,
            amount,
            idempotency_key,
        } => Call {
            headers: vec![("Idempotency-Key", idempotency_key)],
            ..call(
                Method::POST,
                format!("/api/payments/{id}/refund"),
                Some(given([("amountUSDC", amount.map(Value::from))])),
            )
        },
    };
    run(args, c)
}

pub fn corridors(args: OrgArgs, cmd: CorridorsCommand) -> anyhow::Result<ExitCode> {
    let c = match cmd {
        CorridorsCommand::List => {
            listing("/corridors".into(), "", &["id", "destCurrency", "status"])
        }
        CorridorsCommand::Create { currency } => call(
            Method::POST,
            "/corridors".into(),
            Some(json!({ "destCurrency": currency })),
        ),
        CorridorsCommand::Quote { corridor, amount } => {
            let q = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("amount", &amount)
                .finish();
            call(
                Method::GET,
                format!("/corridors/{corridor}/quote?{q}"),
                None,
            )
        }
    };
    run(args, c)
}

pub fn payouts(args: OrgArgs, cmd: PayoutsCommand) -> anyhow::Result<ExitCode> {
    let c = match cmd {
        PayoutsCommand::List { corridor } => listing(
            format!("/corridors/{corridor}/payments"),
            "payments",
            &[
                "paymentId",
                "status",
                "amountUSDC",
                "destAmount",
                "createdAt",
            ],
        ),
        PayoutsCommand::Get { corridor, id } => call(
            Method::GET,
            format!("/corridors/{corridor}/payments/{id}"),
            None,
        ),
        PayoutsCommand::Pay(pay) => {
            let PayArgs {
                corridor,
                quote,
                amount,
                from,
                idempotency_key,
                name,
                bank,
                account,
                country,
                currency,
                pix_key,
                bank_code,
                branch_code,
                mobile_number,
            } = *pay;
            let quote = match quote {
                Some(q) => q,
                None => match quote_now(&args, &corridor, &amount)? {
                    Ok(q) => q,
                    Err(refused) => return Ok(refused),
                },
            };
            let mut beneficiary = json!({"name": name, "bankName": bank, "country": country,
                                         "currency": currency});
            for (field, v) in [
                ("accountNumber", account),
                ("pixKey", pix_key),
                ("bankCode", bank_code),
                ("branchCode", branch_code),
                ("mobileNumber", mobile_number),
            ] {
                if let Some(v) = v {
                    beneficiary[field] = json!(v);
                }
            }
            Call {
                headers: vec![("Idempotency-Key", idempotency_key)],
                ..call(
                    Method::POST,
                    format!("/corridors/{corridor}/pay"),
                    Some(json!({
                        "quoteId": quote, "amountUSDC": amount, "fromAddress": from,
                        "beneficiary": beneficiary,
                    })),
                )
            }
        }
    };
    run(args, c)
}

/// `payouts pay` without `--quote`: a quote for `amount` now, shown on stderr (every fee and
/// what the beneficiary receives), and its id; or the refusal, already printed.
fn quote_now(
    args: &OrgArgs,
    corridor: &str,
    amount: &str,
) -> anyhow::Result<Result<String, ExitCode>> {
    let key = args
        .key
        .clone()
        .ok_or_else(|| anyhow::anyhow!("set PAYGATE_API_KEY to the organisation's API key"))?;
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("amount", amount);
    let path = format!("/corridors/{corridor}/quote?{}", q.finish());
    let (ok, answer) =
        crate::runtime::block_on(send(&args.url, &key, Method::GET, &path, None, &[]))??;
    let quote = answer.json.clone().unwrap_or_default();
    let id = quote["quoteId"].as_str().map(str::to_string);
    let (true, Some(id)) = (ok, id) else {
        return print_answer(false, &answer, !args.json).map(Err);
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    eprintln!(
        "quote {id}: {} USDC -> {} {} at {} (fees {} USDC: platform {}, rail {}); expires {}",
        text(&quote["amount"]),
        text(&quote["destAmount"]),
        text(&quote["destCurrency"]),
        text(&quote["fxRate"]),
        text(&quote["fees"]["total"]),
        text(&quote["fees"]["platformFee"]),
        text(&quote["fees"]["railFee"]),
        text(&quote["expiresAt"]),
    );
    Ok(Ok(id))
}

fn run(args: OrgArgs, c: Call) -> anyhow::Result<ExitCode> {
    let key = args
        .key
        .clone()
        .ok_or_else(|| anyhow::anyhow!("set PAYGATE_API_KEY to the organisation's API key"))?;
    let (ok, answer) =
        crate::runtime::block_on(send(&args.url, &key, c.method, &c.path, c.body, &c.headers))??;
    let summary = match (ok, args.json, c.list, &answer.json) {
        (true, false, Some((field, shown)), Some(v)) => {
            let items = if field.is_empty() { v } else { &v[field] };
            items.as_array().map(|items| lines(items, shown))
        }
        _ => None,
    };
    match summary {
        Some(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        None => print_answer(ok, &answer, !args.json),
    }
}

/// One line per item: the shown fields, tab-separated, under a header line.
fn lines(items: &[Value], shown: &[&str]) -> String {
    let mut out = shown.join("\t") + "\n";
    for item in items {
        let cells: Vec<String> = shown
            .iter()
            .map(|f| match &item[*f] {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                // Rust's float Display never uses an exponent (`0.000001`, not `1e-6`).
                Value::Number(n) if n.is_f64() => {
                    n.as_f64().map(|f| f.to_string()).unwrap_or_default()
                }
                v => v.to_string(),
            })
            .collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    out
}
