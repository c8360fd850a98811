//! Beneficiary rules (SPEC.md section 8 and DECISIONS.md, then per country): every text field a
//! non-empty string, the currency the corridor's, the country the currency's, and where the
//! money goes checked as that country's banks write it (`bank_ids`):
//! - Brazil: a PIX key (`pixKey`: CPF or CNPJ with valid check digits, e-mail, `+55` phone,
//!   random key), or a bank account number;
//! - Mexico: the account number is an 18-digit CLABE with a valid check digit;
//! - Nigeria: the account number is a 10-digit NUBAN whose check digit fits the bank's
//!   `bankCode` (3 or 6 digits);
//! - Kenya: a bank account number (8 to 14 digits) or an M-Pesa `mobileNumber` (one of them);
//! - South Africa: a bank account number (7 to 11 digits) and its 6-digit `branchCode`.
//!
//! Every problem is reported (`INVALID_BENEFICIARY`, each in `details` with its field).

use super::bank_ids::{self, NubanError};
use super::{Beneficiary, Currency};

/// The most characters accepted in a name or bank name.
const MAX_TEXT: usize = 200;
/// The most characters accepted in an account number or another identifier as given.
const MAX_ACCOUNT: usize = 64;

/// Account number length rule per country, in digits.
pub fn length_rule(country: &str) -> Option<std::ops::RangeInclusive<usize>> {
    match country {
        "NG" => Some(10..=10),
        "KE" => Some(8..=14),
        "ZA" => Some(7..=11),
        "MX" => Some(18..=18),
        "BR" => Some(1..=MAX_ACCOUNT),
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

/// The bank account of a pay request as sent. Their rules (SPEC 8, then per country) are applied
/// by `validate`, against the corridor's currency.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Beneficiary)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BeneficiaryInput {
    #[schema(max_length = 200)]
    pub name: String,
    /// The bank (or, for a PIX key or an M-Pesa number, the institution) paid into.
    #[schema(max_length = 200)]
    pub bank_name: String,
    /// Digits, spaces and hyphens: a CLABE for MXN, a NUBAN for NGN, 8 to 14 digits for KES, 7 to
    /// 11 for ZAR. Not needed when a BRL payout names a `pixKey` or a KES one a `mobileNumber`.
    #[schema(max_length = 64)]
    #[serde(default)]
    pub account_number: Option<String>,
    /// ISO 3166-1 alpha-2 code of the currency's country.
    pub country: String,
    /// The corridor's currency.
    pub currency: String,
    /// BRL: a PIX key (CPF, CNPJ, e-mail, `+55` phone or random key).
    #[serde(default)]
    pub pix_key: Option<String>,
    /// NGN: the bank's NUBAN code (3 or 6 digits), which the account number's check digit fits.
    #[serde(default)]
    pub bank_code: Option<String>,
    /// ZAR: the branch code (6 digits).
    #[serde(default)]
    pub branch_code: Option<String>,
    /// KES: an M-Pesa number (`+2547...`, `+2541...` or `07...`), instead of a bank account.
    #[serde(default)]
    pub mobile_number: Option<String>,
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
    #[error("beneficiary.{field} {rule}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
    },
    #[error("beneficiary.{0} is not used for {1}")]
    NotForCountry(&'static str, Currency),
    #[error("beneficiary.accountNumber and beneficiary.{0}: give one of them, not both")]
    Both(&'static str),
}

impl BeneficiaryError {
    /// The field it is about, as the request names it.
    pub fn field(&self) -> String {
        let f = match self {
            Self::Missing(f) | Self::TooLong(f, _) | Self::NotForCountry(f, _) => f,
            Self::Invalid { field, .. } => field,
            Self::WrongCurrency(_) => "currency",
            Self::WrongCountry(_) => "country",
            Self::AccountCharacters | Self::AccountLength { .. } | Self::Both(_) => "accountNumber",
        };
        format!("beneficiary.{f}")
    }
}

/// The text trimmed: not blank, at most `max` characters.
fn text(given: &str, field: &'static str, max: usize) -> Result<String, BeneficiaryError> {
    let t = given.trim();
    if t.is_empty() {
        Err(BeneficiaryError::Missing(field))
    } else if t.chars().count() > max {
        Err(BeneficiaryError::TooLong(field, max))
    } else {
        Ok(t.to_string())
    }
}

/// The account number's digits within the country's length rule.
fn account(given: &str, country: &str) -> Result<String, BeneficiaryError> {
    let account = text(given, "accountNumber", MAX_ACCOUNT)?;
    let digits = account_digits(&account).ok_or(BeneficiaryError::AccountCharacters)?;
    let rule = length_rule(country).unwrap_or(1..=MAX_ACCOUNT);
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
            country: country.to_string(),
            has: digits.len(),
        });
    }
    Ok(digits)
}

