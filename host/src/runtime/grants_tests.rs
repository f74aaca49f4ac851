//! The grants file, `--grant` and built-in grants (`runtime::grants`), end to end
//! through this host's capabilities: their scopes are shown as `plugins inspect`
//! shows them. Here, above the capabilities, rather than in `runtime/grants/`, whose
//! own code names none.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::capabilities::Capability;
use crate::host_paths::PathGrants;
use crate::runtime::grants::*;

/// The names of `capabilities`, in order.
fn names(capabilities: &BTreeSet<Capability>) -> Vec<&'static str> {
    capabilities.iter().map(|c| c.name()).collect()
}

fn cap(name: &str) -> Capability {
    Capability::named(name).unwrap()
}

/// The hosts of the `http` scope of `granted`.
fn hosts(granted: &Granted) -> serde_json::Value {
    shown(granted, "http")["hosts"].clone()
}

/// The scope of `capability` as `plugins inspect` shows it.
fn shown(granted: &Granted, capability: &str) -> serde_json::Value {
    granted
        .scopes
        .shown()
        .get(capability)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn classifies_imports() {
    let imports = classify_imports([
        "agentgate:plugin/types@0.1.0",
        "agentgate:plugin/execution@0.1.0",
        "agentgate:plugin/process@0.1.0",
        "wasi:cli/environment@0.2.6",
        "wasi:http/types@0.2.0",
        "wasi:http/outgoing-handler@0.2.0",
        "wasi:keyvalue/store@0.2.0",
        "evil:x/y",
    ]);
    assert_eq!(imports.capabilities(), [cap("process"), cap("http")].into());
    assert_eq!(imports.unknown(), ["wasi:keyvalue/store@0.2.0", "evil:x/y"]);
    // Every import is listed with what it grants, WASI included.
    assert_eq!(imports.interfaces.len(), 8);
    let environment = &imports.interfaces[3];
    assert!(
        environment.grants().contains("no environment"),
        "{environment:?}"
    );
    assert!(imports.interfaces[4]
        .grants()
        .starts_with("nothing by itself"));
    assert!(imports.interfaces[5]
        .grants()
        .starts_with("capability http"));
}

#[test]
fn refusal_names_the_interface() {
    let imports = classify_imports([
        "agentgate:plugin/docker@0.1.0",
        "agentgate:plugin/events@0.1.0",
    ]);
    let granted = Granted {
        capabilities: [cap("events")].into(),
        ..Granted::default()
    };
    let err = check("p", &imports, &granted).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("agentgate:plugin/docker@0.1.0 (docker)"),
        "{text}"
    );
    assert!(text.contains("--grant p=docker"), "{text}");
}

#[test]
fn an_http_refusal_names_exactly_the_interface_imported() {
    // `types` alone needs no grant; `outgoing-handler` needs `http`.
    let types_only = classify_imports(["wasi:http/types@0.2.3"]);
    assert!(check("js", &types_only, &Granted::default()).is_ok());
    let both = classify_imports(["wasi:http/types@0.2.3", "wasi:http/outgoing-handler@0.2.3"]);
    let text = check("js", &both, &Granted::default())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("it imports wasi:http/outgoing-handler@0.2.3 (http) which was not granted"),
        "{text}"
    );
    assert!(!text.contains("wasi:http/types"), "{text}");
}

#[test]
fn a_grants_file_that_does_not_parse_names_the_file_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    std::fs::write(
        &path,
        "plugins:\n  p:\n    capabilities: [events]\n  q:\n    capabilities: [root]\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("line 5"), "{text}");
    assert!(text.contains("unknown variant `root`"), "{text}");
    assert!(text.contains("capabilities: [events, sandbox]"), "{text}");

    // An appended line that is not YAML at all.
    std::fs::write(&path, "plugins: {}\n}}} not yaml\n").unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains("line 2"), "{text}");
}

