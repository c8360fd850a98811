//! The check digits and shapes of the bank identifiers a payout names, per country: Brazil's PIX
//! keys (CPF and CNPJ with their check digits, e-mail, phone, random key), Mexico's CLABE,
//! Nigeria's NUBAN, Kenya's M-Pesa numbers, South Africa's branch codes. Each takes what a
//! person typed (spaces, dots, hyphens and slashes allowed where the usual written form has
//! them) and gives the identifier in one canonical form, or why not.

/// The digits of `s` once the usual separators are taken out; `None` if anything else is there.
fn digits_of(s: &str, separators: &[char]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.trim().chars() {
        if let Some(d) = c.to_digit(10) {
            out.push(d as u8);
        } else if !separators.contains(&c) {
            return None;
        }
    }
    Some(out)
}

fn text(d: &[u8]) -> String {
    d.iter().map(|v| char::from(b'0' + v)).collect()
}

fn all_same<T: PartialEq>(v: &[T]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// CPF: 11 digits, the last two mod-11 check digits over the ones before (weights counting down
/// to 2), a remainder of 10 counted as 0; eleven equal digits are not a CPF.
pub fn cpf(given: &str) -> Option<String> {
    let d = digits_of(given, &['.', '-', ' '])?;
    if d.len() != 11 || all_same(&d) {
        return None;
    }
    let check = |n: usize| {
        let sum: u32 = d[..n]
            .iter()
            .enumerate()
            .map(|(i, v)| u32::from(*v) * (n as u32 + 1 - i as u32))
            .sum();
        ((sum * 10) % 11 % 10) as u8
    };
    (check(9) == d[9] && check(10) == d[10]).then(|| text(&d))
}

/// CNPJ: 14 characters, the first 12 digits or (since July 2026) capital letters, the last two
/// mod-11 check digits over them (each character worth its ASCII code less 48; weights 2 to 9
/// from the right, repeating; a remainder below 2 counted as 0).
pub fn cnpj(given: &str) -> Option<String> {
    let chars: Vec<char> = given
        .trim()
        .chars()
        .filter(|c| !matches!(c, '.' | '/' | '-' | ' '))
        .collect();
    if chars.len() != 14 || all_same(&chars) {
        return None;
    }
    let base_ok = chars[..12]
        .iter()
        .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
    if !base_ok || !chars[12..].iter().all(char::is_ascii_digit) {
        return None;
    }
    let value = |c: char| u32::from(c) - 48;
    let check = |n: usize| {
        let sum: u32 = chars[..n]
            .iter()
            .rev()
            .enumerate()
            .map(|(i, c)| value(*c) * (2 + (i as u32 % 8)))
            .sum();
        match sum % 11 {
            0 | 1 => 0,
            r => 11 - r,
        }
    };
    (check(12) == value(chars[12]) && check(13) == value(chars[13])).then(|| chars.iter().collect())
}

/// A PIX key's kind and its canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PixKey {
    Cpf(String),
    Cnpj(String),
    Email(String),
    Phone(String),
    Random(String),
}

impl PixKey {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cpf(_) => "CPF",
            Self::Cnpj(_) => "CNPJ",
            Self::Email(_) => "EMAIL",
            Self::Phone(_) => "PHONE",
            Self::Random(_) => "EVP",
        }
    }

    pub fn key(&self) -> &str {
        match self {
            Self::Cpf(k) | Self::Cnpj(k) | Self::Email(k) | Self::Phone(k) | Self::Random(k) => k,
        }
    }
}

/// Why a PIX key is not one.
pub const PIX_RULE: &str = "must be a PIX key: a CPF or CNPJ with valid check digits, an e-mail \
                            address, a phone number as +55 and 10 or 11 digits, or a random key \
                            (UUID)";

