//! What a dead run left on a cluster, for `agentgate gc`: the runs of this home whose
//! owner ConfigMaps are still on the clusters and namespaces the operator allows, and
//! their removal.
//!
//! Both go by labels: a run's objects carry `io.agentgate.run-id` and
//! `io.agentgate.home`, and every listing and deletion selects on this home's value,
//! so a cluster shared by several homes (or machines) never loses another home's run
//! here. Which runs are dead is `gc`'s decision (its registry), not this module's:
//! a live run's objects are listed and reaped too, which is how the engine removes
//! them through a fresh instance of the provider when the run's own `destroy` failed.
//! Reaping never reaches into a pod ([`pod::delete_labelled`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::Api;
use serde::{Deserialize, Serialize};

use super::client::{self, Cluster};
use super::objects::{LABEL_ROLE, ROLE_OWNER};
use super::pod;
use super::scope::{AllowedCluster, KubernetesScope};
use crate::capabilities::labels::{LABEL_HOME, LABEL_RUN_ID};
use crate::capabilities::scope::Patterns;
use crate::wit::kubernetes_v0_1_0::cluster::Leftover;
use crate::wit::types::{Error, Label};

/// What a leftover's opaque id names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftoverId {
    pub context: String,
    pub kubeconfig: Option<String>,
    pub namespace: String,
    pub run_id: String,
}

impl LeftoverId {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a leftover id serializes")
    }

    pub fn decode(id: &str) -> Result<LeftoverId, Error> {
        serde_json::from_str(id).map_err(|e| {
            Error::InvalidSpec(crate::wit::types::FieldError {
                path: "id".into(),
                message: format!("not an id list-leftovers returned: {e}"),
            })
        })
    }

    /// Whether this id's cluster is `allowed`.
    pub fn is_of(&self, allowed: &AllowedCluster) -> bool {
        allowed.context == self.context
            && allowed.kubeconfig.as_ref().map(|p| p.display().to_string()) == self.kubeconfig
    }
}

/// The selector of this home's owner ConfigMaps.
fn owners_of(home: &str) -> String {
    format!("{LABEL_ROLE}={ROLE_OWNER},{LABEL_HOME}={home}")
}

/// The namespaces named without a wildcard, to list one by one where the cluster
/// refuses a listing across namespaces.
fn literal(patterns: &Patterns) -> Vec<String> {
    match patterns {
        Patterns::Any => Vec::new(),
        Patterns::Only(list) => list
            .iter()
            .map(|p| p.written.clone())
            .filter(|w| !w.contains(['*', '?', '[', '{']))
            .collect(),
    }
}

/// This home's runs with objects on `cluster`, in the namespaces both `allowed` and
/// `scope` allow.
pub async fn list(
    cluster: &Cluster,
    allowed: &AllowedCluster,
    scope: &KubernetesScope,
    home: &str,
) -> Result<Vec<Leftover>, Error> {
    let selector = ListParams::default().labels(&owners_of(home));
    let everywhere: Api<ConfigMap> = Api::all(cluster.client.clone());
    let owners = match client::call("listing owner ConfigMaps", everywhere.list(&selector)).await? {
        Ok(list) => list.items,
        Err(e) if client::status(&e) == Some(403) => {
            let mut found = Vec::new();
            for namespace in literal(&allowed.namespaces) {
                let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &namespace);
                found.extend(
                    client::checked("listing owner ConfigMaps", api.list(&selector))
                        .await?
                        .items,
                );
            }
            found
        }
        Err(e) => return Err(client::failed("listing owner ConfigMaps", e)),
    };
    let mut runs: BTreeMap<(String, String), Leftover> = BTreeMap::new();
    for owner in owners {
        let labels = owner.metadata.labels.clone().unwrap_or_default();
        let (Some(namespace), Some(run_id)) = (
            owner.metadata.namespace.clone(),
            labels.get(LABEL_RUN_ID).cloned(),
        ) else {
            continue;
        };
        // The label was selected on; checked again so no other home's run slips in.
        if labels.get(LABEL_HOME).map(String::as_str) != Some(home)
            || !allowed.namespaces.allows(&namespace)
            || !scope.namespaces.allows(&namespace)
        {
            continue;
        }
        let created_at_ms = owner
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0));
        let id = LeftoverId {
            context: cluster.context.clone(),
            kubeconfig: cluster.kubeconfig.as_ref().map(|p| p.display().to_string()),
            namespace: namespace.clone(),
            run_id: run_id.clone(),
        };
        runs.entry((namespace, run_id)).or_insert_with(|| Leftover {
            id: id.encode(),
            labels: labels
                .into_iter()
                .map(|(key, value)| Label { key, value })
                .collect(),
            created_at_ms,
        });
    }
    Ok(runs.into_values().collect())
}

/// Deletes every object of `id`'s run made by this home.
pub async fn reap(cluster: &Cluster, id: &LeftoverId, home: &str) -> Result<(), Error> {
    let selector = format!("{LABEL_RUN_ID}={},{LABEL_HOME}={home}", id.run_id);
    pod::delete_labelled(cluster, &id.namespace, &selector, pod::DELETE_AT_LEISURE).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::scope::Compared;

    #[test]
    fn an_id_names_its_cluster_and_round_trips() {
        let id = LeftoverId {
            context: "agentgate-test".into(),
            kubeconfig: Some("/k".into()),
            namespace: "agentgate-1".into(),
            run_id: "0192".into(),
        };
        assert_eq!(LeftoverId::decode(&id.encode()).unwrap(), id);
        assert!(LeftoverId::decode("pod-1").is_err());
        let patterns = |p: &[&str]| {
            Patterns::parse(
                "x",
                Compared::AS_WRITTEN,
                &p.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .unwrap()
        };
        let allowed = AllowedCluster {
            context: "agentgate-test".into(),
            kubeconfig: Some("/k".into()),
            namespaces: patterns(&["agentgate-*", "team"]),
            images: Patterns::Any,
            network_policy_enforced: false,
            root: false,
        };
        assert!(id.is_of(&allowed));
        assert!(!LeftoverId {
            kubeconfig: None,
            ..id.clone()
        }
        .is_of(&allowed));
        assert_eq!(literal(&allowed.namespaces), ["team"]);
        assert_eq!(
            owners_of("h1"),
            "io.agentgate.role=owner,io.agentgate.home=h1"
        );
    }
}
