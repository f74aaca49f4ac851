//! Local package registries for the egress tests: a PEP 503 simple index serving one
//! pure-Python wheel, and an npm registry stand-in serving one package.
//!
//! Why: `pip install` and `npm install` through the egress allowlist are the cases users
//! care about, and the real registries are out of reach (and out of bounds: tests stay
//! on this machine). Both packages are built at test time, so there is no binary
//! fixture to trust. The servers speak plain HTTP on 127.0.0.1; the tests put
//! [`super::egress_net::Upstream::tls`] in front. Links to files are made from the
//! request's `Host`, so the client fetches them from the name it was told to use.

use std::path::Path;
use std::process::Command;

use base64::Engine;
use sha1::Digest as _;

use super::http::{full, json, Request, Server};

/// The package both registries serve, and what it prints once installed.
pub const PACKAGE: &str = "agentgate-egress-probe";
pub const VERSION: &str = "1.0.0";
pub const INSTALLED_MARKER: &str = "egress-probe-installed";

/// A wheel of a pure-Python package, made with Python's `zipfile` (a wheel is a zip
/// with the package, `METADATA`, `WHEEL` and `RECORD`): `(file name, bytes)`.
pub fn build_wheel(dir: &Path) -> (String, Vec<u8>) {
    let module = PACKAGE.replace('-', "_");
    let file_name = format!("{module}-{VERSION}-py3-none-any.whl");
    let script = format!(
        r#"
import base64, hashlib, zipfile
module, version, dist = "{module}", "{VERSION}", "{PACKAGE}"
info = f"{{module}}-{{version}}.dist-info"
files = {{
    f"{{module}}/__init__.py": 'MARKER = "{INSTALLED_MARKER}"\n',
    f"{{info}}/METADATA": f"Metadata-Version: 2.1\nName: {{dist}}\nVersion: {{version}}\n",
    f"{{info}}/WHEEL": "Wheel-Version: 1.0\nGenerator: agentgate-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}}
record = []
with zipfile.ZipFile("{file_name}", "w") as wheel:
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{{name}},sha256={{digest}},{{len(data)}}")
        wheel.writestr(name, data)
    record.append(f"{{info}}/RECORD,,")
    wheel.writestr(f"{{info}}/RECORD", "\n".join(record) + "\n")
"#
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("python3 builds the test wheel");
    assert!(
        out.status.success(),
        "building the wheel: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join(&file_name)).unwrap();
    (file_name, bytes)
}

/// An npm package tarball (`package/package.json`, `package/index.js`), made with
/// `tar`.
pub fn build_npm_tarball(dir: &Path) -> Vec<u8> {
    let package = dir.join("package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("package.json"),
        serde_json::json!({"name": PACKAGE, "version": VERSION, "main": "index.js"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        package.join("index.js"),
        format!("module.exports = {INSTALLED_MARKER:?};\n"),
    )
    .unwrap();
    let tarball = dir.join("package.tgz");
    let out = Command::new("tar")
        .args(["czf"])
        .arg(&tarball)
        .args(["-C"])
        .arg(dir)
        .arg("package")
        .output()
        .expect("tar builds the npm tarball");
    assert!(out.status.success(), "tar: {:?}", out);
    std::fs::read(tarball).unwrap()
}

/// `https://HOST` as the client named it, for links back to the same server.
fn origin(request: &Request) -> String {
    format!("https://{}", request.header("host").unwrap_or("localhost"))
}

/// A PEP 503 simple index with one project, [`PACKAGE`], and its wheel.
pub fn pypi_index(dir: &Path) -> Server {
    let (file_name, wheel) = build_wheel(dir);
    let digest = hex::encode(sha2::Sha256::digest(&wheel));
    let project = PACKAGE.to_string();
    Server::start(move |request| {
        let path = request.path.trim_end_matches('/');
        if path == "/simple" {
            let page = format!("<!DOCTYPE html><html><body><a href=\"/simple/{project}/\">{project}</a></body></html>");
            full(200, "text/html", page)
        } else if path == format!("/simple/{project}") {
            let page = format!(
                "<!DOCTYPE html><html><body><a href=\"{}/files/{file_name}#sha256={digest}\">{file_name}</a></body></html>",
                origin(request)
            );
            full(200, "text/html", page)
        } else if path == format!("/files/{file_name}") {
            full(200, "application/octet-stream", wheel.clone())
        } else {
            full(404, "text/plain", "not found")
        }
    })
}

/// An npm registry stand-in: the packument of [`PACKAGE`] at `/NAME` and its tarball.
pub fn npm_registry(dir: &Path) -> Server {
    let tarball = build_npm_tarball(dir);
    let shasum = hex::encode(sha1::Sha1::digest(&tarball));
    let integrity = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&tarball))
    );
    let tarball_path = format!("/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz");
    Server::start(move |request| {
        if request.path == format!("/{PACKAGE}") {
            let packument = serde_json::json!({
                "name": PACKAGE,
                "dist-tags": {"latest": VERSION},
                "versions": {VERSION: {
                    "name": PACKAGE,
                    "version": VERSION,
                    "main": "index.js",
                    "dist": {
                        "tarball": format!("{}{tarball_path}", origin(request)),
                        "shasum": shasum,
                        "integrity": integrity,
                    },
                }},
            });
            json(200, &packument)
        } else if request.path == tarball_path {
            full(200, "application/octet-stream", tarball.clone())
        } else {
            json(404, &serde_json::json!({"error": "not found"}))
        }
    })
}
