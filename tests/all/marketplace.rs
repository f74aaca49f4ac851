//! The plugin marketplace against a real registry: Debian's `docker-registry` on
//! 127.0.0.1 with filesystem storage, keys made at test time by `minisign -G`, and the
//! `agentgate` binary publishing, installing, running, updating and revoking.
//!
//! Each refusal is played as an attack on what the registry stores (a flipped byte, a
//! deleted signature, a statement widened under its old signature, a moved tag, a
//! revocation) and checked with its own message; the positive path runs the installed
//! plugin and proves it was the locked bytes that ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::Digest;

use crate::support;
use crate::support::http::{full, Server};
use crate::support::oci_registry::OciRegistry;
use crate::support::peak_rss;
use crate::support::polyglot::{built, grant, home_with};
use crate::support::{builtin_component, indent, local_subprocess, stderr, task_spec, Home};
use agentgate::marketplace::oci::{PluginRef, Registry, SignedArtifact};

/// A key pair made by `minisign -G` (no password), in `dir`.
struct Key {
    public: PathBuf,
    secret: PathBuf,
}

fn minisign_key(dir: &Path, name: &str) -> Key {
    let key = Key {
        public: dir.join(format!("{name}.pub")),
        secret: dir.join(format!("{name}.key")),
    };
    let out = Command::new("minisign")
        .args(["-G", "-W", "-f", "-p"])
        .arg(&key.public)
        .arg("-s")
        .arg(&key.secret)
        .output()
        .expect("minisign is installed (Debian's minisign)");
    assert!(out.status.success(), "{}", stderr(&out));
    key
}

fn ok(output: Output) -> Output {
    assert!(
        output.status.success(),
        "stdout: {}\nstderr: {}",
        support::stdout(&output),
        stderr(&output)
    );
    output
}

/// Fails, with `needle` in its error.
fn refused(output: Output, needle: &str) -> String {
    let text = stderr(&output);
    assert!(
        !output.status.success(),
        "expected a refusal, got success: {text}"
    );
    assert!(text.contains(needle), "expected {needle:?} in: {text}");
    text
}

/// The http-driver fixture: a Rust agent driver importing `wasi:http` (capability
/// `http`), published as a third-party plugin.
fn http_driver() -> Vec<u8> {
    std::fs::read(builtin_component("http_driver")).unwrap()
}

/// `wasm` with a custom section appended: the same plugin (name, version, imports),
/// other bytes, as a rebuild would be.
fn rebuilt(wasm: &[u8], tag: &str) -> Vec<u8> {
    let name = b"agentgate-test";
    let mut out = wasm.to_vec();
    out.push(0);
    out.push((1 + name.len() + tag.len()) as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(tag.as_bytes());
    out
}

/// A registry, an author (home and key) and an operator (home trusting the author's
/// key for the namespace `acme`), and a server the driver may reach.
struct Market {
    registry: OciRegistry,
    author: Home,
    operator: Home,
    key: Key,
    server: Server,
    files: tempfile::TempDir,
}

impl Market {
    fn new() -> Market {
        Market::with_homes(Home::new(), Home::new())
    }

    fn with_homes(author: Home, operator: Home) -> Market {
        let files = tempfile::tempdir().unwrap();
        let key = minisign_key(files.path(), "author");
        let market = Market {
            registry: OciRegistry::start(),
            author,
            operator,
            key,
            server: Server::start(|_| full(200, "text/plain", "hello")),
            files,
        };
        ok(market.operator.agentgate(&[
            "plugins",
            "trust",
            "add",
            market.key.public.to_str().unwrap(),
            "--scope",
            &market.scope("acme"),
        ]));
        market
    }

    fn scope(&self, namespace: &str) -> String {
        format!("{}/{namespace}", self.registry.address)
    }

    fn reference(&self, namespace: &str) -> String {
        format!("{}/{namespace}/http-driver:0.1.0", self.registry.address)
    }

    /// The scopes manifest asking for the test server (and `extra` hosts).
    fn scopes(&self, extra: &[&str]) -> PathBuf {
        let mut hosts = vec![format!("127.0.0.1:{}", self.server.port())];
        hosts.extend(extra.iter().map(|h| h.to_string()));
        let path = self
            .files
            .path()
            .join(format!("scopes-{}.yaml", extra.len()));
        std::fs::write(&path, format!("http:\n  hosts: {hosts:?}\n")).unwrap();
        path
    }

    /// Publishes `wasm` at `reference`, signed by `key`, asking for `scopes`.
    fn publish_with(&self, wasm: &[u8], reference: &str, key: &Key, scopes: &Path) -> Output {
        let file = self.files.path().join("plugin.wasm");
        std::fs::write(&file, wasm).unwrap();
        self.author.agentgate(&[
            "plugins",
            "publish",
            file.to_str().unwrap(),
            reference,
            "--key",
            key.secret.to_str().unwrap(),
            "--scopes",
            scopes.to_str().unwrap(),
        ])
    }

    /// Publishes `file` at `reference`, signed by the author, asking for no scope.
    fn publish_file(&self, file: &Path, reference: &str) -> Output {
        self.author.agentgate(&[
            "plugins",
            "publish",
            file.to_str().unwrap(),
            reference,
            "--key",
            self.key.secret.to_str().unwrap(),
        ])
    }

    /// Publishes the http-driver in `acme`, signed by the author.
    fn publish(&self) -> Output {
        ok(self.publish_with(
            &http_driver(),
            &self.reference("acme"),
            &self.key,
            &self.scopes(&[]),
        ))
    }

    fn install(&self, reference: &str) -> Output {
        self.operator
            .agentgate(&["plugins", "install", reference, "--yes"])
    }

    /// Runs the installed driver against the test server.
    fn run(&self, extra: &[&str]) -> Output {
        let workspace = tempfile::tempdir().unwrap();
        let agent = format!(
            "agent:\n  driver: http-get\n  options:\n    authority: \"127.0.0.1:{}\"\n",
            self.server.port()
        );
        let spec = task_spec(
            "market",
            "fetch",
            &local_subprocess(workspace.path(), false, "60s", &agent),
        );
        let path = self.operator.dir.path().join("task.yaml");
        std::fs::write(&path, spec).unwrap();
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["run", path.to_str().unwrap()]);
        self.operator.agentgate(&args)
    }

    fn lockfile(&self) -> toml::Value {
        let text = std::fs::read_to_string(self.operator.dir.path().join("plugins.lock"))
            .expect("plugins.lock exists");
        toml::from_str(&text).unwrap()
    }

    fn locked(&self, key: &str) -> String {
        self.lockfile()["plugin"][0][key]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn no_lockfile(&self) {
        let lock = self.operator.dir.path().join("plugins.lock");
        assert!(
            !lock.exists(),
            "nothing is installed: {:?}",
            std::fs::read_to_string(&lock)
        );
    }

    fn manifest_of(&self, reference: &str) -> String {
        block_on(Registry::new().resolve(&PluginRef::parse(reference).unwrap())).unwrap()
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn publishes_installs_with_consent_and_runs_a_rust_plugin() {
    let market = Market::new();
    let published = support::stdout(&market.publish());
    assert!(published.contains("capabilities [http]"), "{published}");
    let reference = market.reference("acme");

    // Without a terminal and without --yes nothing is granted, after showing every
    // import (WASI included) and the asked scope.
    let text = refused(
        market
            .operator
            .agentgate(&["plugins", "install", &reference]),
        "no terminal to ask on",
    );
    assert!(text.contains("wasi:http/outgoing-handler"), "{text}");
    assert!(text.contains("wasi:io/"), "{text}");
    assert!(
        text.contains(&format!("http.hosts: 127.0.0.1:{}", market.server.port())),
        "{text}"
    );
    market.no_lockfile();

    let out = ok(market.install(&reference));
    assert!(
        support::stdout(&out).contains("installed http-driver 0.1.0"),
        "{}",
        support::stdout(&out)
    );
    let lock = market.lockfile();
    let entry = &lock["plugin"][0];
    let wasm = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(http_driver()))
    );
    assert_eq!(entry["name"].as_str(), Some("http-driver"));
    assert_eq!(entry["version"].as_str(), Some("0.1.0"));
    assert_eq!(entry["reference"].as_str(), Some(reference.as_str()));
    assert_eq!(entry["wasm"].as_str(), Some(wasm.as_str()));
    assert_eq!(
        entry["manifest"].as_str(),
        Some(market.manifest_of(&reference).as_str())
    );
    assert_eq!(entry["wit"].as_str(), Some("0.1.0"));
    assert!(entry["signer"].as_str().unwrap().len() == 16);
    assert_eq!(entry["grant"]["capabilities"].as_array().unwrap().len(), 1);
    assert_eq!(entry["grant"]["digest"].as_str(), Some(wasm.as_str()));
    // Install compiled it: the compile cache holds the component already.
    let hex = wasm.trim_start_matches("sha256:");
    let cached = std::fs::read_dir(market.operator.dir.path().join("cache/components"))
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(hex));
    assert!(cached, "install warms the compile cache");

    let out = ok(market.run(&[]));
    let result = market.operator.result();
    assert_eq!(result["status"], "succeeded", "{}", stderr(&out));
    assert_eq!(result["plugins"]["agent"]["name"], "http-driver");
    assert_eq!(result["plugins"]["agent"]["digest"], wasm.as_str());
    assert_eq!(
        market.server.requests().len(),
        1,
        "the installed driver made its request"
    );

    ok(market
        .operator
        .agentgate(&["plugins", "verify", "--refresh"]));
    ok(market
        .operator
        .agentgate(&["plugins", "remove", "http-driver"]));
    assert!(!market
        .operator
        .dir
        .path()
        .join("plugins")
        .join(format!("{hex}.wasm"))
        .exists());
}

