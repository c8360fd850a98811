//! `paygate serve`: opens the store, builds the route table, binds the control plane's internal
//! listener, and runs the Pingora server (proxy service + control plane as a background service)
//! until SIGTERM/SIGINT; then flushes the store.

use crate::payout_setup::{build_payouts, notification_keys, Sandbox};
use crate::storage::{open_store, Opened};
use anyhow::Context;
use async_trait::async_trait;
use paygate_config::{Config, StorageBackend, StorageConfig};
use paygate_control_plane::AppState;
use paygate_gateway::payments::way::Parts;
use paygate_gateway::payments::PaymentService;
use paygate_gateway::route_table::{RenderContext, RouteTable};
use paygate_gateway::target_policy::TargetPolicy;
use paygate_proxy::{Gateway, GatewayParts, ProxySettings};
use paygate_store::postgres::PgStore;
use paygate_store::Store;
use paygate_x402::facilitator::Facilitator;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The axum control plane as a Pingora background service.
struct ControlPlane {
    listener: Mutex<Option<std::net::TcpListener>>,
    state: AppState,
}

#[async_trait]
impl BackgroundService for ControlPlane {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(std_listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        let listener = match tokio::net::TcpListener::from_std(std_listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "control plane listener unusable");
                return;
            }
        };
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        if let Err(e) = paygate_control_plane::serve(listener, self.state.clone(), stop).await {
            tracing::error!(error = %e, "control plane stopped");
        }
    }
}

/// On PostgreSQL: the other nodes' route and organisation changes, into this node's table; and
/// the relayer's lease kept.
struct Follower {
    table: Arc<RouteTable>,
    store: Arc<dyn Store>,
    pg: PgStore,
    every: Duration,
    relayer: Option<String>,
    /// The rate limits, shared among the live nodes ([`share_limits`]).
    limits: Arc<paygate_proxy::limits::Limits>,
    metrics: Arc<paygate_gateway::metrics::Metrics>,
}

