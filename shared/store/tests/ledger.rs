//! The payments ledger (`PaymentStore::list_payments`) on both backends: every filter and
//! their combinations, pages that follow a cursor, a time range as an id range, and status
//! changes that move a payment between the status filters. The oracle is the same query run
//! over every stored payment in memory.

mod common;

use common::{payment, Both};
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_store::PaymentQuery;

/// 60 payments of two orgs, three routes, two payers; ids ascending with time.
fn history() -> Vec<GatewayPayment> {
    (0..60)
        .map(|i| {
            let mut p = payment(&format!("pay_{i:04}"), &format!("n{i}"));
            p.org_id = if i % 5 == 4 { "o2" } else { "o1" }.into();
            p.route_id = format!("r{}", i % 3);
            p.payer = if i % 2 == 0 { "0xAbC" } else { "0xdef" }.into();
            p.status = match i % 7 {
                0 => PaymentStatus::Failed,
                1 => PaymentStatus::Reserved,
                _ => PaymentStatus::Settled,
            };
            p
        })
        .collect()
}

fn expected(all: &[GatewayPayment], org: &str, q: &PaymentQuery) -> Vec<String> {
    let mut v: Vec<_> = all
        .iter()
        .filter(|p| p.org_id == org && q.admits(p))
        .map(|p| p.id.clone())
        .collect();
    v.sort_by(|a, b| b.cmp(a));
    v.truncate(q.limit);
    v
}

#[tokio::test]
async fn filters_cursors_and_time_ranges_read_the_same_payments_on_both_backends() {
    let both = Both::new().await;
    let mut all = history();
    for (name, s) in both.each() {
        for p in &all {
            s.reserve_payment(p).await.unwrap();
        }
        // A status change after the fact: the status filters follow it.
        let mut changed = all[1].clone();
        changed.status = PaymentStatus::Settled;
        s.update_payment(&changed).await.unwrap();
        all[1] = changed;

        let routes = [None, Some("r1".to_string())];
        let payers = [None, Some("0xabc".to_string())];
        let statuses = [
            None,
            Some(PaymentStatus::Settled),
            Some(PaymentStatus::Reserved),
        ];
        let ranges = [
            (None, None),
            (Some("pay_0010".to_string()), Some("pay_0040".to_string())),
        ];
        let mut pages = 0;
        for route_id in &routes {
            for payer in &payers {
                for status in statuses {
                    for (from_id, before_id) in &ranges {
                        let q = PaymentQuery {
                            route_id: route_id.clone(),
                            payer: payer.clone(),
                            status,
                            from_id: from_id.clone(),
                            before_id: before_id.clone(),
                            limit: 1000,
                        };
                        let want = expected(&all, "o1", &q);
                        // Page by page, 4 at a time, following the cursor.
                        let mut got = Vec::new();
                        let mut cursor = q.clone();
                        cursor.limit = 4;
                        loop {
                            let page = s.list_payments("o1", &cursor).await.unwrap();
                            pages += 1;
                            assert!(page.len() <= 4);
                            let Some(last) = page.last() else { break };
                            cursor.before_id = Some(last.id.clone());
                            got.extend(page.into_iter().map(|p| p.id));
                        }
                        assert_eq!(got, want, "{name}: {q:?}");
                    }
                }
            }
        }
        assert!(pages > 50, "{name}: {pages} pages");
        // Another org's payments never show; the payer filter ignores case.
        let q = PaymentQuery {
            payer: Some("0XABC".into()),
            limit: 100,
            ..Default::default()
        };
        let o2 = s.list_payments("o2", &q).await.unwrap();
        assert!(
            !o2.is_empty() && o2.iter().all(|p| p.org_id == "o2"),
            "{name}"
        );
        assert_eq!(
            s.list_payments("nobody", &q).await.unwrap(),
            Vec::new(),
            "{name}"
        );
        // The payment whose status changed is found under its new status only.
        let reserved = PaymentQuery {
            status: Some(PaymentStatus::Reserved),
            limit: 100,
            ..Default::default()
        };
        let ids: Vec<_> = s
            .list_payments("o1", &reserved)
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect();
        assert!(!ids.contains(&"pay_0001".to_string()), "{name}: {ids:?}");
    }
}

/// Opens a sled database just closed: its file lock goes with the last of its background
/// threads, which may outlive the handle by a moment on a loaded machine.
async fn reopened<T, E: std::fmt::Debug>(open: impl Fn() -> Result<T, E>) -> T {
    for _ in 0..100 {
        match open() {
            Ok(db) => return db,
            Err(e) if format!("{e:?}").contains("WouldBlock") => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("open: {e:?}"),
        }
    }
    open().expect("the database's lock was never released")
}

/// A sled database written before the ledger's index existed gets it at the next open.
#[tokio::test]
async fn a_store_from_before_the_ledger_index_is_indexed_when_opened() {
    use paygate_store::PaymentStore;
    let dir = tempfile::tempdir().unwrap();
    {
        let s = paygate_store::SledStore::open(dir.path()).unwrap();
        for p in history().iter().take(10) {
            s.reserve_payment(p).await.unwrap();
        }
    }
    // Forget the index as an old store would lack it, then reopen.
    {
        let db = reopened(|| sled::open(dir.path())).await;
        db.drop_tree("payments_ledger").unwrap();
        db.open_tree("meta")
            .unwrap()
            .remove("payments_ledger.v1")
            .unwrap();
        db.flush().unwrap();
    }
    let s = reopened(|| paygate_store::SledStore::open(dir.path())).await;
    let q = PaymentQuery {
        limit: 100,
        ..Default::default()
    };
    let all = s.list_payments("o1", &q).await.unwrap();
    assert_eq!(
        all.len(),
        8,
        "{:?}",
        all.iter().map(|p| &p.id).collect::<Vec<_>>()
    );
}