/// On a terminal (`script` gives `install` one) consent is asked: "n" installs
/// nothing, "y" installs.
#[test]
fn consent_is_asked_on_a_terminal() {
    let market = Market::new();
    market.publish();
    let on_terminal = |answer: &str| {
        let mut child = Command::new("script")
            .args(["-qec"])
            .arg(format!(
                "{} plugins install {}",
                env!("CARGO_BIN_EXE_agentgate"),
                market.reference("acme")
            ))
            .arg("/dev/null")
            .env("AGENTGATE_HOME", market.operator.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("script (util-linux) runs");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answer.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (out.status.success(), support::stdout(&out))
    };
    let (installed, screen) = on_terminal("n\n");
    assert!(!installed, "{screen}");
    assert!(
        screen.contains("grant these to http-driver [y/N]"),
        "{screen}"
    );
    assert!(
        screen.contains("answered no; nothing was granted"),
        "{screen}"
    );
    market.no_lockfile();
    let (installed, screen) = on_terminal("y\n");
    assert!(installed, "{screen}");
    assert_eq!(market.locked("name"), "http-driver");
}

#[test]
fn signatures_verify_with_the_minisign_tool_and_minisign_signatures_install() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    let plugin = PluginRef::parse(&reference).unwrap();
    let manifest = market.manifest_of(&reference);
    let signed = block_on(Registry::new().pull_signature(&plugin, &manifest))
        .unwrap()
        .expect("a signature at the fallback tag");
    // agentgate's signature, checked by the minisign tool.
    let statement = market.files.path().join("statement.json");
    let signature = market.files.path().join("statement.json.minisig");
    std::fs::write(&statement, &signed.statement).unwrap();
    std::fs::write(&signature, &signed.signature).unwrap();
    let out = Command::new("minisign")
        .args(["-V", "-p"])
        .arg(&market.key.public)
        .arg("-m")
        .arg(&statement)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("agentgate plugin http-driver 0.1.0"));

    // The minisign tool's signature of the same statement, installed by agentgate.
    let out = Command::new("minisign")
        .args(["-S", "-s"])
        .arg(&market.key.secret)
        .arg("-m")
        .arg(&statement)
        .args(["-t", "signed by the minisign tool"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let by_tool = std::fs::read_to_string(&signature).unwrap();
    assert_ne!(by_tool, signed.signature);
    block_on(Registry::new().push_signature(
        &plugin,
        &manifest,
        &SignedArtifact {
            statement: signed.statement.clone(),
            signature: by_tool,
        },
    ))
    .unwrap();
    ok(market.install(&reference));
}

#[test]
fn install_refuses_an_unsigned_plugin() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    let manifest = market.manifest_of(&reference);
    let tag = format!("{}.sig", manifest.replace(':', "-"));
    std::fs::remove_dir_all(market.registry.tag_dir("acme/http-driver", &tag)).unwrap();
    refused(
        market.install(&reference),
        "is not signed: no signature at tag",
    );
    market.no_lockfile();
}