#[test]
fn the_operators_docker_allowances_are_read_and_misspellings_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    std::fs::write(
        &path,
        "docker:\n  hostNetwork: true\n  mounts: [~/data, /srv]\n",
    )
    .unwrap();
    let grants = Grants::from_file(&path).unwrap();
    let run = crate::capabilities::RunContext::new(
        crate::capabilities::labels::RunIdentity::new(
            "r".into(),
            "pid=1,start=1,boot=test,pidns=1".into(),
            std::path::Path::new("/"),
        ),
        std::sync::Arc::new(crate::record::EventSink::discard()),
        grants.sections.clone(),
    );
    let docker = run
        .state::<crate::capabilities::docker::DockerGrant>()
        .unwrap();
    assert!(docker.host_network);
    assert_eq!(docker.mounts, ["~/data", "/srv"]);

    std::fs::write(&path, "docker:\n  host_network: true\n").unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains("unknown field `host_network`"), "{text}");
    assert!(text.contains("line 2"), "{text}");
}

#[test]
fn host_folders_are_read_with_home_expanded_and_the_old_docker_list_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    let home = std::env::var("HOME").unwrap();
    std::fs::write(&path, "workspaces: [~/src, /srv/repos]\nmounts: []\n").unwrap();
    let grants = Grants::from_file(&path).unwrap();
    assert_eq!(
        grants.paths.workspaces,
        Some(vec![
            PathBuf::from(format!("{home}/src")),
            "/srv/repos".into()
        ])
    );
    assert_eq!(
        grants.paths.mounts,
        Some(vec![]),
        "an empty list allows nothing"
    );
    assert!(grants.warnings.is_empty());

    // Where the operator said nothing, the default holds.
    std::fs::write(&path, "plugins: {}\n").unwrap();
    assert_eq!(
        Grants::from_file(&path).unwrap().paths,
        PathGrants::default()
    );

    // `docker: mounts:` still allows what it names, now for every provider, and says so.
    std::fs::write(&path, "docker:\n  mounts: [~/data]\nmounts: [/srv/x]\n").unwrap();
    let grants = Grants::from_file(&path).unwrap();
    assert_eq!(
        grants.paths.mounts,
        Some(vec!["/srv/x".into(), PathBuf::from(format!("{home}/data"))])
    );
    assert!(
        grants.warnings[0].contains("`docker: mounts:` is read as the top-level `mounts:`"),
        "{:?}",
        grants.warnings
    );

    std::fs::write(&path, "workspaces: [src]\n").unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(
        text.contains("workspaces: \"src\" is not an absolute path"),
        "{text}"
    );
    std::fs::write(&path, "workspaces: /srv\n").unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains("line 1"), "{text}");
}

#[test]
fn an_empty_or_missing_grants_file_grants_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    assert_eq!(Grants::from_file(&path).unwrap(), Grants::default());
    std::fs::write(&path, "# nothing granted yet\n").unwrap();
    assert_eq!(Grants::from_file(&path).unwrap(), Grants::default());
}

#[test]
fn version_and_digest_pin_a_grant() {
    let mut grants = Grants::default();
    grants.add_flag("p=events,sandbox").unwrap();
    let caps = |g: &Grants, v: &str, d: &str| g.granted("p", v, d).capabilities.len();
    assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 2);
    grants.plugins.get_mut("p").unwrap().version = Some("1.0.0".into());
    assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 2);
    assert_eq!(caps(&grants, "1.1.0", "sha256:aa"), 0);
    grants.plugins.get_mut("p").unwrap().digest = Some("sha256:bb".into());
    assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 0);
    assert!(grants.add_flag("p=root").is_err());
    assert!(grants.add_flag("=events").is_err());
}

#[test]
fn a_pin_to_another_build_says_which_pin_differs_and_shows_both() {
    let mut grants = Grants::default();
    grants.add_flag("p=events").unwrap();
    let imports = classify_imports(["agentgate:plugin/events@0.1.0"]);
    let grant = grants.plugins.get_mut("p").unwrap();
    grant.digest = Some("sha256:bb".into());
    let text = check("p", &imports, &grants.granted("p", "1.0.0", "sha256:aa"))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("pinned to digest sha256:bb but this component's digest is sha256:aa"),
        "{text}"
    );

    grants.plugins.get_mut("p").unwrap().version = Some("2.0.0".into());
    let text = check("p", &imports, &grants.granted("p", "1.0.0", "sha256:aa"))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("pinned to version \"2.0.0\" but the plugin reports version \"1.0.0\""),
        "{text}"
    );
    // A plugin that needs nothing is not refused because of a stale pin.
    let nothing = classify_imports(["agentgate:plugin/types@0.1.0"]);
    assert!(check("p", &nothing, &grants.granted("p", "1.0.0", "sha256:aa")).is_ok());
}

