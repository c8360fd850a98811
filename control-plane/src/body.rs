//! Request bodies read into their one typed struct (serde and utoipa derives on the same type):
//! unknown and server-assigned fields refused, and every field problem listed, not the first.

pub mod fields;

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use paygate_domain::{ErrorCode, FieldProblem};
use serde::de::{DeserializeOwned, Deserializer, Error as _, Visitor};
use serde_json::{Map, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;

/// A JSON request body: its struct denies unknown fields, validates each field in the field's
/// own type (see [`fields`]) and documents itself through `ToSchema`.
pub trait RequestBody: DeserializeOwned + utoipa::ToSchema {
    /// Fields the server assigns; sending one is refused as such rather than as unknown.
    const READ_ONLY: &'static [&'static str] = &[];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A field the body does not have.
    Unknown,
    /// A required field absent or `null`.
    Missing,
    /// A field whose value its type refuses.
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub detail: FieldProblem,
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or not a JSON object.
    Malformed(String),
    /// Every field problem: the body's fields in declaration order, then unknown fields sorted.
    Fields(Vec<Problem>),
}

/// The management API's answer: `400 BAD_REQUEST`, or `VALIDATION_ERROR` with every problem.
impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Malformed(m) => ApiError::new(ErrorCode::BadRequest, m),
            BodyError::Fields(problems) => {
                ApiError::validation(problems.into_iter().map(|p| p.detail).collect())
            }
        }
    }
}

/// Reads `raw` into `T`. The whole body is deserialised once; only a refused body is read again
/// field by field, to name every problem.
pub fn parse<T: RequestBody>(raw: &[u8]) -> Result<T, BodyError> {
    let value: Value = serde_json::from_slice(raw)
        .map_err(|e| BodyError::Malformed(format!("request body is not valid JSON: {e}")))?;
    let Value::Object(map) = &value else {
        return Err(BodyError::Malformed(
            "request body must be a JSON object".into(),
        ));
    };
    let whole = match T::deserialize(&value) {
        Ok(body) => return Ok(body),
        Err(e) => e,
    };
    let mut problems = problems::<T>(map);
    if problems.is_empty() {
        // The field-by-field reading found nothing the whole reading did (a rule across fields).
        problems.push(Problem {
            kind: ProblemKind::Invalid,
            detail: FieldProblem::new("body", whole.to_string()),
        });
    }
    Err(BodyError::Fields(problems))
}

fn problems<T: RequestBody>(map: &Map<String, Value>) -> Vec<Problem> {
    let fields = field_names::<T>();
    let required = required_fields::<T>();
    let mut out = Vec::new();
    for &field in fields {
        let problem = |kind, text: String| Problem {
            kind,
            detail: FieldProblem::new(field, text),
        };
        match map.get(field) {
            None | Some(Value::Null) if required.iter().any(|r| r == field) => {
                out.push(problem(ProblemKind::Missing, "is required".into()));
            }
            None => {}
            Some(v) => {
                // Read the field alone: a failure inside it is its problem; a failure at the
                // top (another required field missing) is not.
                let alone = Value::Object(Map::from_iter([(field.to_string(), v.clone())]));
                if let Err(e) = serde_path_to_error::deserialize::<_, T>(&alone) {
                    if e.path().iter().next().is_some() {
                        out.push(Problem {
                            kind: ProblemKind::Invalid,
                            detail: FieldProblem::new(e.path().to_string(), e.inner().to_string()),
                        });
                    }
                }
            }
        }
    }
    let mut rest: Vec<&String> = map
        .keys()
        .filter(|k| !fields.contains(&k.as_str()))
        .collect();
    rest.sort();
    for k in rest {
        let text = if T::READ_ONLY.contains(&k.as_str()) {
            "is assigned by the server and cannot be set"
        } else {
            "is not a known field"
        };
        out.push(Problem {
            kind: ProblemKind::Unknown,
            detail: FieldProblem::new(k.as_str(), text),
        });
    }
    out
}

