//! Beneficiary rules (SPEC.md section 8 and DECISIONS.md): every field a non-empty string, the
//! currency the corridor's, the country the currency's, and the account number's digits (spaces
//! and hyphens removed first) within the country's length rule.

use super::{Beneficiary, Currency};

/// The most characters accepted in a name or bank name.
const MAX_TEXT: usize = 200;
/// The most characters accepted in an account number as given.
const MAX_ACCOUNT: usize = 64;

/// Account number length rule per country, in digits.
pub fn length_rule(country: &str) -> Option<std::ops::RangeInclusive<usize>> {
    match country {
        "NG" => Some(10..=10),
        "KE" => Some(8..=14),
        "ZA" => Some(7..=11),
        // Brazil and Mexico: no enforced length.
        "BR" | "MX" => Some(1..=MAX_ACCOUNT),
        _ => None,
    }
}

/// The account number's digits, if it holds only digits, spaces and hyphens.
pub fn account_digits(given: &str) -> Option<String> {
    if !given
        .chars()
        .all(|c| c.is_ascii_digit() || c == ' ' || c == '-')
    {
        return None;
    }
    Some(given.chars().filter(char::is_ascii_digit).collect())
}

/// The bank account of a pay request as sent: five strings, nothing else. Their rules (SPEC 8)
/// are applied by `validate`, against the corridor's currency.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Beneficiary)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BeneficiaryInput {
    #[schema(max_length = 200)]
    pub name: String,
    #[schema(max_length = 200)]
    pub bank_name: String,
    /// Digits, spaces and hyphens; the digit count follows the country (NUBAN for NGN...).
    #[schema(max_length = 64)]
    pub account_number: String,
    /// ISO 3166-1 alpha-2 code of the currency's country.
    pub country: String,
    /// The corridor's currency.
    pub currency: String,
}

