//! The operator's say over `kubernetes`: the host-wide section that lists the clusters
//! a run may use at all, and the per-plugin scope that narrows it.
//!
//! ```yaml
//! kubernetes:
//!   clusters:
//!     - context: agentgate-test        # required
//!       kubeconfig: /var/lib/k8s/admin.kubeconfig   # optional; default lookup
//!       namespaces: [agentgate-*]
//!       images: ["agentgate.test/*"]
//!       networkPolicy: enforced         # default not-enforced: `network: none` refused
//!       root: false                     # run-as-user 0 refused
//!       hostPaths: false                # this build never mounts host paths
//!       privileged: false               # nor runs a privileged container
//! ```
//!
//! No section is no cluster: `create-pod` is `denied` with the lines to add (fail
//! closed). A TaskSpec's `kubeconfig` must be a file listed here, so a TaskSpec never
//! makes the host read a file of its choosing. The per-plugin entry `kubernetes:
//! {contexts, namespaces, images}` narrows what the section allows: a built-in
//! (`sandbox-kubernetes`) starts with all of it, any other plugin with nothing.
//! `--grant` items: `kubernetes:context=GLOB`, `kubernetes:namespace=GLOB`,
//! `kubernetes:image=GLOB`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use crate::capabilities::scope::{
    typed_entry, Base, Compared, EntryError, FlagItem, Patterns, Scope, ScopeDenial, ScopeError,
    ScopeShape,
};
use crate::capabilities::Capability;
use crate::home_path::{absolute_host_path, HomePathError};

/// The capability's name, as denials and `grants.yaml` spell it.
const NAME: &str = "kubernetes";

/// The keys of the host-wide section.
pub(super) const HOST_SECTION_FIELDS: &[&str] = &["clusters"];

/// `networkPolicy:` of a cluster: whether the cluster's network plugin enforces
/// NetworkPolicy, which only the operator can know (a policy a CNI ignores is
/// accepted by the API server all the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum NetworkPolicyMode {
    Enforced,
    #[default]
    NotEnforced,
}

/// One entry of `kubernetes: clusters:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterEntry {
    context: String,
    #[serde(default)]
    kubeconfig: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    images: Vec<String>,
    #[serde(default)]
    network_policy: NetworkPolicyMode,
    #[serde(default)]
    root: bool,
    #[serde(default)]
    host_paths: bool,
    #[serde(default)]
    privileged: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionEntry {
    #[serde(default)]
    clusters: Vec<ClusterEntry>,
}

/// A cluster the operator allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedCluster {
    pub context: String,
    /// The kubeconfig file, absolute; `None`: the usual lookup of the user agentgate
    /// runs as.
    pub kubeconfig: Option<PathBuf>,
    pub namespaces: Patterns,
    pub images: Patterns,
    /// The operator declared that the cluster enforces NetworkPolicy.
    pub network_policy_enforced: bool,
    /// Pods may run as uid 0.
    pub root: bool,
}

/// Why the host-wide `kubernetes:` section does not read; `clusters[N]` names the
/// entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SectionError {
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    #[error("clusters[{0}].context: a context must be named")]
    Unnamed(usize),
    #[error(
        "clusters[{0}].hostPaths: true is not possible: this build never mounts a host path \
         into a pod; remove the key or set it to false"
    )]
    HostPaths(usize),
    #[error(
        "clusters[{0}].privileged: true is not possible: this build never runs a privileged \
         container; remove the key or set it to false"
    )]
    Privileged(usize),
    #[error("clusters[{index}].kubeconfig: {path:?} {problem}")]
    Kubeconfig {
        index: usize,
        path: String,
        #[source]
        problem: HomePathError,
    },
    #[error(transparent)]
    Patterns(#[from] ScopeError),
}

impl From<SectionError> for EntryError {
    fn from(error: SectionError) -> EntryError {
        EntryError::capability(error)
    }
}

/// The host-wide `kubernetes:` section, read: the clusters any run may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubernetesGrant {
    pub clusters: Vec<AllowedCluster>,
}