/// The wire names of `T`'s fields in declaration order, as serde's derive hands them to
/// `deserialize_struct`.
fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut names = None;
    let _ = T::deserialize(FieldNames(&mut names));
    names.unwrap_or(&[])
}

/// The fields `T`'s schema requires (what serde requires too: not `Option`, no default).
fn required_fields<T: utoipa::ToSchema>() -> Vec<String> {
    match T::schema() {
        RefOr::T(Schema::Object(o)) => o.required,
        _ => Vec::new(),
    }
}

/// A deserializer that only records the field list a struct asks for.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(Self::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(Self::Error::custom("field names recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A typed JSON body and the bytes it came from (for an `Idempotency-Key` fingerprint).
pub struct JsonBody<T> {
    pub value: T,
    pub raw: Bytes,
}

impl<S: Send + Sync, T: RequestBody> FromRequest<S> for JsonBody<T> {
    /// A body that could not be read (too large, cut off) keeps axum's answer, which the error
    /// middleware renders like every framework rejection.
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let raw = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let value = parse::<T>(&raw).map_err(|e| ApiError::from(e).into_response())?;
        Ok(Self { value, raw })
    }
}

#[cfg(test)]
mod tests {
    use super::fields::{Nullable, Text};
    use super::*;
    use serde::Deserialize;
    use utoipa::ToSchema;

    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Sample {
        #[schema(inline)]
        first_name: Text<5>,
        count: u32,
        #[serde(default, deserialize_with = "fields::present")]
        flag: Option<bool>,
        #[serde(default)]
        #[schema(value_type = Option<String>)]
        note: Nullable<Text<3>>,
        nested: Option<Inner>,
    }

    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u8,
    }

    impl RequestBody for Sample {
        const READ_ONLY: &'static [&'static str] = &["id"];
    }

    fn fields_of(e: BodyError) -> Vec<(ProblemKind, String)> {
        match e {
            BodyError::Fields(p) => p.into_iter().map(|p| (p.kind, p.detail.field)).collect(),
            BodyError::Malformed(m) => panic!("malformed: {m}"),
        }
    }

    #[test]
    fn a_valid_body_reads_into_its_type() {
        let s: Sample =
            parse(br#"{"firstName": "Ada", "count": 2, "note": null, "nested": {"a": 7}}"#)
                .unwrap();
        assert_eq!(s.first_name.as_str(), "Ada");
        assert_eq!(s.nested.map(|n| n.a), Some(7));
        assert_eq!(s.count, 2);
        assert_eq!(s.flag, None);
        assert!(matches!(s.note, Nullable::Null));
        let s: Sample = parse(br#"{"firstName": "A", "count": 0, "flag": true}"#).unwrap();
        assert!(matches!(s.note, Nullable::Absent));
        assert_eq!(s.flag, Some(true));
    }

    #[test]
    fn every_problem_is_listed_in_declaration_order_then_unknown_fields() {
        let e = parse::<Sample>(
            br#"{"zz": 1, "id": "x", "firstName": "toolong", "flag": null, "note": "long",
                 "nested": {"a": "x"}}"#,
        )
        .unwrap_err();
        use ProblemKind::*;
        assert_eq!(
            fields_of(e),
            [
                (Invalid, "firstName".to_string()),
                (Missing, "count".into()),
                (Invalid, "flag".into()),
                (Invalid, "note".into()),
                (Invalid, "nested.a".into()),
                (Unknown, "id".into()),
                (Unknown, "zz".into()),
            ]
        );
    }

    #[test]
    fn messages_say_what_is_wrong() {
        let BodyError::Fields(p) =
            parse::<Sample>(br#"{"firstName": "toolong", "count": 1, "id": 1}"#).unwrap_err()
        else {
            panic!()
        };
        assert_eq!(p[0].detail.problem, "must be at most 5 characters");
        assert_eq!(
            p[1].detail.problem,
            "is assigned by the server and cannot be set"
        );
    }

    #[test]
    fn not_an_object_is_malformed() {
        for raw in [&b"[1]"[..], b"nope", b"\"x\""] {
            assert!(matches!(parse::<Sample>(raw), Err(BodyError::Malformed(_))));
        }
    }
}
