//! Forwarding, continued: slow clients holding connections starve nobody.

use super::*;

/// Slowloris, what holds today (the open part is in SECURITY.md): connections that trickle a
/// request head byte by byte each hold one task and one read buffer, not a worker. With 300 of
/// them open, an honest client's unpaid call is still answered at once, a paid call is settled
/// and served, and the gateway's memory grows by a bounded amount per held connection.
#[tokio::test]
async fn slow_clients_holding_connections_do_not_starve_others() {
    use tokio::io::AsyncWriteExt;
    const SLOW: usize = 300;
    let s = setup(&[]).await;
    let up = Upstream::start().await;
    s.route("echo", &format!("{}/echo", up.url), false).await;
    let rss_before = s.gw.rss_kb();

    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", s.gw.port))
            .await
            .unwrap();
        c.write_all(b"GET /gateway/acme/echo HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(c);
    }
    // Keep trickling, one header byte per connection every 200 ms, until the honest client is
    // done: it must be answered while all the slow connections are held.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = tokio::spawn({
        let done = done.clone();
        async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for c in slow.iter_mut() {
                    c.write_all(b"X")
                        .await
                        .expect("a slow connection was closed");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            slow
        }
    });

    let honest = async {
        let r = s.gw.get("/gateway/acme/echo").await;
        assert_eq!(r.status(), 402);
        let r = s
            .paid(reqwest::Method::GET, "/gateway/acme/echo")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", s.gw.log());
    };
    // A liveness bound, not a performance one: starved, the calls would never be answered.
    tokio::time::timeout(Duration::from_secs(30), honest)
        .await
        .expect("an honest client was starved by slow ones");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(up.hits(), 1);
    let grown_kb = s.gw.rss_kb().saturating_sub(rss_before);
    let slow = trickle.await.unwrap();
    assert_eq!(slow.len(), SLOW);
    // At most 128 KiB per held connection (Pingora's head buffer is 64 KiB at most).
    assert!(
        grown_kb < (SLOW as u64) * 128,
        "RSS grew {grown_kb} KiB for {SLOW} slow connections"
    );
}