#[test]
fn install_refuses_a_key_not_in_the_trust_store() {
    let market = Market::new();
    let stranger = minisign_key(market.files.path(), "stranger");
    ok(market.publish_with(
        &http_driver(),
        &market.reference("acme"),
        &stranger,
        &market.scopes(&[]),
    ));
    refused(
        market.install(&market.reference("acme")),
        "which is not in the trust store",
    );
    market.no_lockfile();
}

#[test]
fn install_refuses_a_key_trusted_for_another_namespace() {
    let market = Market::new();
    // The author's key is trusted for acme only; a plugin it signed in `other` is refused.
    ok(market.publish_with(
        &http_driver(),
        &market.reference("other"),
        &market.key,
        &market.scopes(&[]),
    ));
    refused(
        market.install(&market.reference("other")),
        &format!(
            "trusted for {} but not for {}",
            market.scope("acme"),
            market.scope("other")
        ),
    );
    market.no_lockfile();
}

#[test]
fn install_refuses_a_flipped_byte_in_the_stored_component() {
    let market = Market::new();
    market.publish();
    let wasm = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(http_driver()))
    );
    let blob = market.registry.blob(&wasm);
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&blob, bytes).unwrap();
    refused(market.install(&market.reference("acme")), "do not match");
    market.no_lockfile();
}

#[test]
fn install_refuses_scopes_widened_under_the_old_signature() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    let plugin = PluginRef::parse(&reference).unwrap();
    let manifest = market.manifest_of(&reference);
    let signed = block_on(Registry::new().pull_signature(&plugin, &manifest))
        .unwrap()
        .unwrap();
    let mut statement: serde_json::Value = serde_json::from_slice(&signed.statement).unwrap();
    statement["scopes"]["http"]["hosts"]
        .as_array_mut()
        .unwrap()
        .push("evil.example.com".into());
    block_on(Registry::new().push_signature(
        &plugin,
        &manifest,
        &SignedArtifact {
            statement: serde_json::to_vec_pretty(&statement).unwrap(),
            signature: signed.signature,
        },
    ))
    .unwrap();
    refused(market.install(&reference), "does not verify");
    market.no_lockfile();
}

#[test]
fn not_found_and_registry_down_are_their_own_errors() {
    let mut market = Market::new();
    market.publish();
    let missing = format!("{}/acme/http-driver:9.9.9", market.registry.address);
    let text = refused(
        market.install(&missing),
        "was not found in the registry (404)",
    );
    assert!(!text.contains("signature"), "{text}");
    market.registry.stop();
    let text = refused(
        market.install(&market.reference("acme")),
        "cannot reach the registry",
    );
    // The registry's address is in the message; its port may hold "404".
    let without_address = text.replace(&market.registry.address, "REGISTRY");
    assert!(
        !without_address.contains("404") && !without_address.contains("signature"),
        "{text}"
    );
    market.no_lockfile();
}

#[test]
fn a_moved_tag_is_refused_until_update_and_widening_needs_consent() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    ok(market.install(&reference));
    let locked = market.locked("wasm");

    // The author moves the tag to other bytes that ask for one more host.
    let widened = rebuilt(&http_driver(), "v2");
    ok(market.publish_with(
        &widened,
        &reference,
        &market.key,
        &market.scopes(&["api.example.com"]),
    ));
    refused(
        market.install(&reference),
        "the lock holds until you run `agentgate plugins update http-driver`",
    );
    let verify = market
        .operator
        .agentgate(&["plugins", "verify", "--refresh"]);
    assert!(!verify.status.success());
    assert!(
        support::stdout(&verify).contains("the tag of"),
        "{}",
        support::stdout(&verify)
    );
    // A run still uses the locked bytes.
    ok(market.run(&[]));
    assert_eq!(
        market.operator.result()["plugins"]["agent"]["digest"],
        locked.as_str()
    );

    // Widening needs consent: none without a terminal or --yes, and the diff is shown.
    let text = refused(
        market
            .operator
            .agentgate(&["plugins", "update", "http-driver"]),
        "asks for more",
    );
    assert!(text.contains("NEW: http.hosts: api.example.com"), "{text}");
    assert_eq!(market.locked("wasm"), locked);
    ok(market
        .operator
        .agentgate(&["plugins", "update", "http-driver", "--yes"]));
    let widened_digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&widened)));
    assert_eq!(market.locked("wasm"), widened_digest);

    // Asking for less narrows at once, without consent.
    let narrowed = rebuilt(&http_driver(), "v3");
    ok(market.publish_with(&narrowed, &reference, &market.key, &market.scopes(&[])));
    let out = ok(market
        .operator
        .agentgate(&["plugins", "update", "http-driver"]));
    assert!(
        stderr(&out).contains("no longer asks for: http.hosts: api.example.com"),
        "{}",
        stderr(&out)
    );
    let lock = market.lockfile();
    assert_eq!(
        lock["plugin"][0]["grant"]["http"]["hosts"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{lock:?}"
    );
}

#[test]
fn a_revoked_digest_is_refused_at_install_and_at_run() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    ok(market.install(&reference));
    ok(market.author.agentgate(&[
        "plugins",
        "revoke",
        &reference,
        "--key",
        market.key.secret.to_str().unwrap(),
        "--reason",
        "leaks tokens",
    ]));
    // The list fetched at install is younger than the maximum age: it holds, stale.
    ok(market.run(&[]));
    // Older than the maximum age: fetched again, and the run refuses the plugin,
    // naming the revocation.
    let text = refused(market.run(&["--revocation-max-age", "0s"]), "leaks tokens");
    assert!(text.contains("revoked by key"), "{text}");
    assert_eq!(
        market.server.requests().len(),
        1,
        "the revoked driver did not run"
    );
    let verify = market.operator.agentgate(&["plugins", "verify"]);
    assert!(!verify.status.success());
    assert!(
        support::stdout(&verify).contains("leaks tokens"),
        "{}",
        support::stdout(&verify)
    );
    // A second operator cannot install it.
    let second = Home::new();
    ok(second.agentgate(&[
        "plugins",
        "trust",
        "add",
        market.key.public.to_str().unwrap(),
        "--scope",
        &market.scope("acme"),
    ]));
    let out = second.agentgate(&["plugins", "install", &reference, "--yes"]);
    refused(out, "is revoked: revoked by key");
}

