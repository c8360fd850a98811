//! The floor the benchmarks measure paygate against: the least a Pingora proxy service can do.
//! `402` mode answers every request in `request_filter` with a fixed 402 whose body is the
//! given file; `proxy` mode forwards every request to one upstream address. Nothing else (no
//! lookup, no request id, no metrics); same listener settings as `paygate serve`.
//!
//! `minimal_pingora <listen-addr> 402 <body-file> [threads [pool]]` or
//! `minimal_pingora <listen-addr> proxy <upstream-addr> [threads [pool]]`; one worker thread
//! unless given (as `paygate serve`'s `server.threads`), no work stealing, and Pingora's upstream
//! keep-alive pool of 128 unless given (`server.upstream_keepalive_pool_size`).

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

struct Minimal {
    /// `Some`: answer with this 402 body; `None`: forward to `upstream`.
    body: Option<Bytes>,
    upstream: std::net::SocketAddr,
}

#[async_trait]
impl ProxyHttp for Minimal {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let Some(body) = &self.body else {
            return Ok(false);
        };
        let mut resp = ResponseHeader::build(402, Some(2))?;
        resp.insert_header("content-type", "application/json")?;
        resp.insert_header("content-length", body.len())?;
        session.write_response_header(Box::new(resp), false).await?;
        session
            .write_response_body(Some(body.clone()), true)
            .await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: minimal_pingora <listen-addr> (402 <body-file> | proxy <upstream-addr>) [threads [pool]]"
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, mode, arg, rest) = match args.as_slice() {
        [listen, mode, arg, rest @ ..] if rest.len() <= 2 => (listen, mode, arg, rest),
        _ => usage(),
    };
    let number = |i: usize, default: usize| {
        rest.get(i)
            .map_or(Ok(default), |n: &String| n.parse())
            .unwrap_or_else(|_| usage())
    };
    let (threads, pool) = (
        number(0, 1),
        number(1, ServerConf::default().upstream_keepalive_pool_size),
    );
    let app = match mode.as_str() {
        "402" => Minimal {
            body: Some(Bytes::from(std::fs::read(arg).unwrap_or_else(|_| usage()))),
            upstream: std::net::SocketAddr::from(([127, 0, 0, 1], 9)),
        },
        "proxy" => Minimal {
            body: None,
            upstream: arg.parse().unwrap_or_else(|_| usage()),
        },
        _ => usage(),
    };
    let conf = ServerConf {
        threads,
        work_stealing: false,
        upstream_keepalive_pool_size: pool,
        // Stop at once on SIGTERM, as the benchmarked paygate does (grace period 0): Pingora's
        // default drain kept a stopped floor process spinning beside the next measurements.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc = http_proxy_service(&server.configuration, app);
    svc.add_listener(
        ListenerConfig::tcp(listen.as_str())
            .l4_buffer(L4BufferSettings::default().write(16 * 1024)),
    );
    server.add_service(svc);
    server.run_forever();
}
