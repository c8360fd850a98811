//! Access windows on both backends: a sign-in is served only through a window that still
//! serves, its nonce is spent once however many nodes race for it, and a window never serves
//! more calls than it allows.

use paygate_domain::window::{AccessWindow, WindowUse};

mod common;
use common::Both;

fn window(payment: &str, expires_at: u64, calls: Option<u32>) -> AccessWindow {
    AccessWindow {
        org_id: "org_a".into(),
        route_id: "rt_1".into(),
        payer: "0x00000000000000000000000000000000000000aa".into(),
        payment_id: payment.into(),
        opened_at: 1_000,
        expires_at,
        calls_allowed: calls,
        calls_used: 0,
    }
}

const PAYER: &str = "0x00000000000000000000000000000000000000AA";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_window_serves_its_calls_once_per_nonce_until_it_ends() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let use_at = |nonce: &'static str, now: u64| {
            let s = s.clone();
            async move {
                s.use_window("org_a", "rt_1", PAYER, nonce, now + 300, now)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(use_at("n0", 1_001).await, WindowUse::NotPaid, "{name}");
        s.open_window(&window("pay_1", 2_000, Some(2)))
            .await
            .unwrap();
        let WindowUse::Granted(w) = use_at("n1", 1_001).await else {
            panic!("{name}: first sign-in served")
        };
        assert_eq!((w.calls_used, w.calls_left()), (1, Some(1)), "{name}");
        // A call the origin did not serve is given back, once, and only to its own window.
        assert!(!s
            .return_window_call("org_a", "rt_1", PAYER, "pay_0")
            .await
            .unwrap());
        assert!(s
            .return_window_call("org_a", "rt_1", PAYER, "pay_1")
            .await
            .unwrap());
        assert!(!s
            .return_window_call("org_a", "rt_1", PAYER, "pay_1")
            .await
            .unwrap());
        let WindowUse::Granted(w) = use_at("n9", 1_001).await else {
            panic!("{name}: the call given back serves again")
        };
        assert_eq!(w.calls_used, 1, "{name}");
        assert_eq!(
            use_at("n1", 1_002).await,
            WindowUse::NonceUsed,
            "{name}: a nonce once"
        );
        // The same payment again (a retried request) keeps the count.
        s.open_window(&window("pay_1", 2_000, Some(2)))
            .await
            .unwrap();
        assert!(matches!(use_at("n2", 1_003).await, WindowUse::Granted(_)));
        assert!(
            matches!(use_at("n3", 1_004).await, WindowUse::CallsUsed(_)),
            "{name}: two calls allowed"
        );
        // A new payment opens a new window.
        s.open_window(&window("pay_2", 2_000, None)).await.unwrap();
        assert!(matches!(use_at("n3", 1_005).await, WindowUse::Granted(_)));
        assert!(
            matches!(use_at("n4", 2_000).await, WindowUse::Ended(_)),
            "{name}: ends at expires_at"
        );
        let other = s
            .use_window("org_b", "rt_1", PAYER, "n5", 1_300, 1_000)
            .await
            .unwrap();
        assert_eq!(other, WindowUse::NotPaid, "{name}: another organisation's");

        let active = s.active_windows("org_a", Some(PAYER), 1_500).await.unwrap();
        assert_eq!(active.len(), 1, "{name}");
        assert_eq!(active[0].payment_id, "pay_2");
        assert!(s
            .active_windows("org_a", Some("0xbb"), 1_500)
            .await
            .unwrap()
            .is_empty());
        assert!(s
            .active_windows("org_a", None, 2_000)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            s.prune_windows(5_000).await.unwrap(),
            5,
            "{name}: four nonces and the window"
        );
        assert_eq!(
            use_at("n6", 1_100).await,
            WindowUse::NotPaid,
            "{name}: pruned"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_sign_ins_never_pass_the_allowance_nor_reuse_a_nonce() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        s.open_window(&window("pay_1", 9_000, Some(5)))
            .await
            .unwrap();
        let race = |nonce: fn(usize) -> String| {
            let tasks: Vec<_> = (0..24)
                .map(|i| {
                    let s = s.clone();
                    tokio::spawn(async move {
                        s.use_window("org_a", "rt_1", PAYER, &nonce(i), 9_000, 1_000)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            async move {
                let mut granted = 0;
                for t in tasks {
                    granted += usize::from(matches!(t.await.unwrap(), WindowUse::Granted(_)));
                }
                granted
            }
        };
        assert_eq!(
            race(|_| "same".to_string()).await,
            1,
            "{name}: one nonce, one call"
        );
        assert_eq!(
            race(|i| format!("n{i}")).await,
            4,
            "{name}: five calls allowed, one already used"
        );
        let w = s.active_windows("org_a", None, 1_000).await.unwrap();
        assert!(w.is_empty(), "{name}: used up, so no longer active");
    }
}