/// What the payout is paid into, by country: the account number's digits (empty for a PIX key
/// or an M-Pesa number) and the country's other identifiers.
#[derive(Default)]
struct Destination {
    account: String,
    pix_key: Option<bank_ids::PixKey>,
    bank_code: Option<String>,
    branch_code: Option<String>,
    mobile_number: Option<String>,
}

fn invalid(field: &'static str, rule: &'static str) -> BeneficiaryError {
    BeneficiaryError::Invalid { field, rule }
}

/// One optional identifier as given: trimmed, not blank, not too long.
fn given(v: &Option<String>, field: &'static str) -> Result<Option<String>, BeneficiaryError> {
    v.as_deref()
        .map(|s| text(s, field, MAX_ACCOUNT))
        .transpose()
}

fn destination(
    b: &BeneficiaryInput,
    currency: Currency,
    problems: &mut Vec<BeneficiaryError>,
) -> Destination {
    let mut d = Destination::default();
    let mut note = |r: Result<(), BeneficiaryError>| {
        if let Err(e) = r {
            problems.push(e);
        }
    };
    let country = currency.country();
    // Each country's own fields, and no other country's.
    let own: &[&'static str] = match currency {
        Currency::Brl => &["pixKey"],
        Currency::Ngn => &["bankCode"],
        Currency::Zar => &["branchCode"],
        Currency::Kes => &["mobileNumber"],
        Currency::Mxn => &[],
    };
    for (field, v) in [
        ("pixKey", &b.pix_key),
        ("bankCode", &b.bank_code),
        ("branchCode", &b.branch_code),
        ("mobileNumber", &b.mobile_number),
    ] {
        if v.is_some() && !own.contains(&field) {
            note(Err(BeneficiaryError::NotForCountry(field, currency)));
        }
    }
    let account_given = b.account_number.is_some();
    // The alternative to an account number, where the country has one.
    let alternative = match currency {
        Currency::Brl => Some(("pixKey", &b.pix_key)),
        Currency::Kes => Some(("mobileNumber", &b.mobile_number)),
        _ => None,
    };
    match alternative {
        Some((field, Some(_))) if account_given => note(Err(BeneficiaryError::Both(field))),
        Some((_, Some(_))) => {}
        _ => note(
            account(b.account_number.as_deref().unwrap_or_default(), country).map(|digits| {
                d.account = digits;
            }),
        ),
    }
    match currency {
        Currency::Brl => note(given(&b.pix_key, "pixKey").and_then(|k| {
            if let Some(k) = k {
                d.pix_key = Some(
                    bank_ids::pix_key(&k).ok_or_else(|| invalid("pixKey", bank_ids::PIX_RULE))?,
                );
            }
            Ok(())
        })),
        Currency::Mxn if !d.account.is_empty() => {
            if bank_ids::clabe(&d.account).is_none() {
                note(Err(invalid(
                    "accountNumber",
                    "must be a CLABE: 18 digits whose last is its check digit",
                )));
            }
        }
        Currency::Ngn => note(match given(&b.bank_code, "bankCode") {
            Ok(None) => Err(BeneficiaryError::Missing("bankCode")),
            Ok(Some(code)) => match bank_ids::nuban(&d.account, &code) {
                Ok((_, code)) => {
                    d.bank_code = Some(code);
                    Ok(())
                }
                Err(NubanError::BankCode) => Err(invalid(
                    "bankCode",
                    "must be the bank's NUBAN code: 3 or 6 digits",
                )),
                // The account's own length problem is already reported.
                Err(NubanError::Account) => Ok(()),
                Err(NubanError::CheckDigit) => Err(invalid(
                    "accountNumber",
                    "must be a NUBAN: its check digit does not fit the account and bankCode",
                )),
            },
            Err(e) => Err(e),
        }),
        Currency::Zar => note(match given(&b.branch_code, "branchCode") {
            Ok(None) => Err(BeneficiaryError::Missing("branchCode")),
            Ok(Some(code)) => bank_ids::za_branch(&code)
                .map(|c| d.branch_code = Some(c))
                .ok_or_else(|| invalid("branchCode", "must be 6 digits")),
            Err(e) => Err(e),
        }),
        Currency::Kes => note(given(&b.mobile_number, "mobileNumber").and_then(|n| {
            if let Some(n) = n {
                d.mobile_number = Some(bank_ids::mpesa(&n).ok_or_else(|| {
                    invalid(
                        "mobileNumber",
                        "must be an M-Pesa number: +254 (or 0) and 9 digits starting with 7 or 1",
                    )
                })?);
            }
            Ok(())
        })),
        Currency::Mxn => {}
    }
    d
}

