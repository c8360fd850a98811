//! The public sockets across a process's life: bound at start (port 0 resolved below the
//! ephemeral range), handed over to a new process (`serve --upgrade`, Pingora's graceful
//! upgrade), and the draining flag once a hand-over or a shutdown begins.

use crate::storage::{open_store, Opened};
use anyhow::Context;
use paygate_config::Config;
use pingora::server::Server;
use std::sync::Arc;
use std::time::Duration;

/// Set once Pingora starts handing this process's sockets over (SIGQUIT) or shutting down
/// (SIGTERM), for the proxy to stop keeping connections alive.
pub(crate) fn watch_draining(server: &Server) -> Arc<std::sync::atomic::AtomicBool> {
    use pingora::server::ExecutionPhase;
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut phases = server.watch_execution_phase();
    let set = flag.clone();
    std::thread::spawn(move || {
        while let Ok(phase) = phases.blocking_recv() {
            if matches!(
                phase,
                ExecutionPhase::GracefulUpgradeTransferringFds
                    | ExecutionPhase::GracefulTerminate
                    | ExecutionPhase::ShutdownStarted
            ) {
                set.store(true, std::sync::atomic::Ordering::Relaxed);
                return;
            }
        }
    });
    flag
}

pub(crate) fn pid_file(cfg: &Config) -> std::path::PathBuf {
    cfg.storage.path.join("paygate.pid")
}

/// Tells the gateway running on this storage path (its pid file) to hand its listening sockets
/// over to this process and drain (SIGQUIT: Pingora's graceful upgrade).
pub(crate) fn signal_running(cfg: &Config) -> anyhow::Result<()> {
    let path = pid_file(cfg);
    let pid: i32 = std::fs::read_to_string(&path)
        .with_context(|| {
            format!(
                "--upgrade: reading the running gateway's pid from {}",
                path.display()
            )
        })?
        .trim()
        .parse()
        .with_context(|| format!("--upgrade: {} holds no pid", path.display()))?;
    // SAFETY: kill(2) with a pid read from our own pid file and a valid signal number.
    if unsafe { libc::kill(pid, libc::SIGQUIT) } != 0 {
        anyhow::bail!(
            "--upgrade: cannot signal the running gateway (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    tracing::info!(pid, "taking over from the running gateway");
    Ok(())
}

/// Opens the store once the process this one takes over from has let go of it (sled locks its
/// directory until that process exits, after draining).
pub(crate) async fn open_after_upgrade(cfg: &Config) -> anyhow::Result<Opened> {
    let patience = Duration::from_secs(
        30 + cfg.server.grace_period_seconds + cfg.server.graceful_shutdown_timeout_seconds,
    );
    let deadline = std::time::Instant::now() + patience;
    loop {
        match open_store(&cfg.storage, |_| {}).await {
            Ok(opened) => return Ok(opened),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!(error = %format!("{e:#}"), "store still held by the previous process");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.context("the previous process did not let go of the store")),
        }
    }
}

/// Binds the public address (and the sandbox provider's). The listener is let go before Pingora
/// binds it again, so port 0 is resolved to a free port *below* the kernel's ephemeral range: in
/// between, an outgoing connection of any process could otherwise take the port as its source
/// port and keep Pingora from binding it.
pub(crate) fn bind_public(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    if addr.port() != 0 {
        return std::net::TcpListener::bind(addr);
    }
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let range = 10_000..ephemeral_from;
    if range.len() < 1000 {
        return std::net::TcpListener::bind(addr);
    }
    for _ in 0..200 {
        let port = rand::Rng::gen_range(&mut rand::thread_rng(), range.clone());
        match std::net::TcpListener::bind(std::net::SocketAddr::new(addr.ip(), port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    std::net::TcpListener::bind(addr)
}
