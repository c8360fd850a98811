//! The one reading of an EVM address from text, for every address paygate is given (wallets,
//! payment authorizations, facilitator requirements).

use alloy_primitives::Address;

/// A 0x-prefixed 40-hex-digit address, in any case; a mixed-case one must carry a valid
/// EIP-55 checksum.
pub fn parse_address(s: &str) -> Option<Address> {
    let hex = s.strip_prefix("0x")?;
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mixed =
        hex.bytes().any(|b| b.is_ascii_uppercase()) && hex.bytes().any(|b| b.is_ascii_lowercase());
    if mixed {
        Address::parse_checksummed(s, None).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(parse_address("0x209693bc6afc0c5328ba36faf03c514ef312287c").is_some());
        assert!(parse_address("0x209693BC6AFC0C5328BA36FAF03C514EF312287C").is_some());
        assert!(parse_address("0x209693Bc6afc0C5328bA36FaF03C514EF312287C").is_some());
        // Mixed case with a wrong checksum.
        assert!(parse_address("0x209693Bc6afc0C5328bA36FaF03C514EF312287c").is_none());
        assert!(parse_address("209693bc6afc0c5328ba36faf03c514ef312287c").is_none());
        assert!(parse_address("0x1234").is_none());
        assert!(parse_address("0xzz9693bc6afc0c5328ba36faf03c514ef312287c").is_none());
        assert!(parse_address("0x209693bc6afc0c5328ba36faf03c514ef312287c0").is_none());
    }
}