/// Applies the rules to a beneficiary for a corridor to `currency`: the beneficiary as kept, or
/// every problem found (`INVALID_BENEFICIARY`; the first one is the message).
pub fn validate(
    b: &BeneficiaryInput,
    currency: Currency,
) -> Result<Beneficiary, Vec<BeneficiaryError>> {
    let mut problems = Vec::new();
    let mut keep = |r: Result<String, BeneficiaryError>| match r {
        Ok(v) => v,
        Err(e) => {
            problems.push(e);
            String::new()
        }
    };
    let name = keep(text(&b.name, "name", MAX_TEXT));
    let bank_name = keep(text(&b.bank_name, "bankName", MAX_TEXT));
    let country = keep(text(&b.country, "country", MAX_TEXT));
    let cur = keep(text(&b.currency, "currency", MAX_TEXT));
    if !cur.is_empty() && cur != currency.code() {
        problems.push(BeneficiaryError::WrongCurrency(currency));
    }
    if !country.is_empty() && country != currency.country() {
        problems.push(BeneficiaryError::WrongCountry(currency));
    }
    let d = destination(b, currency, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Beneficiary {
        name,
        bank_name,
        account_number: d.account,
        country,
        currency,
        pix_key: d.pix_key.as_ref().map(|k| k.key().to_string()),
        pix_key_type: d.pix_key.as_ref().map(|k| k.kind().to_string()),
        bank_code: d.bank_code,
        branch_code: d.branch_code,
        mobile_number: d.mobile_number,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A beneficiary of `country` with the identifiers its country needs besides the account
    /// (NG: bank 058; ZA: branch 250655).
    fn b(country: &str, currency: &str, account: &str) -> Value {
        let mut v = json!({"name": "Ada Obi", "bankName": "First Bank", "accountNumber": account,
               "country": country, "currency": currency});
        match country {
            "NG" => v["bankCode"] = json!("058"),
            "ZA" => v["branchCode"] = json!("250655"),
            _ => {}
        }
        v
    }

    /// Read as a pay request's body reads it, then the rules; the problems' messages.
    fn check(v: &Value, currency: Currency) -> Result<Beneficiary, String> {
        let input: BeneficiaryInput =
            serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        validate(&input, currency).map_err(|e| {
            e.iter()
                .map(|p| format!("{} ({})", p, p.field()))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Every country's rule, at and around its limits, with spaces and hyphens.
    #[test]
    fn account_number_table() {
        let table: &[(Currency, &str, bool)] = &[
            (Currency::Ngn, "0123456785", true),
            (Currency::Ngn, "012-345-6785", true),
            (Currency::Ngn, "01 23 45 67 85", true),
            (Currency::Ngn, "0123456789", false), // check digit
            (Currency::Ngn, "012345678", false),
            (Currency::Ngn, "01234567850", false),
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
            (Currency::Mxn, "032180000118359718", false), // check digit
            (Currency::Mxn, "03218000011835971", false),
            (Currency::Brl, "- -", false),
            (Currency::Mxn, "12ab34", false),
            (Currency::Ngn, "０１２３４５６７８５", false),
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
        let ok = check(&b("NG", "NGN", "0123456785"), Currency::Ngn).unwrap();
        assert_eq!(ok.account_number, "0123456785");
        assert_eq!(ok.bank_code.as_deref(), Some("058"));
        // Currency must be the corridor's; country must fit the currency.
        assert!(check(&b("NG", "KES", "0123456785"), Currency::Ngn).is_err());
        assert!(check(&b("KE", "NGN", "0123456785"), Currency::Ngn).is_err());
        for field in [
            "name",
            "bankName",
            "accountNumber",
            "country",
            "currency",
            "bankCode",
        ] {
            let mut v = b("NG", "NGN", "0123456785");
            v.as_object_mut().unwrap().remove(field);
            let e = check(&v, Currency::Ngn).unwrap_err();
            assert!(e.contains(field), "{e}");
            let mut v = b("NG", "NGN", "0123456785");
            v[field] = json!("  ");
            assert!(check(&v, Currency::Ngn).is_err());
            v[field] = json!(5);
            assert!(check(&v, Currency::Ngn).is_err());
        }
        let mut v = b("NG", "NGN", "0123456785");
        v["iban"] = json!("x");
        assert!(check(&v, Currency::Ngn).is_err());
        assert!(check(&json!("x"), Currency::Ngn).is_err());
    }

    /// Every problem is reported with its field, not only the first.
    #[test]
    fn every_problem_is_named_with_its_field() {
        let v = json!({"name": " ", "bankName": "GTBank", "accountNumber": "0123456789",
                       "country": "NG", "currency": "NGN", "bankCode": "58",
                       "pixKey": "52998224725"});
        let input: BeneficiaryInput = serde_json::from_value(v).unwrap();
        let fields: Vec<String> = validate(&input, Currency::Ngn)
            .unwrap_err()
            .iter()
            .map(BeneficiaryError::field)
            .collect();
        assert_eq!(
            fields,
            [
                "beneficiary.name",
                "beneficiary.pixKey",
                "beneficiary.bankCode"
            ]
        );
    }

    #[test]
    fn each_country_takes_its_own_identifiers() {
        let base = |country: &str, currency: &str| {
            json!({"name": "Ana Souza", "bankName": "Nubank", "country": country,
                   "currency": currency})
        };
        // Brazil: a PIX key instead of an account, canonical and typed; not both.
        let mut v = base("BR", "BRL");
        v["pixKey"] = json!("529.982.247-25");
        let ok = check(&v, Currency::Brl).unwrap();
        assert_eq!(ok.pix_key.as_deref(), Some("52998224725"));
        assert_eq!(ok.pix_key_type.as_deref(), Some("CPF"));
        assert_eq!(ok.account_number, "");
        v["pixKey"] = json!("529.982.247-24");
        assert!(check(&v, Currency::Brl)
            .unwrap_err()
            .contains("beneficiary.pixKey"));
        v["pixKey"] = json!("ana@example.com");
        v["accountNumber"] = json!("12345");
        assert!(check(&v, Currency::Brl).unwrap_err().contains("not both"));
        // Kenya: an M-Pesa number instead of an account.
        let mut v = base("KE", "KES");
        v["mobileNumber"] = json!("0712 345 678");
        let ok = check(&v, Currency::Kes).unwrap();
        assert_eq!(ok.mobile_number.as_deref(), Some("+254712345678"));
        v["mobileNumber"] = json!("+254 812 345 678");
        assert!(check(&v, Currency::Kes)
            .unwrap_err()
            .contains("mobileNumber"));
        // Neither an account nor the alternative.
        let e = check(&base("KE", "KES"), Currency::Kes).unwrap_err();
        assert!(e.contains("beneficiary.accountNumber is required"), "{e}");
        // South Africa: the branch code is required, 6 digits.
        let mut v = base("ZA", "ZAR");
        v["accountNumber"] = json!("62001234567");
        assert!(check(&v, Currency::Zar)
            .unwrap_err()
            .contains("branchCode is required"));
        v["branchCode"] = json!("25065");
        assert!(check(&v, Currency::Zar).unwrap_err().contains("6 digits"));
        v["branchCode"] = json!("250 655");
        assert_eq!(
            check(&v, Currency::Zar).unwrap().branch_code.as_deref(),
            Some("250655")
        );
        // Another country's identifier is refused.
        v["pixKey"] = json!("ana@example.com");
        assert!(check(&v, Currency::Zar)
            .unwrap_err()
            .contains("not used for ZAR"));
        // Mexico: a CLABE.
        let mut v = base("MX", "MXN");
        v["accountNumber"] = json!("002010077777777771");
        assert!(check(&v, Currency::Mxn).is_ok());
        v["accountNumber"] = json!("002010077777777772");
        assert!(check(&v, Currency::Mxn).unwrap_err().contains("CLABE"));
    }
}