impl KubernetesGrant {
    /// Reads the section; what it may never allow in this build is refused here, so a
    /// `grants.yaml` that asks for it does not load.
    pub fn read(section: &Value) -> Result<KubernetesGrant, SectionError> {
        let entry: SectionEntry = serde_yaml::from_value(section.clone())?;
        let env = |name: &str| std::env::var(name).ok();
        let clusters = entry
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if c.context.trim().is_empty() {
                    return Err(SectionError::Unnamed(i));
                }
                if c.host_paths {
                    return Err(SectionError::HostPaths(i));
                }
                if c.privileged {
                    return Err(SectionError::Privileged(i));
                }
                let kubeconfig = c
                    .kubeconfig
                    .as_deref()
                    .map(|k| {
                        absolute_host_path(k, &env).map_err(|problem| SectionError::Kubeconfig {
                            index: i,
                            path: k.to_string(),
                            problem,
                        })
                    })
                    .transpose()?;
                let patterns = |key: &str, written: &[String]| {
                    Patterns::parse(
                        &format!("kubernetes.clusters[{i}].{key}"),
                        Compared::AS_WRITTEN,
                        written,
                    )
                };
                Ok(AllowedCluster {
                    context: c.context.clone(),
                    kubeconfig,
                    namespaces: patterns("namespaces", &c.namespaces)?,
                    images: patterns("images", &c.images)?,
                    network_policy_enforced: c.network_policy == NetworkPolicyMode::Enforced,
                    root: c.root,
                })
            })
            .collect::<Result<_, SectionError>>()?;
        Ok(KubernetesGrant { clusters })
    }

    /// The kubeconfig files the operator listed: no TaskSpec mount may reach them.
    pub fn kubeconfigs(&self) -> impl Iterator<Item = &Path> {
        self.clusters.iter().filter_map(|c| c.kubeconfig.as_deref())
    }

    /// The clusters a TaskSpec naming `kubeconfig` may use: with none named, those of
    /// the usual lookup; with one named, those whose listed file it is (the same file,
    /// through any link), and never another file.
    pub fn with_kubeconfig(
        &self,
        plugin: &str,
        call: &'static str,
        kubeconfig: Option<&str>,
    ) -> Result<Vec<&AllowedCluster>, ScopeDenial> {
        if self.clusters.is_empty() {
            return Err(self.no_cluster(plugin, call, "any cluster".into(), "CONTEXT"));
        }
        let Some(asked) = kubeconfig else {
            return Ok(self.clusters.iter().collect());
        };
        let same = |listed: &Path| {
            let asked = Path::new(asked);
            listed == asked
                || matches!((listed.canonicalize(), asked.canonicalize()), (Ok(a), Ok(b)) if a == b)
        };
        let found: Vec<_> = self
            .clusters
            .iter()
            .filter(|c| c.kubeconfig.as_deref().is_some_and(same))
            .collect();
        if found.is_empty() {
            return Err(host_denial(
                plugin,
                call,
                format!("kubeconfig {asked:?}"),
                format!(
                    "kubernetes.clusters[].kubeconfig: {}",
                    self.listed_kubeconfigs()
                ),
                format!("kubernetes: {{clusters: [{{context: CONTEXT, kubeconfig: {asked:?}}}]}}"),
            ));
        }
        Ok(found)
    }

    fn listed_kubeconfigs(&self) -> String {
        let listed: Vec<String> = self
            .kubeconfigs()
            .map(|p| p.display().to_string())
            .collect();
        if listed.is_empty() {
            "none".into()
        } else {
            listed.join(", ")
        }
    }

    /// The denial when no listed cluster is `context`.
    pub fn no_cluster(
        &self,
        plugin: &str,
        call: &'static str,
        argument: String,
        context: &str,
    ) -> ScopeDenial {
        let allowed: Vec<&str> = self.clusters.iter().map(|c| c.context.as_str()).collect();
        host_denial(
            plugin,
            call,
            argument,
            format!(
                "kubernetes.clusters: {}",
                if allowed.is_empty() {
                    "none (grants.yaml has no `kubernetes:` section)".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
            format!(
                "kubernetes: {{clusters: [{{context: {context}, namespaces: [NAMESPACE], \
                 images: [IMAGE]}}]}}"
            ),
        )
    }
}

impl AllowedCluster {
    pub fn check_namespace(
        &self,
        plugin: &str,
        call: &'static str,
        namespace: &str,
    ) -> Result<(), ScopeDenial> {
        if self.namespaces.allows(namespace) {
            return Ok(());
        }
        Err(host_denial(
            plugin,
            call,
            format!("namespace {namespace:?} of context {:?}", self.context),
            format!(
                "kubernetes.clusters[{}].namespaces: {}",
                self.context,
                self.namespaces.text()
            ),
            format!(
                "kubernetes: {{clusters: [{{context: {}, namespaces: [{namespace:?}]}}]}}",
                self.context
            ),
        ))
    }

    pub fn check_image(
        &self,
        plugin: &str,
        call: &'static str,
        image: &str,
    ) -> Result<(), ScopeDenial> {
        if self.images.allows(image) {
            return Ok(());
        }
        Err(host_denial(
            plugin,
            call,
            format!("image {image:?} on context {:?}", self.context),
            format!(
                "kubernetes.clusters[{}].images: {}",
                self.context,
                self.images.text()
            ),
            format!(
                "kubernetes: {{clusters: [{{context: {}, images: [{image:?}]}}]}}",
                self.context
            ),
        ))
    }

    /// `network: none` holds only where NetworkPolicy is enforced; elsewhere it is
    /// refused rather than promised and not kept.
    pub fn check_network_none(&self, plugin: &str, call: &'static str) -> Result<(), ScopeDenial> {
        if self.network_policy_enforced {
            return Ok(());
        }
        Err(host_denial(
            plugin,
            call,
            format!(
                "network \"none\" on context {:?}, whose NetworkPolicy enforcement the operator \
                 has not declared (a policy the cluster's network plugin ignores would keep \
                 nothing)",
                self.context
            ),
            format!(
                "kubernetes.clusters[{}].networkPolicy: not-enforced",
                self.context
            ),
            format!(
                "kubernetes: {{clusters: [{{context: {}, networkPolicy: enforced}}]}} (only \
                 if the cluster's network plugin enforces NetworkPolicy)",
                self.context
            ),
        ))
    }

    pub fn check_user(
        &self,
        plugin: &str,
        call: &'static str,
        uid: u32,
    ) -> Result<(), ScopeDenial> {
        if uid != 0 || self.root {
            return Ok(());
        }
        Err(host_denial(
            plugin,
            call,
            format!("run-as-user 0 (root) on context {:?}", self.context),
            format!("kubernetes.clusters[{}].root: false", self.context),
            format!(
                "kubernetes: {{clusters: [{{context: {}, root: true}}]}}",
                self.context
            ),
        ))
    }
}

/// A denial whose remedy is the host-wide section, not a plugin's entry.
fn host_denial(
    plugin: &str,
    call: &'static str,
    argument: String,
    allowed: String,
    allow: String,
) -> ScopeDenial {
    ScopeDenial {
        plugin: plugin.to_string(),
        capability: Capability::named(NAME).expect("kubernetes is a capability of this host"),
        call,
        argument,
        allowed,
        allow,
    }
}

/// `kubernetes:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct KubernetesEntry {
    #[serde(default)]
    contexts: Option<Vec<String>>,
    #[serde(default)]
    namespaces: Option<Vec<String>>,
    #[serde(default)]
    images: Option<Vec<String>>,
}

