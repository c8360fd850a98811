//! Access windows (issue 31): a payment for a route with `accessWindowSeconds` grants its payer
//! that route for the period (and, with `accessWindowCalls`, that many calls); the payer comes
//! back by signing in (x402's `sign-in-with-x`) instead of paying again.
//!
//! One window per (organisation, route, payer): a later payment opens a new one in its place.
//! Every call served through a window is counted in the same store step that spends the
//! sign-in's nonce, so a nonce is used once across every node and a window's calls never pass
//! its allowance.

use serde::{Deserialize, Serialize};

/// A payer's access to one route, opened by one settled payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessWindow {
    pub org_id: String,
    pub route_id: String,
    /// Lower-case hex address of the payer.
    pub payer: String,
    /// The payment that opened it.
    pub payment_id: String,
    /// Unix seconds.
    pub opened_at: u64,
    /// Unix seconds: served while `now < expires_at`.
    pub expires_at: u64,
    /// Calls the window allows beyond the paid one (`None`: any number within its period).
    pub calls_allowed: Option<u32>,
    /// Calls served through it by signing in.
    pub calls_used: u32,
}

impl AccessWindow {
    /// Whether it still serves at `now`: not ended, calls left.
    pub fn serves(&self, now: u64) -> bool {
        now < self.expires_at && self.calls_left() != Some(0)
    }

    /// Calls left (`None`: no count).
    pub fn calls_left(&self) -> Option<u32> {
        self.calls_allowed
            .map(|n| n.saturating_sub(self.calls_used))
    }
}

/// What the window's rules say of a call, before its nonce is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallCheck {
    /// The window serves: count the call on it once the nonce is spent
    /// ([`WindowUse::NonceUsed`] if it was).
    Serves(AccessWindow),
    /// The sign-in's outcome as it is (not paid, ended, calls used).
    Refused(WindowUse),
}

/// The rules of one sign-in's store step, the same on every backend: the stored window (none:
/// the signer never paid), still serving at `now`.
pub fn check_call(stored: Option<AccessWindow>, now: u64) -> CallCheck {
    let Some(w) = stored else {
        return CallCheck::Refused(WindowUse::NotPaid);
    };
    if now >= w.expires_at {
        return CallCheck::Refused(WindowUse::Ended(w));
    }
    if !w.serves(now) {
        return CallCheck::Refused(WindowUse::CallsUsed(w));
    }
    CallCheck::Serves(w)
}

impl AccessWindow {
    /// Counts a call served (its nonce spent in the same store step): the outcome to answer.
    pub fn count_call(&mut self) -> WindowUse {
        self.calls_used = self.calls_used.saturating_add(1);
        WindowUse::Granted(self.clone())
    }

    /// Gives back a call the origin did not serve, if the window is still the one `payment_id`
    /// opened (a later payment's window is not credited) and counted one; `false` when not.
    pub fn give_back_call(&mut self, payment_id: &str) -> bool {
        if self.payment_id != payment_id || self.calls_used == 0 {
            return false;
        }
        self.calls_used -= 1;
        true
    }
}

/// What a sign-in came to, decided with the nonce in one store step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowUse {
    /// Served: the window after this call was counted; the nonce is spent.
    Granted(AccessWindow),
    /// The signer never paid for this route (or its window was replaced by nothing).
    NotPaid,
    /// Its window ended at `expires_at`.
    Ended(AccessWindow),
    /// Its calls are used up.
    CallsUsed(AccessWindow),
    /// The nonce was spent by an earlier sign-in (on any node).
    NonceUsed,
}

/// The store key of a window: `org \0 route \0 payer`.
pub fn window_key(org_id: &str, route_id: &str, payer: &str) -> String {
    format!("{org_id}\0{route_id}\0{}", payer.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(calls_allowed: Option<u32>, calls_used: u32) -> AccessWindow {
        AccessWindow {
            org_id: "org".into(),
            route_id: "rt".into(),
            payer: "0xab".into(),
            payment_id: "pay".into(),
            opened_at: 100,
            expires_at: 200,
            calls_allowed,
            calls_used,
        }
    }

    #[test]
    fn a_window_serves_until_its_end_and_its_last_call() {
        assert!(window(None, 1_000).serves(199));
        assert!(!window(None, 0).serves(200), "ends at expires_at");
        assert!(window(Some(2), 1).serves(150));
        assert!(!window(Some(2), 2).serves(150), "calls used up");
        assert_eq!(window(Some(2), 5).calls_left(), Some(0));
        assert_eq!(window(None, 5).calls_left(), None);
    }

    #[test]
    fn a_sign_in_step_is_decided_by_the_same_rules_on_every_backend() {
        let refused = CallCheck::Refused;
        assert_eq!(check_call(None, 150), refused(WindowUse::NotPaid));
        let ended = window(None, 0);
        let outcome = check_call(Some(ended.clone()), 200);
        assert_eq!(outcome, refused(WindowUse::Ended(ended)));
        let used = window(Some(2), 2);
        let outcome = check_call(Some(used.clone()), 150);
        assert_eq!(outcome, refused(WindowUse::CallsUsed(used)));
        let CallCheck::Serves(mut w) = check_call(Some(window(Some(2), 1)), 150) else {
            panic!("a window with a call left serves");
        };
        assert_eq!(w.count_call(), WindowUse::Granted(window(Some(2), 2)));
        assert!(
            !w.give_back_call("another payment"),
            "a later window is not credited"
        );
        assert!(w.give_back_call("pay"));
        assert_eq!(w.calls_used, 1);
        let mut none = window(None, 0);
        assert!(
            !none.give_back_call("pay"),
            "nothing counted, nothing given back"
        );
    }
}
