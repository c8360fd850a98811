//! A payment reserved with the plan slot its record names (a cluster's slots), on both
//! backends: the slot is taken in the reservation's transaction, or nothing is written; the same
//! payment presented again takes no second slot.

use paygate_domain::model::PlanSlot;
use paygate_store::PaymentReservation;

mod common;
use common::{payment, Both};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_takes_its_plan_slot_or_nothing() {
    let both = Both::new().await;
    for (name, s) in both.each() {
        let slot = Some(PlanSlot {
            month: "2026-11".into(),
            limit: 2,
        });
        let with_slot = |id: &str, nonce: &str| {
            let mut p = payment(id, nonce);
            p.plan_slot = slot.clone();
            p
        };
        let first = with_slot("pay_1", "n1");
        assert_eq!(
            s.reserve_payment(&first).await.unwrap(),
            PaymentReservation::Reserved
        );
        assert!(
            matches!(
                s.reserve_payment(&with_slot("pay_1b", "n1")).await.unwrap(),
                PaymentReservation::Held(_)
            ),
            "{name}: the same payment again"
        );
        assert_eq!(
            s.reserve_payment(&with_slot("pay_2", "n2")).await.unwrap(),
            PaymentReservation::Reserved
        );
        assert_eq!(s.plan_usage("o1", "2026-11").await.unwrap(), 2, "{name}");
        assert_eq!(
            s.reserve_payment(&with_slot("pay_3", "n3")).await.unwrap(),
            PaymentReservation::OverPlan,
            "{name}"
        );
        assert!(
            s.payment_for_nonce("n3").await.unwrap().is_none(),
            "{name}: nothing written"
        );
        assert_eq!(s.plan_usage("o1", "2026-11").await.unwrap(), 2, "{name}");
        // Without a slot (one node, slots in memory), a reservation counts nothing here.
        assert_eq!(
            s.reserve_payment(&payment("pay_4", "n4")).await.unwrap(),
            PaymentReservation::Reserved
        );
        assert_eq!(s.plan_usage("o1", "2026-11").await.unwrap(), 2, "{name}");
    }
}