/// A registry that serves an older revocation list (replayed to un-revoke) is refused:
/// the host keeps the highest list it verified.
#[test]
fn an_older_revocation_list_does_not_un_revoke() {
    let market = Market::new();
    let reference = market.reference("acme");
    let revoke = || {
        ok(market.author.agentgate(&[
            "plugins",
            "revoke",
            &reference,
            "--key",
            market.key.secret.to_str().unwrap(),
            "--reason",
            "bad build",
        ]))
    };
    // List #1 revokes a first build; the operator installs a second one.
    ok(market.publish_with(
        &rebuilt(&http_driver(), "first"),
        &reference,
        &market.key,
        &market.scopes(&[]),
    ));
    revoke();
    market.publish();
    ok(market.install(&reference));
    let signer = market.locked("signer").to_ascii_lowercase();
    let link = market
        .registry
        .tag_dir("acme/agentgate-revocations", &format!("key-{signer}"))
        .join("current/link");
    let first_list = std::fs::read(&link).unwrap();
    // List #2 revokes the installed build; the operator's next run fetches it.
    revoke();
    refused(market.run(&["--revocation-max-age", "0s"]), "bad build");
    // The registry serves list #1 again: refused, and the revocation holds.
    std::fs::write(&link, first_list).unwrap();
    let text = refused(market.run(&["--revocation-max-age", "0s"]), "bad build");
    assert!(text.contains("an older list is refused"), "{text}");
    assert!(market.server.requests().is_empty());
}

#[test]
fn a_signer_no_longer_trusted_is_refused_at_run() {
    let market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    ok(market.operator.agentgate(&[
        "plugins",
        "trust",
        "remove",
        market.key.public.to_str().unwrap(),
    ]));
    refused(market.run(&[]), "which is no longer trusted for");
    assert!(market.server.requests().is_empty());
}

#[test]
fn offline_the_last_revocation_list_holds_and_its_age_is_reported() {
    let mut market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    market.registry.stop();
    let out = ok(market.run(&["--revocation-max-age", "0s"]));
    let text = stderr(&out);
    assert!(
        text.contains("cannot refresh the revocation lists of"),
        "{text}"
    );
    assert!(text.contains("ago hold"), "{text}");
}

#[test]
fn a_run_uses_exactly_the_locked_bytes() {
    let market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    let locked = market.locked("wasm");
    let file = market
        .operator
        .dir
        .path()
        .join("plugins")
        .join(format!("{}.wasm", locked.trim_start_matches("sha256:")));
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&file, rebuilt(&http_driver(), "swapped")).unwrap();
    refused(market.run(&[]), "are not the ones plugins.lock holds");
    assert!(market.server.requests().is_empty());
}

#[test]
fn publishes_installs_and_runs_a_python_plugin() {
    polyglot_driver_is_published_installed_and_run("py-shell");
}

#[test]
fn publishes_installs_and_runs_a_javascript_plugin() {
    polyglot_driver_is_published_installed_and_run("js-shell");
}

/// A driver built by componentize-py or jco (tests/all/support/polyglot.rs), published,
/// installed from the registry with its grant (`events`, `sandbox`) and run in the
/// subprocess sandbox.
fn polyglot_driver_is_published_installed_and_run(driver: &str) {
    let Some(built) = built() else { return };
    // Both homes start with the component compiled (a Python one takes long to).
    let (author, plugin_dir) = home_with(built, &[driver]);
    let (operator, _) = home_with(built, &[driver]);
    let market = Market::with_homes(author, operator);
    let granted = grant(driver);
    let out = ok(market.author.agentgate(&[
        "plugins",
        "inspect",
        driver,
        "--plugin-dir",
        plugin_dir.to_str().unwrap(),
        "--grant",
        &granted,
    ]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = info["version"].as_str().unwrap();
    let reference = format!("{}/acme/{driver}:{version}", market.registry.address);
    ok(market.publish_file(&built.dir.join(format!("{driver}.wasm")), &reference));
    let out = ok(market.install(&reference));
    assert!(
        support::stdout(&out).contains(&format!("installed {driver} {version}")),
        "{}",
        support::stdout(&out)
    );
    let lock = market.lockfile();
    let capabilities: Vec<&str> = lock["plugin"][0]["grant"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(capabilities, ["events", "sandbox"]);

    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("README.md"), "before\n").unwrap();
    let agent = format!(
        "agent:\n  driver: {driver}\n  options:\n    command:\n      - sh\n      - -c\n      - |\n{}",
        indent("echo changed-by-agent > README.md\necho \"finished $AGENTGATE_PROMPT\"", 8)
    );
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: 60s\n{agent}",
        workspace.path().display()
    );
    let path = market.operator.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("market", "fix it", &execution)).unwrap();
    let out = market.operator.agentgate(&["run", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("README.md")).unwrap(),
        "changed-by-agent\n"
    );
    let result = market.operator.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["agent"]["summary"], "finished fix it");
    assert_eq!(result["plugins"]["agent"]["name"], driver);
    let wasm = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(
            std::fs::read(built.dir.join(format!("{driver}.wasm"))).unwrap()
        ))
    );
    assert_eq!(result["plugins"]["agent"]["digest"], wasm.as_str());
}

