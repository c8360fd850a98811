//! The audit log on both backends: entries listed per organisation, newest first, page by page,
//! and never another organisation's.

use paygate_domain::audit::AuditEntry;
use paygate_domain::ids::new_id;

mod common;
use common::Both;

fn entry(org: &str, action: &str) -> AuditEntry {
    AuditEntry {
        id: new_id("aud"),
        org_id: org.into(),
        actor: "key:k1".into(),
        action: action.into(),
        target: "rt_1".into(),
        before: None,
        after: Some(serde_json::json!({"priceUSD": "0.01"})),
        from: Some("127.0.0.1".into()),
        request_id: Some("req".into()),
        at: paygate_domain::now_rfc3339(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_come_back_newest_first_per_organisation() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let mut written = Vec::new();
        for i in 0..5 {
            let e = entry("org_a", &format!("route.updated.{i}"));
            s.append_audit(&e).await.unwrap();
            written.push(e);
            s.append_audit(&entry("org_b", "key.created"))
                .await
                .unwrap();
        }
        let first = s.list_audit("org_a", None, 3).await.unwrap();
        let actions: Vec<_> = first.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(
            actions,
            ["route.updated.4", "route.updated.3", "route.updated.2"],
            "{name}"
        );
        assert_eq!(first[0], written[4], "{name}: stored whole");
        let rest = s.list_audit("org_a", Some(&first[2].id), 10).await.unwrap();
        let actions: Vec<_> = rest.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, ["route.updated.1", "route.updated.0"], "{name}");
        assert!(s.list_audit("org_c", None, 10).await.unwrap().is_empty());
        assert_eq!(s.list_audit("org_b", None, 10).await.unwrap().len(), 5);
    }
}