#[async_trait]
impl BackgroundService for Follower {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let follow = paygate_gateway::follow::follow(
            self.table.clone(),
            self.store.clone(),
            self.pg.clone(),
            self.every,
        );
        let keep = crate::settlement::keep_relayer_lease(
            self.store.clone(),
            self.relayer.clone(),
            self.every,
        );
        let share = share_limits(self);
        tokio::select! {
            _ = follow => {}
            _ = keep => {}
            _ = share => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// How often a node says it is alive and learns how many share the rate limits.
const BEAT_EVERY: Duration = Duration::from_secs(5);

/// The rate limits hold across the cluster: every beat (at most [`BEAT_EVERY`], sooner with a
/// shorter resync interval), this node says it is alive and each limit becomes its share among
/// the nodes alive in the last three beats. No request waits for the database.
async fn share_limits(f: &Follower) {
    let every = f.every.min(BEAT_EVERY).max(Duration::from_millis(100));
    let stale = i64::try_from((every * 3).as_secs()).unwrap_or(15).max(1);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = i64::try_from(paygate_domain::unix_now()).unwrap_or(i64::MAX);
        match f.store.beat(now, stale).await {
            Ok(n) => {
                if n != f.metrics.limit_nodes() {
                    tracing::info!(nodes = n, "rate limits shared among the live nodes");
                }
                f.limits.set_nodes(n);
                f.metrics.set_limit_nodes(n);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cluster heartbeat failed; rate limit shares kept")
            }
        }
    }
}

/// `paygate migrate`: applies the PostgreSQL migrations and exits (waiting while the database
/// is unreachable, like `serve`).
pub fn migrate(config_path: Option<&Path>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load(config_path)?;
    if cfg.storage.backend != StorageBackend::Postgres {
        anyhow::bail!("paygate migrate is for storage.backend = \"postgres\"");
    }
    crate::runtime::block_on(open_store(&cfg.storage, |_| {}))??;
    tracing::info!("database migrated");
    Ok(ExitCode::SUCCESS)
}

pub fn run(config_path: Option<&Path>, upgrade: bool) -> anyhow::Result<ExitCode> {
    let mut cfg = Config::load(config_path)?;
    // Dropped at exit (after the server stopped): exports the last batch of spans.
    let _traces = crate::telemetry::init(Some(&cfg.telemetry))?;
    let listeners = bind_listeners(&mut cfg, upgrade)?;
    let cfg = Arc::new(cfg);
    warn_about(&cfg);
    // The startup runtime lives as long as the process and keeps a worker thread driving its
    // I/O: the PostgreSQL pool's first connections are opened here and stay registered with
    // this runtime's reactor when the proxy and control plane use them later (a current-thread
    // runtime, driven only inside `block_on`, would leave them hanging).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("paygate-startup")
        .enable_all()
        .build()?;
    std::fs::create_dir_all(&cfg.storage.path)
        .with_context(|| format!("creating {}", cfg.storage.path.display()))?;
    let mut server = pingora_server(&cfg, upgrade);
    let (dyn_store, pg) = match listeners.public {
        Some(public) => open_waiting(&rt, &cfg.storage, public)?,
        None => {
            // The running process hands its listening sockets over once told to (it keeps
            // serving meanwhile); then it drains and exits, letting go of a sled store.
            crate::handover::signal_running(&cfg)?;
            server.bootstrap();
            rt.block_on(crate::handover::open_after_upgrade(&cfg))?
        }
    };
    let table = Arc::new(rt.block_on(RouteTable::load(
        RenderContext::from_config(&cfg),
        dyn_store.as_ref(),
    ))?);
    let cp_listener = std::net::TcpListener::bind(cfg.server.control_plane_listen)
        .with_context(|| format!("binding {}", cfg.server.control_plane_listen))?;
    cp_listener.set_nonblocking(true)?;
    let cp_addr = cp_listener.local_addr()?;
    server.bootstrap();
    std::fs::write(
        crate::handover::pid_file(&cfg),
        std::process::id().to_string(),
    )
    .with_context(|| format!("writing {}", crate::handover::pid_file(&cfg).display()))?;

    let paid = paid_path(&cfg, &rt, &dyn_store, &table, pg.is_some())?;
    let limits = Arc::new(paygate_proxy::limits::Limits::from_config(&cfg.limits));
    add_proxy(
        &mut server,
        &cfg,
        (&paid, &limits),
        &table,
        cp_addr,
        &listeners.tls,
    )?;
    let final_metrics = paid.metrics.clone();
    let started = Started {
        store: dyn_store.clone(),
        table,
        pg,
        cp_listener,
        limits,
    };
    add_services(&mut server, &cfg, started, paid)?;
    tracing::info!(
        listen = %cfg.server.listen,
        public_base_url = %cfg.server.public_base_url(),
        control_plane = %cp_addr,
        storage = %cfg.storage.path.display(),
        admin_api = cfg.admin.token().is_some(),
        "paygate starting"
    );
    // Pingora binds the TLS address itself (the plain one was let go after the waiting room).
    drop(listeners.tls);
    server.run(RunArgs::default());
    // Pingora has stopped its runtimes (after the grace period), which may have cut the
    // aggregator's own last flush: what it counted and did not store is stored here.
    rt.block_on(final_metrics.flush_now(dyn_store.as_ref()));
    rt.block_on(dyn_store.flush())?;
    tracing::info!("paygate stopped; store flushed");
    Ok(ExitCode::SUCCESS)
}

/// The public listeners, bound before anything else.
struct Listeners {
    /// The plain listener (`None` on an upgrade: the running process hands it over).
    public: Option<std::net::TcpListener>,
    /// The TLS listener (its socket `None` on an upgrade) and its certificates.
    tls: Option<(Option<std::net::TcpListener>, Arc<crate::tls::CertResolver>)>,
}

/// Start-up step 1: binds the public addresses (Pingora would panic on a taken one: this fails
/// early and clearly instead). Port 0 picks a free port here; the chosen address is written back
/// into `cfg`, used everywhere and written to `paygate.addr`. An upgrade binds nothing. The TLS
/// certificates are loaded now (a missing or unreadable one ends the start here, one line).
fn bind_listeners(cfg: &mut Config, upgrade: bool) -> anyhow::Result<Listeners> {
    let public = if upgrade {
        if cfg.server.listen.port() == 0 {
            anyhow::bail!(
                "--upgrade needs the address the running gateway listens on, not port 0 (server.listen)"
            );
        }
        None
    } else {
        let public = crate::handover::bind_public(cfg.server.listen)
            .with_context(|| format!("binding {}", cfg.server.listen))?;
        cfg.server.listen = public.local_addr()?;
        Some(public)
    };
    let tls = match cfg.server.tls.enabled() {
        false => None,
        true => {
            let addr: std::net::SocketAddr = cfg.server.tls.listen.trim().parse()?;
            let listener = match upgrade {
                true if addr.port() == 0 => anyhow::bail!(
                    "--upgrade needs the address the running gateway listens on, not port 0 (server.tls.listen)"
                ),
                true => None,
                false => {
                    let l = crate::handover::bind_public(addr)
                        .with_context(|| format!("binding {addr} (server.tls)"))?;
                    cfg.server.tls.listen = l.local_addr()?.to_string();
                    Some(l)
                }
            };
            let resolver = crate::tls::CertResolver::load(&cfg.server.tls)?;
            Some((listener, resolver))
        }
    };
    Ok(Listeners { public, tls })
}

/// Start-up step 2: what the operator must know about this configuration before anything runs.
fn warn_about(cfg: &Config) {
    if paygate_proxy::bench_free_pass() {
        tracing::warn!(
            "BENCHMARK BUILD: requests with x-paygate-bench-free skip payment; never deploy this binary"
        );
    }
    if paygate_domain::origin_proof::OriginProofKey::from_env(&cfg.orgs.master_key_env).is_none() {
        tracing::warn!(
            master_key_env = %cfg.orgs.master_key_env,
            "no master key: paid requests are forwarded without X-Paygate-Signature (origin proof)"
        );
    }
}

/// Start-up step 3: the Pingora server (threads, grace periods, pid file, upgrade socket).
fn pingora_server(cfg: &Config, upgrade: bool) -> Server {
    let conf = ServerConf {
        threads: cfg.server.threads,
        work_stealing: cfg.server.work_stealing,
        upstream_keepalive_pool_size: cfg.server.upstream_keepalive_pool_size,
        grace_period_seconds: Some(cfg.server.grace_period_seconds),
        graceful_shutdown_timeout_seconds: Some(cfg.server.graceful_shutdown_timeout_seconds),
        pid_file: crate::handover::pid_file(cfg).display().to_string(),
        upgrade_sock: cfg
            .storage
            .path
            .join("paygate_upgrade.sock")
            .display()
            .to_string(),
        ..ServerConf::default()
    };
    let opt = pingora::server::configuration::Opt {
        upgrade,
        ..Default::default()
    };
    Server::new_with_opt_and_conf(opt, conf)
}

/// What the paid path is built of, shared by the proxy and the control plane.
struct PaidPath {
    payments: Arc<paygate_gateway::payments::way::Payments>,
    metrics: Arc<paygate_gateway::metrics::Metrics>,
    policy: Arc<TargetPolicy>,
    /// This node's relayer account, on a cluster leased to it alone.
    relayer: Option<String>,
    /// Payment channels, where this deployment offers them (the control plane's API).
    channels: Option<Arc<paygate_gateway::channels::Channels>>,
    payout_funding: Option<(
        Arc<dyn paygate_payouts::funding::PayoutFunding>,
        paygate_sandbox::FundingChain,
    )>,
}

/// Start-up step 4: the facilitator(s), the relayer's lease on a cluster, plan usage, payment
/// channels, access windows and payout funding: the payment service.
fn paid_path(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    store: &Arc<dyn Store>,
    table: &RouteTable,
    cluster: bool,
) -> anyhow::Result<PaidPath> {
    let networks = &table.render_context().networks;
    let (facilitator, relayer, chain_calls) = crate::settlement::build_facilitator(cfg, networks)?;
    if let (true, Some(relayer)) = (cluster, &relayer) {
        rt.block_on(crate::settlement::claim_relayer(store.as_ref(), relayer))?;
    }
    let metrics = paygate_gateway::metrics::Metrics::new();
    // One node counts plan slots in memory; nodes sharing a database take them in it.
    let usage = Arc::new(match cfg.storage.backend {
        StorageBackend::Sled => paygate_gateway::usage::PlanUsage::new(store.clone()),
        StorageBackend::Postgres => paygate_gateway::usage::PlanUsage::shared(store.clone()),
    });
    // Seller webhook events, emitted where payments, channels, routes and payouts change.
    let events = Arc::new(paygate_gateway::events::Events::new(store.clone()));
    let payout_funding = crate::settlement::build_payout_funding(
        cfg,
        networks,
        facilitator.clone(),
        chain_calls.clone(),
    )?;
    let channels = crate::settlement::build_channels(
        cfg,
        store.clone(),
        chain_calls.clone(),
        metrics.clone(),
        events.clone(),
    );
    let public_base_url = &table.render_context().public_base_url;
    let origin = paygate_x402::siwx::Origin::of(public_base_url)
        .with_context(|| format!("server.public_base_url {public_base_url:?} is not a URL"))?;
    let windows =
        paygate_gateway::windows::Windows::new(store.clone(), chain_calls.clone(), origin);
    // Each way of paying takes the parts it needs.
    let parts = Parts {
        chain: chain_calls,
        channels: channels.clone(),
        windows: Some(Arc::new(windows)),
        metrics: Some(metrics.clone()),
        refund_lease: cfg.facilitator.in_flight(),
        refund_collector: cfg
            .facilitator
            .refund_collector
            .unwrap_or(paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS),
        terms: paygate_gateway::payments::registry::terms(cfg),
        mpp_secret: Some(crate::settlement::mpp_secret(cfg)),
        realm: Arc::from(crate::settlement::origin_host(public_base_url)),
        mpp_challenge_secs: cfg.facilitator.mpp_challenge_seconds,
    };
    let mut service =
        PaymentService::new(store.clone(), facilitator.clone(), usage, networks.clone())
            .with_events(events);
    if let Some(chain) = &parts.chain {
        service = service.with_chain(chain.clone());
    }
    if let Some(key) = paygate_domain::secrets::receipt_signer(&cfg.orgs.master_key_env) {
        service = service.with_receipt_key(key);
    }
    let payments = paygate_gateway::payments::registry::payments(service, &parts);
    let payments = Arc::new(payments);
    // What the facilitator settles, before the first probe: routes may be created at once.
    if let Some(f) = &facilitator {
        let timeout = Duration::from_secs(cfg.facilitator.request_timeout_seconds.clamp(1, 2));
        let asked = rt.block_on(async { tokio::time::timeout(timeout, f.supported()).await });
        if let Ok(Ok(kinds)) = asked {
            payments.settleable().learn_supported(&kinds);
        }
    }
    Ok(PaidPath {
        payments,
        metrics,
        policy: Arc::new(TargetPolicy::new(
            cfg.upstream.allow_private_networks.clone(),
        )),
        relayer,
        channels,
        payout_funding,
    })
}

/// Start-up step 5: the Pingora proxy service on the public listeners (plain, TLS, h2c), with
/// its rate limits' housekeeping and the certificate reloader.
fn add_proxy(
    server: &mut Server,
    cfg: &Arc<Config>,
    (paid, limits): (&PaidPath, &Arc<paygate_proxy::limits::Limits>),
    table: &Arc<RouteTable>,
    cp_addr: std::net::SocketAddr,
    tls: &Option<(Option<std::net::TcpListener>, Arc<crate::tls::CertResolver>)>,
) -> anyhow::Result<()> {
    let draining = crate::handover::watch_draining(server);
    server.add_service(background_service(
        "rate limit housekeeping",
        paygate_proxy::limits::LimitsHousekeeping(limits.clone()),
    ));
    let mut proxy = pingora::proxy::http_proxy_service_with_name(
        &server.configuration,
        Gateway::new(GatewayParts {
            table: table.clone(),
            control_plane: cp_addr,
            payments: paid.payments.clone(),
            settings: ProxySettings::from_config(&cfg.upstream, paid.policy.clone()),
            metrics: paid.metrics.clone(),
            limits: limits.clone(),
            draining,
        }),
        "paygate proxy",
    );
    // Pingora's default 1460-byte write buffer splits a 402 (about 1.6 KB with its two
    // requirement headers) into two sends; 16 KiB sends header and body in one.
    let l4_buffer = pingora::listeners::L4BufferSettings::default().write(16 * 1024);
    proxy.add_listener(
        pingora::listeners::ListenerConfig::tcp(cfg.server.listen.to_string()).l4_buffer(l4_buffer),
    );
    if let Some((_, resolver)) = tls {
        let mut settings = pingora::listeners::tls::TlsSettings::intermediate("", "")?;
        settings.set_cert_resolver(resolver.clone());
        if cfg.server.tls.h2 {
            settings.enable_h2();
        }
        proxy.add_listener(
            pingora::listeners::ListenerConfig::tcp(cfg.server.tls.listen.clone())
                .tls(settings)
                .l4_buffer(l4_buffer),
        );
        server.add_service(background_service(
            "TLS certificate reloader",
            crate::tls::CertReloader {
                resolver: resolver.clone(),
                config: cfg.server.tls.clone(),
            },
        ));
    }
    if cfg.server.h2c {
        if let Some(app) = proxy.app_logic_mut() {
            let mut options = pingora::apps::HttpServerOptions::default();
            options.h2c = true;
            app.server_options = Some(options);
        }
    }
    server.add_service(proxy);
    Ok(())
}

/// What the start-up opened that the remaining services take.
struct Started {
    store: Arc<dyn Store>,
    table: Arc<RouteTable>,
    pg: Option<PgStore>,
    cp_listener: std::net::TcpListener,
    limits: Arc<paygate_proxy::limits::Limits>,
}

/// Start-up step 6: the payout provider (and the built-in sandbox's own listener), the
/// addresses file, the cluster follower on PostgreSQL, and the control plane.
fn add_services(
    server: &mut Server,
    cfg: &Arc<Config>,
    started: Started,
    paid: PaidPath,
) -> anyhow::Result<()> {
    let Started {
        store,
        table,
        pg,
        cp_listener,
        limits,
    } = started;
    let cp_addr = cp_listener.local_addr()?;
    let (provider, secrets, sandbox_listener) = build_payouts(cfg)?;
    let sandbox_addr = sandbox_listener
        .as_ref()
        .map(|l| l.local_addr())
        .transpose()?;
    write_addresses(cfg, cp_addr, sandbox_addr)?;
    if let Some(listener) = sandbox_listener {
        let sandbox = Sandbox {
            listener: Mutex::new(Some(listener)),
            config: cfg.clone(),
            secret: secrets.first().cloned().unwrap_or_default(),
            chain: paid.payout_funding.as_ref().map(|(_, chain)| chain.clone()),
        };
        server.add_service(background_service("sandbox payout provider", sandbox));
    }
    if let Some(pg) = pg {
        server.add_service(background_service(
            "cluster follower",
            Follower {
                table: table.clone(),
                store: store.clone(),
                pg,
                every: Duration::from_secs(cfg.storage.resync_interval_seconds),
                relayer: paid.relayer,
                limits,
                metrics: paid.metrics.clone(),
            },
        ));
    }
    let notification_keys = notification_keys(cfg, sandbox_addr);
    let state = AppState::new(store, table, cfg.clone(), paid.policy)
        .with_payments(paid.payments)
        .with_channels(paid.channels)
        .with_metrics(paid.metrics)
        .with_payouts(provider, secrets)
        .with_payout_funding(paid.payout_funding.map(|(f, _)| f))
        .with_notification_keys(notification_keys);
    server.add_service(background_service(
        "control plane",
        ControlPlane {
            listener: Mutex::new(Some(cp_listener)),
            state,
        },
    ));
    Ok(())
}

/// Writes `{storage}/paygate.addr`: the addresses this process listens on, so whoever started
/// it with port 0 (the test harness, a supervisor) can read them back.
fn write_addresses(
    cfg: &Config,
    control_plane: std::net::SocketAddr,
    sandbox: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let doc = serde_json::json!({
        "listen": cfg.server.listen.to_string(),
        "tlsListen": cfg.server.tls.enabled().then(|| cfg.server.tls.listen.clone()),
        "controlPlane": control_plane.to_string(),
        "sandboxProvider": sandbox.map(|a| a.to_string()),
    });
    let path = cfg.storage.path.join("paygate.addr");
    let tmp = path.with_extension("addr.tmp");
    std::fs::write(&tmp, doc.to_string())
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("writing {}", path.display()))
}

/// Opens the store while the public listener answers `503` with the reason (its `/healthz`
/// says why the node waits), then lets the listener go for the proxy to bind.
fn open_waiting(
    rt: &tokio::runtime::Runtime,
    storage: &StorageConfig,
    public: std::net::TcpListener,
) -> anyhow::Result<Opened> {
    let reason = paygate_control_plane::WaitReason::default();
    reason.set("connecting to the database");
    public.set_nonblocking(true)?;
    let room = {
        let _in_rt = rt.enter();
        let listener = tokio::net::TcpListener::from_std(public)?;
        rt.spawn(paygate_control_plane::waiting_room(
            listener,
            reason.clone(),
        ))
    };
    let opened = rt.block_on(open_store(storage, |e| reason.set(e.to_string())));
    room.abort();
    // The aborted task drops the listener, so the port is free for Pingora.
    let _ = rt.block_on(room);
    opened
}