/// `plugins update` moves to a newer semver tag: 1.0.0 is installed and run, 1.1.0 (a
/// second build, reporting 1.1.0) is published under its own tag, and after `update`
/// the lockfile and the run use 1.1.0. The plugin is the committed driver built
/// against the oldest contract line (tests/fixtures/wit-lines).
#[test]
fn update_moves_to_a_newer_semver_tag() {
    let market = Market::new();
    let name = "line-0-1-0-driver";
    let reference = |version: &str| format!("{}/acme/{name}:{version}", market.registry.address);
    let digest_of = |version: &str| {
        let wasm = std::fs::read(support::oldest_line_driver(version)).unwrap();
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(wasm)))
    };
    let run = |expected: &str| {
        let workspace = tempfile::tempdir().unwrap();
        let spec = task_spec(
            "update",
            "updated",
            &local_subprocess(
                workspace.path(),
                false,
                "60s",
                "agent:\n  driver: line-0-1-0\n",
            ),
        );
        let path = market.operator.dir.path().join("task.yaml");
        std::fs::write(&path, spec).unwrap();
        std::fs::remove_dir_all(market.operator.dir.path().join("runs")).ok();
        let out = market.operator.agentgate(&["run", path.to_str().unwrap()]);
        let result = market.operator.result();
        assert_eq!(result["status"], "succeeded", "{}", stderr(&out));
        assert_eq!(result["plugins"]["agent"]["version"], expected);
        assert_eq!(
            result["plugins"]["agent"]["digest"],
            digest_of(expected).as_str()
        );
        let written = std::fs::read_to_string(workspace.path().join("line-0.1.0.txt")).unwrap();
        assert_eq!(
            written,
            format!("{expected}\nupdated\n"),
            "the {expected} build ran"
        );
    };

    ok(market.publish_file(&support::oldest_line_driver("1.0.0"), &reference("1.0.0")));
    ok(market.install(&reference("1.0.0")));
    assert_eq!(market.locked("version"), "1.0.0");
    run("1.0.0");

    // Nothing newer yet: update keeps 1.0.0.
    ok(market.operator.agentgate(&["plugins", "update", name]));
    assert_eq!(market.locked("version"), "1.0.0");

    ok(market.publish_file(&support::oldest_line_driver("1.1.0"), &reference("1.1.0")));
    // The lock holds until update.
    run("1.0.0");
    ok(market.operator.agentgate(&["plugins", "update", name]));
    assert_eq!(market.locked("version"), "1.1.0");
    assert_eq!(market.locked("reference"), reference("1.1.0"));
    assert_eq!(market.locked("wasm"), digest_of("1.1.0"));
    assert_eq!(
        market.locked("manifest"),
        market.manifest_of(&reference("1.1.0"))
    );
    assert_eq!(market.locked("wit"), "0.1.0");
    assert_eq!(market.lockfile()["plugin"].as_array().unwrap().len(), 1);
    run("1.1.0");
}

/// How a hostile registry answers (tests of bounded fetches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hostility {
    /// The plugin's manifest is an endless body.
    EndlessManifest,
    /// The manifest declares the real component; its blob is the component, then
    /// bytes without end.
    EndlessLayer,
    /// Manifest and component are right; the signature manifest is endless.
    EndlessSignature,
    /// The manifest comes one byte every 100 ms, forever.
    TrickleManifest,
    /// The component blob is 4 KiB longer than its descriptor declares (sent without a
    /// length, so only counting notices).
    LongerLayer,
    /// The component blob ends half way.
    ShorterLayer,
    /// The manifest declares a component of 1 TiB.
    HugeDeclared,
}

/// Stops even an "endless" body at 1 GiB, so a regression shows as a failed RSS bound
/// rather than as a machine out of memory.
const ENDLESS_CAP: u64 = 1 << 30;

/// A registry on 127.0.0.1 that speaks the OCI distribution endpoints `plugins
/// install` needs and is hostile in one way. `sent` counts the bytes of the hostile
/// bodies it produced (the proof the attack acted); `blob_requests` the requests for
/// the component.
struct HostileRegistry {
    server: Server,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl HostileRegistry {
    fn start(mode: Hostility) -> HostileRegistry {
        use http_body_util::{BodyExt, StreamBody};
        use hyper::body::{Bytes, Frame};
        use std::sync::atomic::Ordering;

        let wasm = http_driver();
        let wasm_digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&wasm)));
        let config = b"{}".to_vec();
        let declared = if mode == Hostility::HugeDeclared {
            1u64 << 40
        } else {
            wasm.len() as u64
        };
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.wasm.config.v0+json",
                "digest": format!("sha256:{}", hex::encode(sha2::Sha256::digest(&config))),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/wasm",
                "digest": wasm_digest,
                "size": declared,
            }],
        })
        .to_string();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        // `prefix` then (when `endless`) filler up to ENDLESS_CAP, in 64 KiB chunks,
        // counted; chunked, without a length.
        let stream = move |prefix: Vec<u8>, endless: bool| -> support::http::Body {
            let counter = counter.clone();
            let chunks =
                futures_util::stream::unfold((prefix, 0u64), move |(mut prefix, mut total)| {
                    let counter = counter.clone();
                    async move {
                        let chunk = if !prefix.is_empty() {
                            let rest = prefix.split_off(prefix.len().min(64 << 10));
                            std::mem::replace(&mut prefix, rest)
                        } else if endless && total < ENDLESS_CAP {
                            vec![b' '; 64 << 10]
                        } else {
                            return None;
                        };
                        total += chunk.len() as u64;
                        counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                        Some((
                            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(chunk))),
                            (prefix, total),
                        ))
                    }
                });
            BodyExt::boxed(StreamBody::new(chunks))
        };
        let trickle_counter = sent.clone();
        let trickle = move || -> support::http::Body {
            let counter = trickle_counter.clone();
            let chunks = futures_util::stream::unfold((), move |()| {
                let counter = counter.clone();
                async move {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    counter.fetch_add(1, Ordering::SeqCst);
                    Some((
                        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b" "))),
                        (),
                    ))
                }
            });
            BodyExt::boxed(StreamBody::new(chunks))
        };
        let respond = |body: support::http::Body| {
            hyper::Response::builder()
                .status(200)
                .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                .body(body)
                .unwrap()
        };
        let server = Server::start(move |request| {
            let path = request.path.as_str();
            if path == "/v2/" {
                return full(200, "application/json", "{}");
            }
            if path == "/v2/acme/http-driver/manifests/0.1.0" {
                return match mode {
                    Hostility::EndlessManifest => {
                        respond(stream(b"{\"schemaVersion\":2,".to_vec(), true))
                    }
                    Hostility::TrickleManifest => respond(trickle()),
                    _ => full(
                        200,
                        "application/vnd.oci.image.manifest.v1+json",
                        manifest.clone(),
                    ),
                };
            }
            if path == format!("/v2/acme/http-driver/blobs/{wasm_digest}") {
                return match mode {
                    Hostility::EndlessLayer => respond(stream(wasm.clone(), true)),
                    Hostility::LongerLayer => {
                        let mut longer = wasm.clone();
                        longer.extend(std::iter::repeat_n(0u8, 4096));
                        respond(stream(longer, false))
                    }
                    Hostility::ShorterLayer => {
                        respond(stream(wasm[..wasm.len() / 2].to_vec(), false))
                    }
                    _ => full(200, "application/octet-stream", wasm.clone()),
                };
            }
            if path.starts_with("/v2/acme/http-driver/manifests/sha256-")
                && mode == Hostility::EndlessSignature
            {
                return respond(stream(b"{\"schemaVersion\":2,".to_vec(), true));
            }
            full(
                404,
                "application/json",
                r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}"#,
            )
        });
        HostileRegistry { server, sent }
    }

    fn reference(&self) -> String {
        format!("127.0.0.1:{}/acme/http-driver:0.1.0", self.server.port())
    }

    fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn blob_requests(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| r.path.contains("/blobs/"))
            .count()
    }
}

