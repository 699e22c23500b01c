//! The Grafana dashboard's queries, parsed as PromQL, against the metrics
//! the host exposes on `/metrics`.

use std::collections::BTreeSet;

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr, LabelModifier};

/// How a metric is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A label of a metric and, where the host documents them, its values.
#[derive(Debug, Clone, Copy)]
pub struct Label {
    pub name: &'static str,
    pub values: Option<&'static [&'static str]>,
}

/// A metric of the host.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// The name of the family (a counter's with `_total`).
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [Label],
}

const fn label(name: &'static str) -> Label {
    Label { name, values: None }
}

const fn label_of(name: &'static str, values: &'static [&'static str]) -> Label {
    Label { name, values: Some(values) }
}

pub const OUTCOMES: &[&str] = &[
    "ok",
    "changed",
    "denied",
    "trap",
    "timeout",
    "fuel",
    "memory",
    "invalid",
    "conflict",
    "skipped",
    "quarantined",
    "not-loaded",
];

/// Every metric the host exposes, as documented for operators.
pub const METRICS: &[Metric] = &[
    Metric {
        name: "nri_wasm_policy_calls_total",
        kind: Kind::Counter,
        labels: &[label("policy"), label("event"), label_of("outcome", OUTCOMES)],
    },
    Metric { name: "nri_wasm_policy_call_duration_seconds", kind: Kind::Histogram, labels: &[label("policy")] },
    Metric { name: "nri_wasm_policy_fuel_consumed_total", kind: Kind::Counter, labels: &[label("policy")] },
    Metric {
        name: "nri_wasm_events_total",
        kind: Kind::Counter,
        labels: &[label("event"), label_of("result", &["ok", "denied", "failed"])],
    },
    Metric { name: "nri_wasm_chain_duration_seconds", kind: Kind::Histogram, labels: &[label("event")] },
    Metric { name: "nri_wasm_answer_duration_seconds", kind: Kind::Histogram, labels: &[label("event")] },
    Metric { name: "nri_wasm_answer_budget_overruns_total", kind: Kind::Counter, labels: &[] },
    Metric { name: "nri_wasm_registered", kind: Kind::Gauge, labels: &[] },
    Metric { name: "nri_wasm_reconnects_total", kind: Kind::Counter, labels: &[] },
    Metric {
        name: "nri_wasm_policies",
        kind: Kind::Gauge,
        labels: &[label_of("status", &["loaded", "failed", "loading"])],
    },
    Metric {
        name: "nri_wasm_policy_info",
        kind: Kind::Gauge,
        labels: &[label("policy"), label("sha256"), label_of("mode", &["enforce", "audit"]), label("on_error")],
    },
    Metric { name: "nri_wasm_reloads_total", kind: Kind::Counter, labels: &[label_of("result", &["ok", "failed"])] },
    Metric { name: "nri_wasm_http_connections_shed_total", kind: Kind::Counter, labels: &[] },
    Metric { name: "nri_wasm_http_accept_errors_total", kind: Kind::Counter, labels: &[] },
];

/// Labels Prometheus adds to every series of a target: its own, and what
/// the Kubernetes service discovery of the deployment files relabels in.
pub const TARGET_LABELS: &[&str] = &["instance", "job", "namespace", "pod", "container", "service", "endpoint", "node"];

/// The series name `name` refers to: a metric, and whether it is one of a
/// histogram's `_bucket`, `_sum` or `_count` series.
pub fn metric_of(name: &str) -> Option<(&'static Metric, Option<&'static str>)> {
    METRICS.iter().find_map(|m| {
        if m.name == name {
            return (m.kind != Kind::Histogram).then_some((m, None));
        }
        let suffix = name.strip_prefix(m.name)?;
        (m.kind == Kind::Histogram)
            .then(|| ["_bucket", "_sum", "_count"].into_iter().find(|s| *s == suffix).map(|s| (m, Some(s))))
            .flatten()
    })
}

/// What one query uses: the metrics it selects, and for the whole query
/// every label it groups or matches by.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub metrics: BTreeSet<&'static str>,
    pub problems: Vec<String>,
}

/// Replaces Grafana's variables by values PromQL accepts where they stand.
pub fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")
}