/// How far one plugin reaches within the host-wide section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesScope {
    pub contexts: Patterns,
    pub namespaces: Patterns,
    pub images: Patterns,
}

impl Scope for KubernetesScope {
    fn shown(&self) -> serde_json::Value {
        serde_json::json!({
            "contexts": self.contexts.shown(),
            "namespaces": self.namespaces.shown(),
            "images": self.images.shown(),
            "within": "the clusters of the top-level `kubernetes:` section",
        })
    }
    crate::scope_any!();
}

impl KubernetesScope {
    /// Checks the plugin's own narrowing of the host-wide section.
    pub fn check(
        &self,
        plugin: &str,
        call: &'static str,
        context: &str,
        namespace: &str,
        image: Option<&str>,
    ) -> Result<(), ScopeDenial> {
        let refuse = |argument: String, allowed: String, key_value: String| {
            Err(ScopeDenial::new(
                plugin, NAME, call, argument, allowed, key_value,
            ))
        };
        if !self.contexts.allows(context) {
            return refuse(
                format!("context {context:?}"),
                format!("kubernetes.contexts: {}", self.contexts.text()),
                format!("contexts: [{context:?}]"),
            );
        }
        if !self.namespaces.allows(namespace) {
            return refuse(
                format!("namespace {namespace:?}"),
                format!("kubernetes.namespaces: {}", self.namespaces.text()),
                format!("namespaces: [{namespace:?}]"),
            );
        }
        if let Some(image) = image.filter(|i| !self.images.allows(i)) {
            return refuse(
                format!("image {image:?}"),
                format!("kubernetes.images: {}", self.images.text()),
                format!("images: [{image:?}]"),
            );
        }
        Ok(())
    }
}

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["contexts", "namespaces", "images"]
    }

    fn base(&self, base: Base) -> Arc<dyn Scope> {
        let all = match base {
            Base::Widest => Patterns::Any,
            Base::Narrowest => Patterns::none(),
        };
        Arc::new(KubernetesScope {
            contexts: all.clone(),
            namespaces: all.clone(),
            images: all,
        })
    }

    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: KubernetesEntry = typed_entry(NAME, entry)?;
        let mut scope = downcast(scope);
        let parse = |key: &str, p: &[String]| {
            Patterns::parse(&format!("kubernetes.{key}"), Compared::AS_WRITTEN, p)
        };
        if let Some(p) = &e.contexts {
            scope.contexts = parse("contexts", p)?;
        }
        if let Some(p) = &e.namespaces {
            scope.namespaces = parse("namespaces", p)?;
        }
        if let Some(p) = &e.images {
            scope.images = parse("images", p)?;
        }
        Ok(Arc::new(scope))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &[
            "kubernetes:context=GLOB",
            "kubernetes:namespace=GLOB",
            "kubernetes:image=GLOB",
        ]
    }

    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError> {
        let item = FlagItem::parse(NAME, rest);
        match item.key {
            "context" => item.push(entry, "contexts"),
            "namespace" => item.push(entry, "namespaces"),
            "image" => item.push(entry, "images"),
            _ => Err(item.unknown()),
        }
    }
}