/// What a measured `agentgate` process did: its exit, stderr, peak RSS and duration.
struct Measured {
    code: i32,
    stderr: String,
    stdout: String,
    /// Its own peak RSS (see [`peak_rss`]).
    peak_rss_kib: u64,
    elapsed: std::time::Duration,
}

/// Runs `agentgate ARGS` in `home` as a real process and measures its peak RSS.
/// Killed, and the test failed, when it has not ended after `limit`.
fn measured(home: &Home, args: &[&str], limit: std::time::Duration) -> Measured {
    use std::io::Read;
    let started = std::time::Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .args(args)
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH");
    let (mut command, report) = peak_rss::measured(&command);
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running agentgate");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out_reader = read(Box::new(child.stdout.take().unwrap()));
    let reader = read(Box::new(child.stderr.take().unwrap()));
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            // The probe's death kills agentgate (PR_SET_PDEATHSIG).
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "agentgate {args:?} did not end within {limit:?}: {}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let ended = report.read();
    Measured {
        code: ended.code.unwrap_or(-1),
        stderr: reader.join().unwrap(),
        stdout: out_reader.join().unwrap(),
        peak_rss_kib: ended.peak_rss >> 10,
        elapsed: started.elapsed(),
    }
}

/// agentgate's peak RSS while a hostile registry streams at it. Measured at 46–50 MiB
/// for the debug build; the attacks drove it to 4–8 GiB before the bound.
const PEAK_RSS_BOUND_MIB: u64 = 96;

/// The process's own peak RSS is under the bound.
fn assert_rss_bounded(out: &Measured) {
    assert!(out.peak_rss_kib > 0, "the peak RSS was measured");
    assert!(
        out.peak_rss_kib < PEAK_RSS_BOUND_MIB << 10,
        "peak RSS {} KiB is over the {PEAK_RSS_BOUND_MIB} MiB bound",
        out.peak_rss_kib
    );
}

/// `plugins install` against a registry hostile as `mode`, with `grants` as the
/// operator's grants.yaml: it must fail naming `needle`, in bounded memory.
fn install_from_hostile(
    mode: Hostility,
    grants: &str,
    needle: &str,
) -> (HostileRegistry, Measured) {
    let registry = HostileRegistry::start(mode);
    let operator = Home::new();
    std::fs::write(operator.dir.path().join("grants.yaml"), grants).unwrap();
    let out = measured(
        &operator,
        &["plugins", "install", &registry.reference(), "--yes"],
        std::time::Duration::from_secs(120),
    );
    println!(
        "hostile registry, {mode:?}: agentgate exited {} after {:.1}s, peak RSS {:.1} MiB (bound {PEAK_RSS_BOUND_MIB} MiB); the registry sent {:.1} MiB of hostile body\n  {}",
        out.code,
        out.elapsed.as_secs_f64(),
        out.peak_rss_kib as f64 / 1024.0,
        registry.sent() as f64 / (1 << 20) as f64,
        out.stderr.trim()
    );
    assert_eq!(out.code, 3, "refused as a registry failure: {}", out.stderr);
    assert!(
        out.stderr.contains(needle),
        "expected {needle:?} in: {}",
        out.stderr
    );
    assert_rss_bounded(&out);
    assert!(
        !operator.dir.path().join("plugins.lock").exists(),
        "nothing is installed"
    );
    // No download is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(operator.dir.path().join("plugins"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    (registry, out)
}

#[test]
fn a_hostile_registry_cannot_exhaust_memory_with_an_endless_manifest() {
    let (registry, _) = install_from_hostile(
        Hostility::EndlessManifest,
        "",
        "is larger than the 4194304 bytes a manifest may be",
    );
    assert!(registry.sent() > 4 << 20, "the endless body was served");
}

#[test]
fn a_hostile_registry_cannot_exhaust_memory_with_an_endless_layer() {
    let (registry, _) = install_from_hostile(Hostility::EndlessLayer, "", "is longer than the");
    assert!(
        registry.sent() > http_driver().len() as u64,
        "more than the declared bytes were served"
    );
}

#[test]
fn a_hostile_registry_cannot_exhaust_memory_with_an_endless_signature_manifest() {
    let (registry, _) = install_from_hostile(
        Hostility::EndlessSignature,
        "",
        "refused what the registry sent as the signature of",
    );
    assert!(registry.sent() > 4 << 20, "the endless body was served");
}

#[test]
fn a_registry_that_trickles_forever_ends_within_the_operator_timeout() {
    let (registry, out) = install_from_hostile(
        Hostility::TrickleManifest,
        "marketplace:\n  registryTimeout: 3s\n",
        "took too long to send the plugin",
    );
    assert!(
        out.stderr.contains("marketplace.registryTimeout"),
        "{}",
        out.stderr
    );
    assert!(registry.sent() > 5, "the registry trickled");
    assert!(
        out.elapsed < std::time::Duration::from_secs(30),
        "{:?}",
        out.elapsed
    );
}

