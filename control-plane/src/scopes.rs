//! What each endpoint an organisation's key reaches needs of the key's role (issue 32, scoped
//! keys): one table, by method and route pattern, read by the `OrgAuth` extractor before any
//! handler runs. Reading needs `read`, except what reveals a credential or spends the
//! organisation's wallet; a write needs the role of what it changes; anything not named here
//! needs `full`, so an endpoint added later is closed to limited keys until it is declared.

use axum::http::Method;
use paygate_domain::model::KeyRole;

/// The role `method` on the route pattern `path` needs.
pub fn need(method: &Method, path: &str) -> KeyRole {
    let reads = *method == Method::GET || *method == Method::HEAD;
    match path {
        // The organisation's MCP endpoints call paid tools with its payer wallet.
        p if p == "/mcp" || p.starts_with("/mcp/") => KeyRole::Full,
        // The origin secret is a credential; keys make keys.
        "/api/origin-secret" | "/api/origin-secret/rotate" => KeyRole::Full,
        "/api/keys" | "/api/keys/{key_id}" if !reads => KeyRole::Full,
        "/api/routes" | "/api/routes/{id}" if !reads => KeyRole::Routes,
        "/corridors"
        | "/corridors/{id}/pay"
        | "/corridors/{id}/payments/{payment_id}/rfi"
        | "/corridors/{id}/payments/{payment_id}/refresh"
        | "/api/channels/claim"
        | "/api/channels/{id}/refund"
        | "/api/payments/{id}/refund"
            if !reads =>
        {
            KeyRole::Payouts
        }
        // A quote is a read, but one the provider is asked for: the payouts role.
        "/corridors/{id}/quote" => KeyRole::Payouts,
        _ if reads => KeyRole::Read,
        _ => KeyRole::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_open_to_every_role_and_writes_to_theirs() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(need(&get, "/api/payments"), KeyRole::Read);
        assert_eq!(need(&get, "/api/gateway/metrics"), KeyRole::Read);
        assert_eq!(need(&post, "/api/routes"), KeyRole::Routes);
        assert_eq!(need(&Method::PATCH, "/api/routes/{id}"), KeyRole::Routes);
        assert_eq!(need(&post, "/corridors/{id}/pay"), KeyRole::Payouts);
        assert_eq!(need(&get, "/corridors/{id}/quote"), KeyRole::Payouts);
        assert_eq!(need(&post, "/api/keys"), KeyRole::Full);
        assert_eq!(need(&get, "/api/origin-secret"), KeyRole::Full);
        assert_eq!(need(&get, "/mcp/sse"), KeyRole::Full);
        assert_eq!(need(&post, "/something/new"), KeyRole::Full);
        assert!(KeyRole::Read.allows(KeyRole::Read));
        assert!(!KeyRole::Read.allows(KeyRole::Routes));
        assert!(!KeyRole::Routes.allows(KeyRole::Payouts));
        assert!(KeyRole::Payouts.allows(KeyRole::Payouts));
        assert!(KeyRole::Full.allows(KeyRole::Full));
        assert!(!KeyRole::Payouts.allows(KeyRole::Full));
    }
}
