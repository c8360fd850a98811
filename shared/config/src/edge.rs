//! The edge sections (issue 18): TLS on the public listener, and the rate limits.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// TLS on a second public listener (rustls), with HTTP/2 through ALPN.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Address of the TLS listener, e.g. `0.0.0.0:8443`; empty: no TLS listener. Port 0 picks a
    /// free port (written to `paygate.addr` as `tlsListen`).
    pub listen: String,
    /// PEM certificate chain and private key served when no SNI certificate matches.
    pub cert: String,
    pub key: String,
    /// More certificates, chosen by the name the client asks for (SNI).
    pub sni: Vec<SniCertificate>,
    /// Offer HTTP/2 through ALPN (HTTP/1.1 stays available).
    pub h2: bool,
    /// Seconds between checks of the certificate files: a changed file is loaded without a
    /// restart (a file that cannot be loaded keeps the previous certificate, and an ERROR line).
    pub reload_check_seconds: u64,
}

/// A certificate for the names in `names` (exact, or `*.example.com` for one label).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SniCertificate {
    pub names: Vec<String>,
    pub cert: String,
    pub key: String,
}

impl TlsConfig {
    pub fn enabled(&self) -> bool {
        !self.listen.trim().is_empty()
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        self.listen
            .trim()
            .parse::<SocketAddr>()
            .map_err(|_| format!("server.tls.listen {:?} is not an address", self.listen))?;
        if self.cert.trim().is_empty() || self.key.trim().is_empty() {
            return Err(
                "server.tls.cert and server.tls.key are required with server.tls.listen".into(),
            );
        }
        for s in &self.sni {
            if s.names.is_empty() || s.cert.trim().is_empty() || s.key.trim().is_empty() {
                return Err("each server.tls.sni entry needs names, cert and key".into());
            }
        }
        if self.reload_check_seconds == 0 {
            return Err("server.tls.reload_check_seconds must be at least 1".into());
        }
        Ok(())
    }
}

/// One rate: a steady number of requests per second, and the burst that may be spent at once
/// (`0`: as many as `per_second`). `per_second = 0` turns the limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rate {
    pub per_second: u32,
    pub burst: u32,
}

impl Default for Rate {
    fn default() -> Self {
        Self::OFF
    }
}

impl Rate {
    pub const OFF: Self = Self {
        per_second: 0,
        burst: 0,
    };

    pub const fn new(per_second: u32, burst: u32) -> Self {
        Self { per_second, burst }
    }

    pub fn enabled(&self) -> bool {
        self.per_second > 0
    }
}

/// Rate limits on the public listener, applied in the proxy before any signature work
/// (`429 TOO_MANY_REQUESTS` with `Retry-After`). Each is kept per node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Every request of one client address, on every public path.
    pub client: Rate,
    /// Paid calls carrying one payer's payments, counted once the signature is checked (so a
    /// forged `from` cannot spend another payer's allowance).
    pub payer: Rate,
    /// Calls carrying a payment to one route, whoever sends them (spares the route's origin).
    pub route: Rate,
    /// Load balancers or proxies in front of paygate: a request from one of these networks is
    /// counted against the last address of its `X-Forwarded-For` that is not one of them.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// IPv6 clients are counted per prefix of this length (one host usually holds a /64).
    pub ipv6_prefix: u8,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            client: Rate::new(1000, 2000),
            payer: Rate::new(100, 200),
            route: Rate::OFF,
            trusted_proxies: Vec::new(),
            ipv6_prefix: 64,
        }
    }
}

impl LimitsConfig {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.ipv6_prefix == 0 || self.ipv6_prefix > 128 {
            return Err("limits.ipv6_prefix must be between 1 and 128".into());
        }
        Ok(())
    }
}
