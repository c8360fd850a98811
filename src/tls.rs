//! TLS on the public listener (issue 18): the certificates Pingora's rustls acceptor serves,
//! chosen by SNI, and reloaded from their files without a restart.

use anyhow::Context;
use arc_swap::ArcSwap;
use async_trait::async_trait;
use paygate_config::TlsConfig;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The certificates served: by SNI name, else the default.
#[derive(Debug)]
struct Certificates {
    default: Arc<CertifiedKey>,
    /// Lower-case names (`*.example.com` for one label) and their certificates.
    by_name: Vec<(String, Arc<CertifiedKey>)>,
}

impl Certificates {
    fn load(cfg: &TlsConfig) -> anyhow::Result<Self> {
        let default = certified_key(&cfg.cert, &cfg.key)?;
        let mut by_name = Vec::new();
        for entry in &cfg.sni {
            let key = certified_key(&entry.cert, &entry.key)?;
            for name in &entry.names {
                by_name.push((name.trim().to_ascii_lowercase(), key.clone()));
            }
        }
        Ok(Self { default, by_name })
    }

    fn for_name(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = name.map(str::to_ascii_lowercase) else {
            return self.default.clone();
        };
        let wildcard = name.split_once('.').map(|(_, rest)| format!("*.{rest}"));
        self.by_name
            .iter()
            .find(|(n, _)| *n == name)
            .or_else(|| {
                wildcard
                    .as_ref()
                    .and_then(|w| self.by_name.iter().find(|(n, _)| n == w))
            })
            .map_or_else(|| self.default.clone(), |(_, k)| k.clone())
    }
}

fn certified_key(cert: &str, key: &str) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .with_context(|| format!("reading the certificate chain {cert}"))?;
    if chain.is_empty() {
        anyhow::bail!("no certificate in {cert}");
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key {key}"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&private)
        .with_context(|| format!("the private key {key} is not a supported type"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .with_context(|| format!("the private key {key} does not belong to {cert}"))?;
    Ok(Arc::new(certified))
}

/// Serves the current certificates to Pingora's rustls acceptor.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<Certificates>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load().for_name(hello.server_name()))
    }
}

impl CertResolver {
    /// Loads every certificate now: an unreadable one is the start's error.
    pub fn load(cfg: &TlsConfig) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            current: ArcSwap::from_pointee(Certificates::load(cfg)?),
        }))
    }
}

/// The certificate files' modification times and sizes: a change reloads them.
fn fingerprint(cfg: &TlsConfig) -> Vec<Option<(SystemTime, u64)>> {
    let files = [&cfg.cert, &cfg.key]
        .into_iter()
        .chain(cfg.sni.iter().flat_map(|s| [&s.cert, &s.key]));
    files
        .map(|f| {
            std::fs::metadata(f)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
        })
        .collect()
}

/// Reloads the certificates when their files change.
pub struct CertReloader {
    pub resolver: Arc<CertResolver>,
    pub config: TlsConfig,
}

#[async_trait]
impl BackgroundService for CertReloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let every = Duration::from_secs(self.config.reload_check_seconds.max(1));
        let mut seen = fingerprint(&self.config);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => return,
            }
            let now = fingerprint(&self.config);
            if now == seen {
                continue;
            }
            match Certificates::load(&self.config) {
                Ok(certs) => {
                    self.resolver.current.store(Arc::new(certs));
                    seen = now;
                    tracing::info!("TLS certificates reloaded");
                }
                // Half-written files are retried at the next check; the old ones keep serving.
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "TLS certificates not reloaded; the previous ones keep serving")
                }
            }
        }
    }
}