#[test]
fn an_http_grant_carries_its_hosts() {
    let mut grants = Grants::default();
    grants
        .add_flag("d=events,http:api.example.com,http:127.0.0.1:8080")
        .unwrap();
    let granted = grants.granted("d", "1.0.0", "sha256:aa");
    assert_eq!(granted.capabilities, [cap("events"), cap("http")].into());
    assert_eq!(
        hosts(&granted),
        serde_json::json!(["api.example.com", "127.0.0.1:8080"])
    );
    let text = grants
        .add_flag("d=http:https://x.com/")
        .unwrap_err()
        .to_string();
    assert!(text.contains("a host, not a URL"), "{text}");
    // `http` alone allows no host at all.
    grants.add_flag("e=http").unwrap();
    assert_eq!(
        hosts(&grants.granted("e", "1", "sha256:aa")),
        serde_json::json!([])
    );
}

#[test]
fn grants_file_hosts_are_checked_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    std::fs::write(
        &path,
        "plugins:\n  d:\n    capabilities: [http]\n    hosts: [api.example.com, \"localhost:9000\"]\n",
    )
    .unwrap();
    let grants = Grants::from_file(&path).unwrap();
    assert_eq!(
        hosts(&grants.granted("d", "1", "x")),
        serde_json::json!(["api.example.com", "localhost:9000"])
    );
    std::fs::write(
        &path,
        "plugins:\n  d:\n    capabilities: [http]\n    hosts: [\"*.example.com\"]\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(
        text.contains("plugins.d.hosts") && text.contains("no wildcards"),
        "{text}"
    );
    std::fs::write(
        &path,
        "plugins:\n  d:\n    capabilities: [events]\n    hosts: [api.example.com]\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains("capability http is not granted"), "{text}");
}

#[test]
fn the_builtin_sdk_driver_reaches_only_the_anthropic_host() {
    use crate::wit::types::PluginKind;
    let mut grants = Grants::default();
    let sdk = "agent-claude-agent-sdk";
    let granted = builtin_granted(sdk, PluginKind::AgentDriver, &grants);
    assert!(granted.capabilities.contains(&cap("http")));
    assert_eq!(hosts(&granted), serde_json::json!(["api.anthropic.com"]));
    assert_eq!(
        base_url_variables().collect::<Vec<_>>(),
        ["ANTHROPIC_BASE_URL"]
    );
    grants
        .set_base_url("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000/v1/")
        .unwrap();
    let granted = builtin_granted(sdk, PluginKind::AgentDriver, &grants);
    assert_eq!(hosts(&granted), serde_json::json!(["127.0.0.1:4000"]));
    // Other built-in drivers get no http at all.
    let other = builtin_granted("agent-command", PluginKind::AgentDriver, &grants);
    assert!(!other.capabilities.contains(&cap("http")));
    let text = grants
        .set_base_url("ANTHROPIC_BASE_URL", "api.anthropic.com")
        .unwrap_err()
        .to_string();
    assert!(text.starts_with("ANTHROPIC_BASE_URL:"), "{text}");
}

