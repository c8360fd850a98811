//! The upstream fields of a route body (issue 18): `targets`, `loadBalancing`, `healthCheck`,
//! and how `targetUrl` / `targets` are read (`read_targets`, which the route input applies).

use crate::body::fields::{present, Bounded, HeaderField, ProbePath, TargetUrl};
use paygate_domain::model::{Balancing, HealthCheck, RouteTarget};
use paygate_domain::FieldProblem;
use serde::Deserialize;
use utoipa::ToSchema;

/// One upstream of a route.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetSpec {
    #[schema(inline)]
    url: TargetUrl,
    /// Relative share of the requests (default 1).
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    weight: Option<Bounded<1, 1000>>,
}

/// `round_robin` (weighted), or `hash`: consistent hashing on `header`'s value.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    RoundRobin,
    Hash,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BalancingSpec {
    strategy: Strategy,
    /// `hash` only: the request header whose value picks the target.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    header: Option<HeaderField>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheckSpec {
    #[schema(inline)]
    path: ProbePath,
    /// Seconds between checks (default 10).
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    interval_seconds: Option<Bounded<1, 3600>>,
    /// 2xx answers in a row that make a target healthy again (default 2).
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    healthy_threshold: Option<Bounded<1, 10>>,
    /// Failures in a row that make a target unhealthy (default 3).
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    unhealthy_threshold: Option<Bounded<1, 10>>,
}

/// Most targets a route may have.
const MAX_TARGETS: usize = 16;

fn targets_of(v: Vec<TargetSpec>) -> Vec<RouteTarget> {
    v.into_iter()
        .map(|t| RouteTarget {
            url: t.url.0,
            weight: t.weight.map_or(1, |w| w.0),
        })
        .collect()
}

impl BalancingSpec {
    /// `Err` when the strategy and the header disagree.
    fn into_balancing(self) -> Result<Balancing, FieldProblem> {
        match (self.strategy, self.header) {
            (Strategy::RoundRobin, None) => Ok(Balancing::RoundRobin),
            (Strategy::Hash, Some(h)) => Ok(Balancing::Hash { header: h.0 }),
            (Strategy::RoundRobin, Some(_)) => Err(FieldProblem::new(
                "loadBalancing.header",
                "only the hash strategy reads a header",
            )),
            (Strategy::Hash, None) => Err(FieldProblem::new(
                "loadBalancing.header",
                "the hash strategy needs the header to hash",
            )),
        }
    }
}

impl From<HealthCheckSpec> for HealthCheck {
    fn from(h: HealthCheckSpec) -> Self {
        Self {
            path: h.path.0,
            interval_seconds: h.interval_seconds.map_or(10, |v| v.0),
            healthy_threshold: h.healthy_threshold.map_or(2, |v| v.0),
            unhealthy_threshold: h.unhealthy_threshold.map_or(3, |v| v.0),
        }
    }
}

/// What a body's `targetUrl` / `targets` came to: the targets, which field gave them (for the
/// field names in problems), and the problems found.
#[derive(Default)]
pub(super) struct TargetsRead {
    pub(super) targets: Option<Vec<RouteTarget>>,
    pub(super) field: Option<&'static str>,
    pub(super) problems: Vec<FieldProblem>,
}

/// Reads `targetUrl` / `targets` (at most one of them; `required` on create).
pub(super) fn read_targets(
    target_url: Option<TargetUrl>,
    targets: Option<Vec<TargetSpec>>,
    required: bool,
) -> TargetsRead {
    let mut out = TargetsRead::default();
    match (target_url, targets) {
        (Some(_), Some(_)) => out.problems.push(FieldProblem::new(
            "targets",
            "give targetUrl or targets, not both",
        )),
        (Some(u), None) => {
            out.field = Some("targetUrl");
            out.targets = Some(vec![RouteTarget {
                url: u.0,
                weight: 1,
            }]);
        }
        (None, Some(list)) => {
            out.field = Some("targets");
            if list.is_empty() || list.len() > MAX_TARGETS {
                out.problems.push(FieldProblem::new(
                    "targets",
                    format!("must list 1 to {MAX_TARGETS} targets"),
                ));
            }
            let list = targets_of(list);
            let mut origins = std::collections::HashSet::new();
            for (i, t) in list.iter().enumerate() {
                let origin = paygate_gateway::upstream_target::UpstreamTarget::parse(&t.url)
                    .map(|u| (u.host, u.port));
                if !origins.insert(origin) {
                    out.problems.push(FieldProblem::new(
                        format!("targets[{i}].url"),
                        "names the same host and port as an earlier target",
                    ));
                }
            }
            out.targets = Some(list);
        }
        (None, None) if required => out.problems.push(FieldProblem::new(
            "targetUrl",
            "is required (or give targets)",
        )),
        (None, None) => {}
    }
    out
}

/// Reads `loadBalancing`: the strategy given (`None`: not given), or its problem.
pub(super) fn read_balancing(
    spec: Option<BalancingSpec>,
) -> Result<Option<Balancing>, FieldProblem> {
    spec.map(BalancingSpec::into_balancing).transpose()
}