#[test]
fn a_layer_longer_or_shorter_than_declared_is_refused() {
    install_from_hostile(Hostility::LongerLayer, "", "is longer than the");
    install_from_hostile(
        Hostility::ShorterLayer,
        "",
        "bytes its descriptor declares; refused",
    );
}

#[test]
fn a_layer_over_the_operator_maximum_is_refused_before_download() {
    let (registry, _) = install_from_hostile(
        Hostility::HugeDeclared,
        "",
        "its descriptor declares 1099511627776 bytes, more than the 268435456 allowed (marketplace.maxComponentSize",
    );
    assert_eq!(registry.blob_requests(), 0, "nothing was downloaded");
    // The operator's own, lower maximum holds for a real component too.
    let (registry, _) = install_from_hostile(
        Hostility::EndlessLayer,
        "marketplace:\n  maxComponentSize: 16Ki\n",
        "more than the 16384 allowed (marketplace.maxComponentSize",
    );
    assert_eq!(registry.blob_requests(), 0, "nothing was downloaded");
    // A bad setting is refused, naming it.
    let operator = Home::new();
    std::fs::write(
        operator.dir.path().join("grants.yaml"),
        "marketplace:\n  maxComponentSize: lots\n",
    )
    .unwrap();
    let out = operator.agentgate(&["plugins", "install", &registry.reference(), "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    refused(out, "marketplace.maxComponentSize");
}

#[test]
fn trust_add_refuses_scopes_a_reference_could_not_name() {
    let market = Market::new();
    let before = std::fs::read_to_string(market.operator.dir.path().join("trust.toml")).unwrap();
    for scope in [
        format!("{}/acme/../evil", market.registry.address),
        format!(
            "{}/acme\n{}/evil",
            market.registry.address, market.registry.address
        ),
        format!("{}/..", market.registry.address),
        format!("{}/Acme", market.registry.address),
    ] {
        let out = market.operator.agentgate(&[
            "plugins",
            "trust",
            "add",
            market.key.public.to_str().unwrap(),
            "--scope",
            &scope,
        ]);
        assert_eq!(out.status.code(), Some(2), "{scope:?}: {}", stderr(&out));
        refused(out, "expected REGISTRY/NAMESPACE");
    }
    let after = std::fs::read_to_string(market.operator.dir.path().join("trust.toml")).unwrap();
    assert_eq!(before, after, "the trust store is unchanged");
}

#[test]
fn install_refuses_scopes_for_capabilities_the_component_does_not_import() {
    let market = Market::new();
    // The author's side refuses them at publish.
    let scopes = market.files.path().join("docker-scopes.yaml");
    std::fs::write(
        &scopes,
        format!(
            "http:\n  hosts: [\"127.0.0.1:{}\"]\ndocker:\n  images: [\"node:20\"]\n",
            market.server.port()
        ),
    )
    .unwrap();
    let out = market.publish_with(
        &http_driver(),
        &market.reference("acme"),
        &market.key,
        &scopes,
    );
    refused(
        out,
        "scopes for capability [docker], which the component does not import",
    );

    // A statement signed with them anyway (by the trusted key) is refused at install.
    market.publish();
    let reference = market.reference("acme");
    let plugin = PluginRef::parse(&reference).unwrap();
    let manifest = market.manifest_of(&reference);
    let signed = block_on(Registry::new().pull_signature(&plugin, &manifest))
        .unwrap()
        .unwrap();
    let mut statement: serde_json::Value = serde_json::from_slice(&signed.statement).unwrap();
    statement["scopes"]["docker"] = serde_json::json!({"images": ["node:20"]});
    let statement = serde_json::to_vec_pretty(&statement).unwrap();
    let key = agentgate::marketplace::signature::SigningKey::from_file(&market.key.secret).unwrap();
    let signature = key.sign(&statement, "widened by its own author").unwrap();
    block_on(Registry::new().push_signature(
        &plugin,
        &manifest,
        &SignedArtifact {
            statement,
            signature,
        },
    ))
    .unwrap();
    let text = refused(market.install(&reference), "capability [docker]");
    assert!(text.contains("does not import"), "{text}");
    market.no_lockfile();
}

/// Publishes `key`'s revocation list for `scope`, signed `days_ago` days ago (as a
/// registry replaying an old list would serve it).
fn publish_old_revocation_list(market: &Market, days_ago: u64) {
    let key = agentgate::marketplace::signature::SigningKey::from_file(&market.key.secret).unwrap();
    let scope = market.scope("acme");
    let signed_at =
        std::time::SystemTime::now() - std::time::Duration::from_secs(days_ago * 86_400);
    let list = serde_json::json!({
        "type": "agentgate.revocations/v1",
        "scope": scope,
        "key": key.id(),
        "sequence": 1,
        "signedAt": humantime::format_rfc3339_seconds(signed_at).to_string(),
        "revoked": [],
    });
    let statement = serde_json::to_vec_pretty(&list).unwrap();
    let signature = key.sign(&statement, "an old list").unwrap();
    block_on(Registry::new().push_revocations(
        &scope,
        &key.id(),
        &SignedArtifact {
            statement,
            signature,
        },
    ))
    .unwrap();
}

#[test]
fn a_revocation_list_signed_too_long_ago_is_refused_and_verify_says_how_fresh() {
    let market = Market::new();
    market.publish();
    publish_old_revocation_list(&market, 10);
    let reference = market.reference("acme");
    let grants = market.operator.dir.path().join("grants.yaml");
    // A fresh home is served a list signed 10 days ago: refused (default 7 days).
    let text = refused(market.install(&reference), "list #1 was signed 10days");
    assert!(
        text.contains("marketplace.revocationsExpireAfter (7d)"),
        "{text}"
    );
    market.no_lockfile();
    // The operator allows 30 days: it installs, and verify says how old the list is.
    std::fs::write(&grants, "marketplace:\n  revocationsExpireAfter: 30d\n").unwrap();
    ok(market.install(&reference));
    let out = ok(market.operator.agentgate(&["plugins", "verify"]));
    let text = support::stdout(&out);
    assert!(text.contains("list #1 signed 10days"), "{text}");
    assert!(
        text.contains("fresh (refused once older than 30d)"),
        "{text}"
    );
    // Back to 7 days: the held list is too old, so the run refuses the plugin and
    // verify says the list is stale.
    std::fs::remove_file(&grants).unwrap();
    let text = refused(market.run(&[]), "list #1 was signed 10days");
    assert!(text.contains("cannot be loaded"), "{text}");
    assert!(
        market.server.requests().is_empty(),
        "the plugin did not run"
    );
    let out = market.operator.agentgate(&["plugins", "verify"]);
    assert!(!out.status.success());
    assert!(
        support::stdout(&out).contains("STALE"),
        "{}",
        support::stdout(&out)
    );
    // The publisher re-signs it: fresh again.
    ok(market.author.agentgate(&[
        "plugins",
        "renew-revocations",
        &market.scope("acme"),
        "--key",
        market.key.secret.to_str().unwrap(),
    ]));
    let out = ok(market
        .operator
        .agentgate(&["plugins", "verify", "--refresh"]));
    assert!(
        support::stdout(&out).contains("list #2 signed"),
        "{}",
        support::stdout(&out)
    );
    ok(market.run(&[]));
}

#[test]
fn a_missing_revocation_list_fails_closed_when_the_operator_requires_lists() {
    let market = Market::new();
    market.publish();
    let reference = market.reference("acme");
    std::fs::write(
        market.operator.dir.path().join("grants.yaml"),
        "marketplace:\n  requireRevocationLists: true\n",
    )
    .unwrap();
    let text = refused(market.install(&reference), "publishes no revocation list");
    assert!(text.contains("requireRevocationLists"), "{text}");
    market.no_lockfile();
    ok(market.author.agentgate(&[
        "plugins",
        "renew-revocations",
        &market.scope("acme"),
        "--key",
        market.key.secret.to_str().unwrap(),
    ]));
    ok(market.install(&reference));
}

#[test]
fn verify_tells_a_file_altered_on_this_host_from_what_the_registry_served() {
    let market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    let locked = market.locked("wasm");
    let file = market
        .operator
        .dir
        .path()
        .join("plugins")
        .join(format!("{}.wasm", locked.trim_start_matches("sha256:")));
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&file, rebuilt(&http_driver(), "altered here")).unwrap();
    let out = market.operator.agentgate(&["plugins", "verify"]);
    assert!(!out.status.success());
    let text = support::stdout(&out);
    assert!(text.contains("was altered on this host"), "{text}");
    assert!(!text.contains("the registry served"), "{text}");
}

/// A raw HTTP server on `address` that answers every request with 200 and then, in
/// chunks, an endless body (to ENDLESS_CAP) or one byte every 100 ms forever. Stands
/// where a registry the operator installed from was. Returns the bytes it sent.
fn hostile_at(address: &str, trickle: bool) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind(address).expect("the registry's address is free");
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\ntransfer-encoding: chunked\r\n\r\n",
                );
                let chunk = if trickle {
                    vec![b' '; 1]
                } else {
                    vec![b' '; 64 << 10]
                };
                let mut total = 0u64;
                while total < ENDLESS_CAP {
                    if trickle {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
                    frame.extend_from_slice(&chunk);
                    frame.extend_from_slice(b"\r\n");
                    if stream.write_all(&frame).is_err() {
                        return;
                    }
                    total += chunk.len() as u64;
                    counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
            });
        }
    });
    sent
}