/// Why a beneficiary is refused (`INVALID_BENEFICIARY`); each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeneficiaryError {
    #[error("beneficiary.{0} is required")]
    Missing(&'static str),
    #[error("beneficiary.{0} must be at most {1} characters")]
    TooLong(&'static str, usize),
    #[error("beneficiary.currency must be the corridor's currency {0}")]
    WrongCurrency(Currency),
    #[error("beneficiary.country must be {country} for {currency}", country = .0.country(), currency = .0)]
    WrongCountry(Currency),
    #[error("beneficiary.accountNumber may hold only digits, spaces and hyphens")]
    AccountCharacters,
    #[error("beneficiary.accountNumber must have {want} digits for {country} (has {has})")]
    AccountLength {
        want: String,
        country: String,
        has: usize,
    },
}

/// The text trimmed: not blank, at most [`MAX_TEXT`] characters.
fn text(given: &str, field: &'static str) -> Result<String, BeneficiaryError> {
    let t = given.trim();
    if t.is_empty() {
        Err(BeneficiaryError::Missing(field))
    } else if t.chars().count() > MAX_TEXT {
        Err(BeneficiaryError::TooLong(field, MAX_TEXT))
    } else {
        Ok(t.to_string())
    }
}

/// Applies SPEC 8's rules to a beneficiary for a corridor to `currency`. The error names the
/// first problem (`INVALID_BENEFICIARY`).
pub fn validate(b: &BeneficiaryInput, currency: Currency) -> Result<Beneficiary, BeneficiaryError> {
    let name = text(&b.name, "name")?;
    let bank_name = text(&b.bank_name, "bankName")?;
    let account = text(&b.account_number, "accountNumber")?;
    let country = text(&b.country, "country")?;
    let cur = text(&b.currency, "currency")?;
    if cur != currency.code() {
        return Err(BeneficiaryError::WrongCurrency(currency));
    }
    if country != currency.country() {
        return Err(BeneficiaryError::WrongCountry(currency));
    }
    if account.chars().count() > MAX_ACCOUNT {
        return Err(BeneficiaryError::TooLong("accountNumber", MAX_ACCOUNT));
    }
    let digits = account_digits(&account).ok_or(BeneficiaryError::AccountCharacters)?;
    let rule = length_rule(&country).unwrap_or(1..=MAX_ACCOUNT);
    if !rule.contains(&digits.len()) {
        let want = if rule.start() == rule.end() {
            format!("exactly {}", rule.start())
        } else if *rule.end() == MAX_ACCOUNT {
            "at least 1".to_string()
        } else {
            format!("{} to {}", rule.start(), rule.end())
        };
        return Err(BeneficiaryError::AccountLength {
            want,
            country,
            has: digits.len(),
        });
    }
    Ok(Beneficiary {
        name,
        bank_name,
        account_number: digits,
        country,
        currency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn b(country: &str, currency: &str, account: &str) -> Value {
        json!({"name": "Ada Obi", "bankName": "First Bank", "accountNumber": account,
               "country": country, "currency": currency})
    }

    /// Read as a pay request's body reads it, then the rules.
    fn check(v: &Value, currency: Currency) -> Result<Beneficiary, String> {
        let input: BeneficiaryInput =
            serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        validate(&input, currency).map_err(|e| e.to_string())
    }

    /// Every country's rule, at and around its limits, with spaces and hyphens.
    #[test]
    fn account_number_table() {
        let table: &[(Currency, &str, bool)] = &[
            (Currency::Ngn, "0123456789", true),
            (Currency::Ngn, "012-345-6789", true),
            (Currency::Ngn, "01 23 45 67 89", true),
            (Currency::Ngn, "012345678", false),
            (Currency::Ngn, "01234567890", false),
            (Currency::Ngn, "0123-456-78", false),
            (Currency::Kes, "12345678", true),
            (Currency::Kes, "1234-5678", true),
            (Currency::Kes, "12345678901234", true),
            (Currency::Kes, "1234567", false),
            (Currency::Kes, "123456789012345", false),
            (Currency::Kes, "1234 5678 9012 345", false),
            (Currency::Zar, "1234567", true),
            (Currency::Zar, "123 4567", true),
            (Currency::Zar, "12345678901", true),
            (Currency::Zar, "123456", false),
            (Currency::Zar, "123456789012", false),
            (Currency::Brl, "1", true),
            (Currency::Brl, "0001-2345 6789-0123-4567", true),
            (Currency::Mxn, "032180000118359719", true),
            (Currency::Mxn, "0321 8000 0118 3597 19", true),
            (Currency::Brl, "- -", false),
            (Currency::Mxn, "12ab34", false),
            (Currency::Ngn, "０１２３４５６７８９", false),
        ];
        for (cur, acct, ok) in table {
            let got = check(&b(cur.country(), cur.code(), acct), *cur);
            assert_eq!(got.is_ok(), *ok, "{cur} {acct:?}: {got:?}");
            if let Ok(v) = got {
                assert!(v.account_number.bytes().all(|c| c.is_ascii_digit()));
            }
        }
    }

    #[test]
    fn fields_currency_and_country_are_checked() {
        let ok = check(&b("NG", "NGN", "0123456789"), Currency::Ngn).unwrap();
        assert_eq!(ok.account_number, "0123456789");
        // Currency must be the corridor's; country must fit the currency.
        assert!(check(&b("NG", "KES", "0123456789"), Currency::Ngn).is_err());
        assert!(check(&b("KE", "NGN", "0123456789"), Currency::Ngn).is_err());
        for field in ["name", "bankName", "accountNumber", "country", "currency"] {
            let mut v = b("NG", "NGN", "0123456789");
            v.as_object_mut().unwrap().remove(field);
            let e = check(&v, Currency::Ngn).unwrap_err();
            assert!(e.contains(field), "{e}");
            let mut v = b("NG", "NGN", "0123456789");
            v[field] = json!("  ");
            assert!(check(&v, Currency::Ngn).is_err());
            v[field] = json!(5);
            assert!(check(&v, Currency::Ngn).is_err());
        }
        let mut v = b("NG", "NGN", "0123456789");
        v["iban"] = json!("x");
        assert!(check(&v, Currency::Ngn).is_err());
        assert!(check(&json!("x"), Currency::Ngn).is_err());
    }
}
