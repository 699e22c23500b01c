//! kustomize's own files (`kustomization.yaml`, Kustomization and Component)
//! with the fields kustomize knows that these files may use; anything else
//! is refused, so a misspelt key is an error rather than silently ignored
//! (kustomize itself rejects unknown keys too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A `kustomization.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kustomization {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name_prefix: Option<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub patches: Vec<Patch>,
    #[serde(default)]
    pub config_map_generator: Vec<Generator>,
    #[serde(default)]
    pub secret_generator: Vec<Generator>,
    #[serde(default)]
    pub generator_options: Option<GeneratorOptions>,
    #[serde(default)]
    pub images: Vec<Image>,
    #[serde(default)]
    pub labels: Vec<LabelSet>,
    #[serde(default)]
    pub common_annotations: BTreeMap<String, String>,
}

/// An entry of `patches`: a file or an inline patch, optionally targeted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Patch {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub patch: Option<String>,
    #[serde(default)]
    pub target: Option<Target>,
    #[serde(default)]
    pub options: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Target {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub label_selector: Option<String>,
    #[serde(default)]
    pub annotation_selector: Option<String>,
}

/// An entry of `configMapGenerator` or `secretGenerator`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Generator {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub behavior: Option<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub literals: Vec<String>,
    #[serde(default)]
    pub envs: Vec<String>,
    #[serde(default)]
    pub options: Option<GeneratorOptions>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GeneratorOptions {
    #[serde(default)]
    pub disable_name_suffix_hash: Option<bool>,
    #[serde(default)]
    pub immutable: Option<bool>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Image {
    pub name: String,
    #[serde(default)]
    pub new_name: Option<String>,
    #[serde(default)]
    pub new_tag: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSet {
    pub pairs: BTreeMap<String, String>,
    #[serde(default)]
    pub include_selectors: Option<bool>,
    #[serde(default)]
    pub include_templates: Option<bool>,
}

impl Kustomization {
    /// Reads a `kustomization.yaml` and checks its `apiVersion` and `kind`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let k: Kustomization = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        match (k.api_version.as_str(), k.kind.as_str()) {
            ("kustomize.config.k8s.io/v1beta1", "Kustomization")
            | ("kustomize.config.k8s.io/v1alpha1", "Component") => Ok(k),
            (v, kind) => Err(format!("{kind} {v}: not a kustomization or a component")),
        }
    }

    pub fn is_component(&self) -> bool {
        self.kind == "Component"
    }

    /// The files this kustomization names that must exist in `dir`, and
    /// what each is: resources (files or kustomization directories),
    /// components, patch files and generator sources.
    pub fn references(&self, dir: &Path) -> Vec<Reference> {
        let mut refs = Vec::new();
        for r in &self.resources {
            refs.push(Reference { role: Role::Resource, path: dir.join(r) });
        }
        for c in &self.components {
            refs.push(Reference { role: Role::Component, path: dir.join(c) });
        }
        for p in self.patches.iter().filter_map(|p| p.path.as_ref()) {
            refs.push(Reference { role: Role::Patch, path: dir.join(p) });
        }
        for g in self.config_map_generator.iter().chain(&self.secret_generator) {
            for f in &g.files {
                // `key=path` names the key; the file is the path.
                let file = f.split_once('=').map_or(f.as_str(), |(_, path)| path);
                refs.push(Reference { role: Role::GeneratorFile, path: dir.join(file) });
            }
            for e in &g.envs {
                refs.push(Reference { role: Role::GeneratorFile, path: dir.join(e) });
            }
        }
        refs
    }
}

/// A file or directory a kustomization refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub role: Role,
    pub path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Resource,
    Component,
    Patch,
    GeneratorFile,
}