/// The revocation fetch before a run and `verify --refresh` use the same bounded client
/// as `install`: a registry turned hostile after the install cannot exhaust memory or
/// hang them.
#[test]
fn revocation_fetches_before_runs_and_verify_refresh_are_bounded_too() {
    let mut market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    let address = market.registry.address.clone();
    market.registry.stop();
    let sent = hostile_at(&address, false);
    let out = measured(
        &market.operator,
        &["plugins", "verify", "--refresh"],
        std::time::Duration::from_secs(120),
    );
    println!(
        "hostile registry after install, endless bodies: `plugins verify --refresh` exited {} after {:.1}s, peak RSS {:.1} MiB (bound {PEAK_RSS_BOUND_MIB} MiB); the registry sent {:.1} MiB\n  {}",
        out.code,
        out.elapsed.as_secs_f64(),
        out.peak_rss_kib as f64 / 1024.0,
        sent.load(std::sync::atomic::Ordering::SeqCst) as f64 / (1 << 20) as f64,
        out.stdout.trim()
    );
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("as the revocation list of")
            && out.stdout.contains("4194304 bytes a manifest may be"),
        "{}",
        out.stdout
    );
    assert_rss_bounded(&out);
    // The fetch before a run: refused, the run goes on with the lists it holds.
    let text = stderr(&ok(market.run(&["--revocation-max-age", "0s"])));
    assert!(
        text.contains("cannot refresh the revocation lists of")
            && text.contains("4194304 bytes a manifest may be"),
        "{text}"
    );
}

#[test]
fn a_registry_that_trickles_cannot_hang_the_revocation_fetch_before_a_run() {
    let mut market = Market::new();
    market.publish();
    ok(market.install(&market.reference("acme")));
    let address = market.registry.address.clone();
    market.registry.stop();
    let sent = hostile_at(&address, true);
    std::fs::write(
        market.operator.dir.path().join("grants.yaml"),
        "marketplace:\n  registryTimeout: 3s\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let text = stderr(&ok(market.run(&["--revocation-max-age", "0s"])));
    println!(
        "trickling registry after install: the run ended after {:.1}s, the registry trickled {} bytes\n  {}",
        started.elapsed().as_secs_f64(),
        sent.load(std::sync::atomic::Ordering::SeqCst),
        text.lines().find(|l| l.contains("revocation")).unwrap_or("")
    );
    assert!(
        text.contains("took too long to send the revocation list"),
        "{text}"
    );
    assert!(
        sent.load(std::sync::atomic::Ordering::SeqCst) > 5,
        "it trickled"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}
