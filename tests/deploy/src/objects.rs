//! Kubernetes objects read strictly: the API's types from `k8s-openapi`
//! (whose own deserialisers skip unknown fields, so every skipped field is
//! collected and reported), and for the one custom resource, the
//! Prometheus Operator's ServiceMonitor, the fields of its CRD that this
//! repository uses, unknown ones refused.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// One Kubernetes object of the deployment files.
#[derive(Debug, Clone)]
pub enum Object {
    DaemonSet(Box<DaemonSet>),
    ConfigMap(Box<ConfigMap>),
    Service(Box<Service>),
    Pod(Box<Pod>),
    ServiceMonitor(Box<ServiceMonitor>),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::DaemonSet(_) => "DaemonSet",
            Object::ConfigMap(_) => "ConfigMap",
            Object::Service(_) => "Service",
            Object::Pod(_) => "Pod",
            Object::ServiceMonitor(_) => "ServiceMonitor",
        }
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            Object::DaemonSet(o) => o.metadata.name.as_deref(),
            Object::ConfigMap(o) => o.metadata.name.as_deref(),
            Object::Service(o) => o.metadata.name.as_deref(),
            Object::Pod(o) => o.metadata.name.as_deref(),
            Object::ServiceMonitor(o) => o.metadata.name.as_deref(),
        }
    }
}

/// The YAML documents of a file, empty ones (a lone `---`, comments only)
/// left out.
pub fn documents(text: &str) -> Result<Vec<serde_yaml::Value>, String> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(de).map_err(|e| format!("document {}: {e}", i + 1))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Deserialises `value` as `T`, failing on any field `T` does not have,
/// at any depth.
pub fn strict<T: DeserializeOwned>(value: serde_yaml::Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let parsed: T =
        serde_ignored::deserialize(value, |path| unknown.push(path.to_string())).map_err(|e| e.to_string())?;
    if unknown.is_empty() {
        Ok(parsed)
    } else {
        Err(format!("unknown field(s): {}", unknown.join(", ")))
    }
}

/// Reads one document as the object its `apiVersion` and `kind` name.
pub fn object(value: serde_yaml::Value) -> Result<Object, String> {
    let field = |name: &str| value.get(name).and_then(serde_yaml::Value::as_str).map(str::to_owned);
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let context =
        |e: String| format!("{} {}: {e}", kind.as_deref().unwrap_or("?"), api_version.as_deref().unwrap_or("?"));
    let object = match (api_version.as_deref(), kind.as_deref()) {
        (Some("apps/v1"), Some("DaemonSet")) => Object::DaemonSet(Box::new(strict(value).map_err(context)?)),
        (Some("v1"), Some("ConfigMap")) => Object::ConfigMap(Box::new(strict(value).map_err(context)?)),
        (Some("v1"), Some("Service")) => Object::Service(Box::new(strict(value).map_err(context)?)),
        (Some("v1"), Some("Pod")) => Object::Pod(Box::new(strict(value).map_err(context)?)),
        (Some("monitoring.coreos.com/v1"), Some("ServiceMonitor")) => {
            Object::ServiceMonitor(Box::new(strict(value).map_err(context)?))
        }
        _ => return Err(context("not a kind these files are expected to hold".into())),
    };
    Ok(object)
}

/// Every object of a file of Kubernetes objects.
pub fn objects(text: &str) -> Result<Vec<Object>, String> {
    documents(text)?
        .into_iter()
        .enumerate()
        .map(|(i, d)| object(d).map_err(|e| format!("document {}: {e}", i + 1)))
        .collect()
}

/// The Prometheus Operator's ServiceMonitor (`monitoring.coreos.com/v1`):
/// the fields of its CRD this repository uses or is likely to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceMonitor {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ServiceMonitorSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    pub selector: LabelSelector,
    #[serde(default)]
    pub namespace_selector: Option<NamespaceSelector>,
    pub endpoints: Vec<MonitorEndpoint>,
    #[serde(default)]
    pub job_label: Option<String>,
    #[serde(default)]
    pub pod_target_labels: Vec<String>,
    #[serde(default)]
    pub target_labels: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[serde(default)]
    pub any: Option<bool>,
    #[serde(default)]
    pub match_names: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MonitorEndpoint {
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub target_port: Option<IntOrString>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub scrape_timeout: Option<String>,
    #[serde(default)]
    pub honor_labels: Option<bool>,
    #[serde(default)]
    pub relabelings: Vec<Relabeling>,
    #[serde(default)]
    pub metric_relabelings: Vec<Relabeling>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Relabeling {
    #[serde(default)]
    pub source_labels: Vec<String>,
    #[serde(default)]
    pub separator: Option<String>,
    #[serde(default)]
    pub target_label: Option<String>,
    #[serde(default)]
    pub regex: Option<String>,
    #[serde(default)]
    pub replacement: Option<String>,
    #[serde(default)]
    pub modulus: Option<u64>,
    #[serde(default)]
    pub action: Option<String>,
}
