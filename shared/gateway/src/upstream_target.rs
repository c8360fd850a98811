//! Where a route forwards to: a target URL parsed once (host, port, TLS, the `Host` header, path
//! and query). Used by the route table (a route's one target) and the balancer (each of several);
//! on its own so that neither imports the other for it.

/// Where a route forwards to, parsed once from its `targetUrl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    /// Host name or IP literal (without brackets).
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// The `Host` header to send (`host[:port]`).
    pub host_header: String,
    /// Path of the target URL.
    pub path: String,
    /// Query of the target URL, merged before the caller's query.
    pub query: Option<String>,
}

impl UpstreamTarget {
    pub fn parse(target_url: &str) -> Option<Self> {
        let url = url::Url::parse(target_url).ok()?;
        let tls = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let host = match url.host()? {
            url::Host::Domain(d) => d.to_string(),
            url::Host::Ipv4(ip) => ip.to_string(),
            url::Host::Ipv6(ip) => ip.to_string(),
        };
        let port = url.port_or_known_default()?;
        let host_header = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str()?),
            None => url.host_str()?.to_string(),
        };
        Some(Self {
            host,
            port,
            tls,
            host_header,
            path: url.path().to_string(),
            query: url.query().map(str::to_string),
        })
    }

    /// The upstream request's path and query: the target's, then the caller's query.
    pub fn path_and_query(&self, caller_query: Option<&str>) -> String {
        match (
            self.query.as_deref(),
            caller_query.filter(|q| !q.is_empty()),
        ) {
            (Some(a), Some(b)) => format!("{}?{a}&{b}", self.path),
            (Some(a), None) => format!("{}?{a}", self.path),
            (None, Some(b)) => format!("{}?{b}", self.path),
            (None, None) => self.path.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UpstreamTarget;

    #[test]
    fn upstream_targets_and_query_merging() {
        let t = UpstreamTarget::parse("https://api.example.com/v1/echo?key=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.tls),
            ("api.example.com", 443, true)
        );
        assert_eq!(t.host_header, "api.example.com");
        assert_eq!(t.path_and_query(Some("q=2")), "/v1/echo?key=1&q=2");
        assert_eq!(t.path_and_query(None), "/v1/echo?key=1");
        let t = UpstreamTarget::parse("http://127.0.0.1:8403").unwrap();
        assert_eq!(
            (t.port, t.tls, t.host_header.as_str()),
            (8403, false, "127.0.0.1:8403")
        );
        assert_eq!(t.path_and_query(Some("a=b")), "/?a=b");
        let t = UpstreamTarget::parse("http://[::1]:9000/x").unwrap();
        assert_eq!(t.host, "::1");
        assert!(UpstreamTarget::parse("ftp://x/").is_none());
    }
}