/// Reads a PIX key: a phone (`+55`, a two-digit area code not starting with 0, 8 or 9 digits),
/// an e-mail (at most 77 characters), a random key (a UUID), else a CPF or CNPJ.
pub fn pix_key(given: &str) -> Option<PixKey> {
    let g = given.trim();
    if let Some(rest) = g.strip_prefix('+') {
        let d = digits_of(rest, &[' ', '-', '(', ')'])?;
        let ok = d.len() >= 12 && d.len() <= 13 && d[..2] == [5, 5] && d[2] != 0;
        return ok.then(|| PixKey::Phone(format!("+{}", text(&d))));
    }
    if g.contains('@') {
        let (local, domain) = g.split_once('@')?;
        let ok = g.len() <= 77
            && !local.is_empty()
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !domain.contains('@')
            && g.chars().all(|c| c.is_ascii_graphic());
        return ok.then(|| PixKey::Email(g.to_ascii_lowercase()));
    }
    if crate::cpn::is_uuid(g) {
        return Some(PixKey::Random(g.to_ascii_lowercase()));
    }
    cpf(g)
        .map(PixKey::Cpf)
        .or_else(|| cnpj(&g.to_ascii_uppercase()).map(PixKey::Cnpj))
}

/// CLABE: 18 digits (bank 3, branch 3, account 11, check 1); the check digit is `10 - (sum of
/// (digit x 3, 7, 1 repeating) mod 10, each product mod 10)`, mod 10.
pub fn clabe(given: &str) -> Option<String> {
    let d = digits_of(given, &[' ', '-'])?;
    if d.len() != 18 {
        return None;
    }
    let sum: u32 = d[..17]
        .iter()
        .zip([3u32, 7, 1].iter().cycle())
        .map(|(v, w)| (u32::from(*v) * w) % 10)
        .sum();
    ((10 - sum % 10) % 10 == u32::from(d[17])).then(|| text(&d))
}