/// Parses a query and checks every selector and label in it.
pub fn check(expr: &str) -> Usage {
    let mut usage = Usage::default();
    match parser::parse(&substitute(expr)) {
        Ok(ast) => {
            let mut labels = BTreeSet::new();
            let mut buckets = false;
            walk(&ast, &mut usage, &mut labels, &mut buckets);
            // A label grouped by or matched on must be one of the metrics'
            // (or a target's, or `le` where buckets are read).
            let known: BTreeSet<&str> = usage
                .metrics
                .iter()
                .filter_map(|n| METRICS.iter().find(|m| m.name == *n))
                .flat_map(|m| m.labels.iter().map(|l| l.name))
                .chain(TARGET_LABELS.iter().copied())
                .chain(buckets.then_some("le"))
                .collect();
            for l in labels {
                if !known.contains(l.as_str()) {
                    usage.problems.push(format!("label {l:?} belongs to none of the metrics of the query"));
                }
            }
        }
        Err(e) => usage.problems.push(format!("not valid PromQL: {e}")),
    }
    usage
}

fn modifier_labels(m: &Option<LabelModifier>, labels: &mut BTreeSet<String>) {
    if let Some(m) = m {
        labels.extend(m.labels().labels.iter().cloned());
    }
}

fn walk(e: &Expr, usage: &mut Usage, labels: &mut BTreeSet<String>, buckets: &mut bool) {
    match e {
        Expr::Aggregate(a) => {
            modifier_labels(&a.modifier, labels);
            walk(&a.expr, usage, labels, buckets);
            if let Some(p) = &a.param {
                walk(p, usage, labels, buckets);
            }
        }
        Expr::Unary(u) => walk(&u.expr, usage, labels, buckets),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier {
                modifier_labels(&m.matching, labels);
            }
            walk(&b.lhs, usage, labels, buckets);
            walk(&b.rhs, usage, labels, buckets);
        }
        Expr::Paren(p) => walk(&p.expr, usage, labels, buckets),
        Expr::Subquery(s) => walk(&s.expr, usage, labels, buckets),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        Expr::VectorSelector(v) => selector(v, usage, labels, buckets),
        Expr::MatrixSelector(m) => selector(&m.vs, usage, labels, buckets),
        Expr::Call(c) => {
            for a in &c.args.args {
                walk(a, usage, labels, buckets);
            }
        }
    }
}

fn selector(v: &parser::VectorSelector, usage: &mut Usage, labels: &mut BTreeSet<String>, buckets: &mut bool) {
    let Some(name) = &v.name else {
        usage.problems.push(format!("selector {v} has no metric name"));
        return;
    };
    let Some((metric, suffix)) = metric_of(name) else {
        usage.problems.push(format!("{name} is not a metric of the host"));
        return;
    };
    usage.metrics.insert(metric.name);
    *buckets |= suffix == Some("_bucket");
    let all: Vec<&Matcher> = v.matchers.matchers.iter().chain(v.matchers.or_matchers.iter().flatten()).collect();
    for m in all {
        if m.name == "__name__" {
            continue;
        }
        if suffix == Some("_bucket") && m.name == "le" {
            continue;
        }
        labels.insert(m.name.clone());
        let Some(values) = metric.labels.iter().find(|l| l.name == m.name).and_then(|l| l.values) else {
            continue;
        };
        // Every value a matcher names must be one the metric can have.
        let named: Vec<&str> = match &m.op {
            MatchOp::Equal | MatchOp::NotEqual => vec![m.value.as_str()],
            MatchOp::Re(_) | MatchOp::NotRe(_) => m.value.split('|').collect(),
        };
        for value in named {
            if !values.contains(&value) {
                usage
                    .problems
                    .push(format!("{}: {:?} is not a value of label {:?} ({values:?})", metric.name, value, m.name));
            }
        }
    }
}

/// Every query of a dashboard with the title of its panel, rows' panels
/// and the templating's queries included.
pub fn queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p.get("title").and_then(|t| t.as_str()).unwrap_or("(untitled)").to_string();
            for t in p.get("targets").and_then(|t| t.as_array()).into_iter().flatten() {
                if let Some(expr) = t.get("expr").and_then(|e| e.as_str()) {
                    out.push((title.clone(), expr.to_string()));
                }
            }
            if let Some(nested) = p.get("panels") {
                panels(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    out
}

/// The panels of a dashboard (rows' panels included, rows themselves not).
pub fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn collect<'a>(list: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p.get("type").and_then(|t| t.as_str()) != Some("row") {
                out.push(p);
            }
            if let Some(nested) = p.get("panels") {
                collect(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    collect(&dashboard["panels"], &mut out);
    out
}