/// The scope of a plugin that was not granted `kubernetes` at all.
pub(super) fn narrowest() -> KubernetesScope {
    downcast(Shape.base(Base::Narrowest).as_ref())
}

fn downcast(scope: &dyn Scope) -> KubernetesScope {
    crate::capabilities::scope::concrete(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(yaml: &str) -> Result<KubernetesGrant, SectionError> {
        KubernetesGrant::read(&serde_yaml::from_str(yaml).unwrap())
    }

    const TEST_CLUSTER: &str = "
clusters:
  - context: agentgate-test
    kubeconfig: /var/lib/agentgate-k8s/admin.kubeconfig
    namespaces: [agentgate-*]
    images: [\"agentgate.test/*\"]
";

    #[test]
    fn no_section_allows_no_cluster_and_says_what_to_add() {
        let none = KubernetesGrant::default();
        let denial = none
            .with_kubeconfig("sandbox-kubernetes", "kubernetes.create-pod", None)
            .unwrap_err();
        assert!(
            denial
                .allow
                .starts_with("kubernetes: {clusters: [{context: "),
            "{}",
            denial.allow
        );
        let text = denial.to_string();
        assert!(text.contains("no `kubernetes:` section"), "{text}");
        assert!(text.contains("sandbox-kubernetes"), "{text}");
    }

    #[test]
    fn a_listed_cluster_allows_its_namespaces_and_images_only() {
        let g = grant(TEST_CLUSTER).unwrap();
        let c = &g.clusters[0];
        assert!(c.check_namespace("p", "x", "agentgate-1").is_ok());
        assert!(c.check_namespace("p", "x", "kube-system").is_err());
        assert!(c.check_image("p", "x", "agentgate.test/busybox:1").is_ok());
        let denial = c.check_image("p", "x", "docker.io/evil:1").unwrap_err();
        assert_eq!(
            denial.allow,
            "kubernetes: {clusters: [{context: agentgate-test, images: [\"docker.io/evil:1\"]}]}"
        );
        // Defaults: NetworkPolicy not declared enforced, no root.
        assert!(c.check_network_none("p", "x").is_err());
        assert!(c.check_user("p", "x", 0).is_err());
        assert!(c.check_user("p", "x", 65534).is_ok());
    }

    #[test]
    fn a_taskspec_kubeconfig_must_be_one_the_operator_listed() {
        let g = grant(TEST_CLUSTER).unwrap();
        assert_eq!(
            g.with_kubeconfig("p", "x", Some("/var/lib/agentgate-k8s/admin.kubeconfig"))
                .unwrap()
                .len(),
            1
        );
        let denial = g
            .with_kubeconfig("p", "x", Some("/root/.ssh/id_rsa"))
            .unwrap_err();
        assert!(denial.argument.contains("/root/.ssh/id_rsa"), "{denial}");
        assert_eq!(g.with_kubeconfig("p", "x", None).unwrap().len(), 1);
        assert_eq!(
            g.kubeconfigs().collect::<Vec<_>>(),
            [Path::new("/var/lib/agentgate-k8s/admin.kubeconfig")]
        );
    }

    #[test]
    fn host_paths_and_privileged_are_refused_with_why() {
        for key in ["hostPaths", "privileged"] {
            let e = grant(&format!("clusters: [{{context: c, {key}: true}}]"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("clusters[0].{key}")), "{e}");
            assert!(e.contains("this build never"), "{e}");
        }
        assert!(grant("clusters: [{context: c, hostPaths: false, privileged: false}]").is_ok());
        let e = grant("clusters: [{context: c, hostpath: true}]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hostpath"), "{e}");
        let e = grant("clusters: [{kubeconfig: /x}]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("context"), "{e}");
        let e = grant("clusters: [{context: c, networkPolicy: maybe}]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("enforced"), "{e}");
        let g = grant("clusters: [{context: c, networkPolicy: enforced, root: true}]").unwrap();
        assert!(g.clusters[0].check_network_none("p", "x").is_ok());
        assert!(g.clusters[0].check_user("p", "x", 0).is_ok());
    }

    #[test]
    fn a_third_party_plugin_reaches_nothing_until_granted() {
        let none = narrowest();
        let denial = none
            .check("my-provider", "kubernetes.create-pod", "c", "ns", Some("i"))
            .unwrap_err();
        assert_eq!(
            denial.allow,
            "plugins: {my-provider: {kubernetes: {contexts: [\"c\"]}}}"
        );
        let entry = serde_yaml::from_str("{contexts: [c], namespaces: [team-*]}").unwrap();
        let scope = downcast(Shape.narrowed(&none, &entry).unwrap().as_ref());
        assert!(scope.check("p", "x", "c", "team-a", None).is_ok());
        assert!(scope.check("p", "x", "c", "other", None).is_err());
        // Images were not granted.
        assert!(scope.check("p", "x", "c", "team-a", Some("i")).is_err());
        let widest = downcast(Shape.base(Base::Widest).as_ref());
        assert!(widest.check("p", "x", "any", "any", Some("any")).is_ok());
    }

    #[test]
    fn grant_flag_items_fill_the_entry() {
        let mut entry = Value::Null;
        Shape.add_flag_item("namespace=team-*", &mut entry).unwrap();
        Shape
            .add_flag_item("image=agentgate.test/*", &mut entry)
            .unwrap();
        Shape.add_flag_item("context=c", &mut entry).unwrap();
        let e: KubernetesEntry = typed_entry(NAME, &entry).unwrap();
        assert_eq!(e.namespaces.unwrap(), ["team-*"]);
        assert!(Shape.add_flag_item("hostPaths", &mut entry).is_err());
    }
}