/// NUBAN: a 10-digit account whose last digit checks the bank's code (3 digits, or the 6-digit
/// codes of the revised standard) and the 9-digit serial: `10 - (sum of digits x 3, 7, 3
/// repeating over the 6-digit code and the serial) mod 10`, mod 10 (a 3-digit code is the
/// 6-digit one with three leading zeros). The account and the code, canonical.
pub fn nuban(account: &str, bank_code: &str) -> Result<(String, String), NubanError> {
    let a = digits_of(account, &[' ', '-']).ok_or(NubanError::Account)?;
    if a.len() != 10 {
        return Err(NubanError::Account);
    }
    let c = digits_of(bank_code, &[' ', '-']).ok_or(NubanError::BankCode)?;
    if c.len() != 3 && c.len() != 6 {
        return Err(NubanError::BankCode);
    }
    let mut code = vec![0u8; 6 - c.len()];
    code.extend_from_slice(&c);
    let sum: u32 = code
        .iter()
        .chain(&a[..9])
        .zip([3u32, 7, 3].iter().cycle())
        .map(|(v, w)| u32::from(*v) * w)
        .sum();
    if (10 - sum % 10) % 10 != u32::from(a[9]) {
        return Err(NubanError::CheckDigit);
    }
    Ok((text(&a), text(&c)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NubanError {
    Account,
    BankCode,
    CheckDigit,
}

/// An M-Pesa (Safaricom) number: Kenya's `+254` (or a leading `0`) and 9 digits starting with 7
/// or 1; canonical as `+254...`.
pub fn mpesa(given: &str) -> Option<String> {
    let g = given.trim();
    let (plus, rest) = match g.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, g),
    };
    let d = digits_of(rest, &[' ', '-'])?;
    let local: &[u8] = match (plus, d.first()) {
        (true, _) if d.len() == 12 && d[..3] == [2, 5, 4] => &d[3..],
        (false, Some(0)) if d.len() == 10 => &d[1..],
        (false, Some(2)) if d.len() == 12 && d[..3] == [2, 5, 4] => &d[3..],
        _ => return None,
    };
    matches!(local[0], 7 | 1).then(|| format!("+254{}", text(local)))
}

/// A South African branch code: 6 digits (the universal codes included).
pub fn za_branch(given: &str) -> Option<String> {
    let d = digits_of(given, &[' ', '-'])?;
    (d.len() == 6).then(|| text(&d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpf_and_cnpj_check_digits() {
        // Published examples, written and bare.
        assert_eq!(cpf("529.982.247-25").as_deref(), Some("52998224725"));
        assert_eq!(cpf("52998224725").as_deref(), Some("52998224725"));
        for bad in [
            "529.982.247-24",
            "52998224735",
            "111.111.111-11",
            "5299822472",
            "529a9822472",
        ] {
            assert_eq!(cpf(bad), None, "{bad}");
        }
        assert_eq!(
            cnpj("11.222.333/0001-81").as_deref(),
            Some("11222333000181")
        );
        // The alphanumeric CNPJ (Receita Federal's example).
        assert_eq!(
            cnpj("12.ABC.345/01DE-35").as_deref(),
            Some("12ABC34501DE35")
        );
        for bad in [
            "11.222.333/0001-80",
            "11222333000191",
            "00000000000000",
            "12.ABC.345/01DE-36",
            "11.222.333/0001-8A",
        ] {
            assert_eq!(cnpj(bad), None, "{bad}");
        }
    }

    #[test]
    fn pix_keys_of_each_kind() {
        let k = |s: &str| pix_key(s).map(|k| (k.kind(), k.key().to_string()));
        assert_eq!(k("529.982.247-25"), Some(("CPF", "52998224725".into())));
        assert_eq!(
            k("11.222.333/0001-81"),
            Some(("CNPJ", "11222333000181".into()))
        );
        assert_eq!(
            k("12.abc.345/01de-35"),
            Some(("CNPJ", "12ABC34501DE35".into()))
        );
        assert_eq!(
            k("Ana.Souza@Example.com.br"),
            Some(("EMAIL", "ana.souza@example.com.br".into()))
        );
        assert_eq!(
            k("+55 11 91234-5678"),
            Some(("PHONE", "+5511912345678".into()))
        );
        assert_eq!(
            k("+55 (61) 3212-3456"),
            Some(("PHONE", "+556132123456".into()))
        );
        assert_eq!(
            k("123E4567-E89B-42D3-A456-426614174000"),
            Some(("EVP", "123e4567-e89b-42d3-a456-426614174000".into()))
        );
        for bad in [
            "",
            "529.982.247-24",
            "+1 415 555 0100",
            "+55 01 91234-5678",
            "+55 11 9123",
            "ana@",
            "@example.com",
            "ana@example",
            "ana souza@example.com",
            "a@b@c.com",
            &format!("{}@example.com", "a".repeat(70)),
            "not a key",
        ] {
            assert_eq!(pix_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn clabe_nuban_mpesa_and_branch() {
        // Banxico's example CLABE, and one digit off.
        assert_eq!(
            clabe("032180000118359719").as_deref(),
            Some("032180000118359719")
        );
        assert_eq!(
            clabe("0321 8000 0118 3597 19").as_deref(),
            Some("032180000118359719")
        );
        for bad in [
            "032180000118359718",
            "03218000011835971",
            "0321800001183597190",
            "03218000011835971x",
        ] {
            assert_eq!(clabe(bad), None, "{bad}");
        }
        // The CBN standard's example: bank 011, serial 000001457 -> check digit 9.
        assert_eq!(
            nuban("0000014579", "011"),
            Ok(("0000014579".into(), "011".into()))
        );
        assert_eq!(
            nuban("000001457-9", "000011"),
            Ok(("0000014579".into(), "000011".into()))
        );
        assert_eq!(nuban("0000014578", "011"), Err(NubanError::CheckDigit));
        assert_eq!(nuban("0000014579", "058"), Err(NubanError::CheckDigit));
        assert_eq!(nuban("000001457", "011"), Err(NubanError::Account));
        assert_eq!(nuban("0000014579", "11"), Err(NubanError::BankCode));
        assert_eq!(nuban("0000014579", "ABC"), Err(NubanError::BankCode));
        assert_eq!(mpesa("+254 712 345 678").as_deref(), Some("+254712345678"));
        assert_eq!(mpesa("0712345678").as_deref(), Some("+254712345678"));
        assert_eq!(mpesa("254110345678").as_deref(), Some("+254110345678"));
        for bad in [
            "+254 812 345 678",
            "+255712345678",
            "071234567",
            "+2547123456789",
            "07123x5678",
        ] {
            assert_eq!(mpesa(bad), None, "{bad}");
        }
        assert_eq!(za_branch("250 655").as_deref(), Some("250655"));
        assert_eq!(za_branch("25065"), None);
        assert_eq!(za_branch("2506555"), None);
    }
}