#[test]
fn scopes_are_read_from_the_plugins_entry_with_todays_files_unchanged() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    std::fs::write(
        &path,
        r#"plugins:
  my-provider:
    capabilities: [events, process, docker, git, github, http]
    process: {unsealed: false, programs: ["/usr/bin/python3"]}
    docker: {images: ["ghcr.io/acme/*"], hostNetwork: false, mounts: []}
    git: {remotes: ["https://git.example.com/team/*"], push: false}
    github: {repos: ["acme/*"], create: false, fork: false}
    http: {hosts: [api.example.com]}
  sandbox-docker:
    docker: {images: ["node:20", "python:3.12-*"]}
"#,
    )
    .unwrap();
    let grants = Grants::from_file(&path).unwrap();
    let granted = grants.granted("my-provider", "1", "sha256:aa");
    assert_eq!(hosts(&granted), json!(["api.example.com"]));
    assert_eq!(
        shown(&granted, "process"),
        json!({"unsealed": false, "programs": []})
    );
    assert_eq!(
        shown(&granted, "docker"),
        json!({"images": ["ghcr.io/acme/*"], "hostNetwork": false, "mounts": []})
    );
    assert_eq!(
        shown(&granted, "git"),
        json!({"remotes": ["https://git.example.com/team/*"], "push": false})
    );
    assert_eq!(
        shown(&granted, "github"),
        json!({"repos": ["acme/*"], "create": false, "fork": false})
    );

    // A built-in keeps today's scope, narrowed only where the operator wrote a key.
    use crate::wit::types::PluginKind;
    let docker = builtin_granted("sandbox-docker", PluginKind::SandboxProvider, &grants);
    assert_eq!(
        shown(&docker, "docker"),
        json!({"images": ["node:20", "python:3.12-*"], "hostNetwork": true,
               "mounts": "any the top-level mounts: allows"})
    );
    assert_eq!(
        shown(&docker, "process"),
        json!({"unsealed": true, "programs": "any"})
    );
    let none = builtin_granted("sandbox-none", PluginKind::SandboxProvider, &grants);
    assert_eq!(
        shown(&none, "docker")["images"],
        json!("any"),
        "{:?}",
        none.scopes
    );

    // A third-party plugin granted a capability without a scope reaches nothing.
    std::fs::write(
        &path,
        "plugins:\n  p:\n    capabilities: [events, process, docker]\n    hosts: []\n",
    )
    .unwrap();
    let granted = Grants::from_file(&path).unwrap().granted("p", "1", "x");
    assert_eq!(
        serde_json::Value::Object(granted.scopes.shown()),
        json!({
            "process": {"unsealed": false, "programs": []},
            "docker": {"images": [], "hostNetwork": false, "mounts": []},
        })
    );

    // Today's files: `hosts:` beside `capabilities`, the host-wide `docker:` section.
    std::fs::write(
        &path,
        "plugins:\n  d:\n    capabilities: [http]\n    hosts: [api.example.com]\n\
         docker:\n  hostNetwork: true\n  mounts: [/srv]\n",
    )
    .unwrap();
    let grants = Grants::from_file(&path).unwrap();
    assert_eq!(grants.sections.len(), 1);
    assert_eq!(
        hosts(&grants.granted("d", "1", "x")),
        json!(["api.example.com"])
    );

    // A bad pattern or key names the plugin, the key and the line.
    std::fs::write(
        &path,
        "plugins:\n  p:\n    capabilities: [process]\n    process: {programs: [python3]}\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(
        text.contains("plugins.p.process.programs") && text.contains("absolute path"),
        "{text}"
    );
    std::fs::write(
        &path,
        "plugins:\n  p:\n    capabilities: [docker]\n    docker: {image: [node]}\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(
        text.contains("unknown field `image`") && text.contains("line 4"),
        "{text}"
    );
}

#[test]
fn grant_flags_carry_scopes() {
    use serde_json::json;
    let mut grants = Grants::default();
    grants
        .add_flag(
            "p=events,process:unsealed,process:program=/usr/bin/python3,docker:image=node:20,\
             docker:image=ghcr.io/acme/*,git:remote=https://git.example.com/team/*,git:push,\
             github:repo=acme/*,github:create=true,github:fork=false",
        )
        .unwrap();
    let granted = grants.granted("p", "1", "x");
    assert_eq!(
        names(&granted.capabilities),
        ["events", "process", "docker", "git", "github"]
    );
    assert_eq!(
        shown(&granted, "process"),
        json!({"unsealed": true, "programs": ["/usr/bin/python3"]})
    );
    assert_eq!(
        shown(&granted, "docker")["images"],
        json!(["node:20", "ghcr.io/acme/*"])
    );
    assert_eq!(
        shown(&granted, "git"),
        json!({"remotes": ["https://git.example.com/team/*"], "push": true})
    );
    assert_eq!(
        shown(&granted, "github"),
        json!({"repos": ["acme/*"], "create": true, "fork": false})
    );
    // `docker` alone grants the capability and no image.
    grants.add_flag("q=docker").unwrap();
    assert_eq!(
        shown(&grants.granted("q", "1", "x"), "docker")["images"],
        json!([])
    );
    for bad in [
        "p=docker:images=node",
        "p=git:push=maybe",
        "p=process:program=python3",
        "p=github:repo=",
    ] {
        assert!(grants.add_flag(bad).is_err(), "{bad}");
    }
    let text = grants
        .add_flag("p=docker:images=node")
        .unwrap_err()
        .to_string();
    assert!(text.contains("docker:image=GLOB"), "{text}");
    assert!(
        text.contains(
            "expected one of process:unsealed, process:program=PATH, docker:image=GLOB, \
             docker:hostNetwork, git:remote=GLOB, git:push, github:repo=OWNER/NAME, \
             github:create, github:fork"
        ),
        "{text}"
    );
}

#[test]
fn an_entry_from_elsewhere_reads_as_a_file_entry_and_is_granted_once() {
    let mut grants = Grants::default();
    let entry: serde_yaml::Value =
        serde_yaml::from_str("capabilities: [events, docker]\ndocker: {images: [\"node:20\"]}\n")
            .unwrap();
    grants
        .add_entry("p", entry.clone(), "plugins.lock")
        .unwrap();
    assert_eq!(
        shown(&grants.granted("p", "1", "x"), "docker")["images"],
        serde_json::json!(["node:20"])
    );
    let text = grants
        .add_entry("p", entry, "plugins.lock")
        .unwrap_err()
        .to_string();
    assert!(text.contains("granted both"), "{text}");
    let bad: serde_yaml::Value = serde_yaml::from_str("docker: {image: [x]}\n").unwrap();
    let text = grants
        .add_entry("q", bad, "plugins.lock")
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("plugins.lock") && text.contains("unknown field `image`"),
        "{text}"
    );
}

#[test]
fn the_operators_kubernetes_clusters_are_read_and_what_is_never_allowed_refused() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.yaml");
    std::fs::write(
        &path,
        "kubernetes:\n  clusters:\n    - context: agentgate-test\n      kubeconfig: /etc/k8s/admin.kubeconfig\n      \
         namespaces: [agentgate-*]\n      images: [\"agentgate.test/*\"]\n      networkPolicy: enforced\n\
         plugins:\n  my-provider:\n    capabilities: [kubernetes]\n    kubernetes: {namespaces: [agentgate-a]}\n",
    )
    .unwrap();
    let grants = Grants::from_file(&path).unwrap();
    assert!(grants.sections.contains_key(&cap("kubernetes")));
    // A third-party plugin reaches what its entry names, nothing more.
    let granted = grants.granted("my-provider", "1", "x");
    assert_eq!(names(&granted.capabilities), ["kubernetes"]);
    assert_eq!(
        shown(&granted, "kubernetes"),
        json!({"contexts": [], "namespaces": ["agentgate-a"], "images": [],
               "within": "the clusters of the top-level `kubernetes:` section"})
    );
    // The listed kubeconfig is guarded from every TaskSpec mount.
    let guarded = crate::capabilities::HostCapability::guarded_paths(
        &crate::capabilities::kubernetes::unit::Kubernetes,
    );
    assert!(
        guarded
            .iter()
            .any(|(p, _)| p == std::path::Path::new("/etc/k8s/admin.kubeconfig")),
        "{guarded:?}"
    );

    std::fs::write(
        &path,
        "kubernetes:\n  clusters:\n    - context: c\n      hostPaths: true\n",
    )
    .unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(text.contains("never mounts a host path"), "{text}");
    std::fs::write(&path, "kubernetes:\n  cluster: []\n").unwrap();
    let text = Grants::from_file(&path).unwrap_err().to_string();
    assert!(
        text.contains("unknown field `cluster`") && text.contains("line 2"),
        "{text}"
    );

    // `--grant` items.
    let mut grants = Grants::default();
    grants
        .add_flag("q=kubernetes:context=agentgate-test,kubernetes:namespace=team-*,kubernetes:image=agentgate.test/*")
        .unwrap();
    assert_eq!(
        shown(&grants.granted("q", "1", "x"), "kubernetes")["namespaces"],
        json!(["team-*"])
    );
}

#[test]
fn the_builtin_kubernetes_provider_has_the_capability_at_its_widest() {
    let granted = builtin_granted(
        "sandbox-kubernetes",
        crate::wit::types::PluginKind::SandboxProvider,
        &Grants::default(),
    );
    assert!(
        granted.capabilities.contains(&cap("kubernetes")),
        "{:?}",
        names(&granted.capabilities)
    );
    assert_eq!(shown(&granted, "kubernetes")["namespaces"], "any");
}
