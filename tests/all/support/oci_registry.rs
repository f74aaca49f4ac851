//! Debian's `docker-registry` (the CNCF distribution registry, 2.8) serving on a free
//! port of 127.0.0.1 with filesystem storage in a temporary folder, for the
//! marketplace tests. It has no Referrers API, like many registries in use.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct OciRegistry {
    child: Option<Child>,
    /// The storage root (`docker/registry/v2/...`), for tests that alter what is stored.
    pub storage: PathBuf,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl OciRegistry {
    /// Starts a registry; panics (naming the Debian package) when it is missing.
    pub fn start() -> OciRegistry {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        // A free port: bound, released, then given to the registry.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
                storage.display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start docker-registry ({e}); install Debian's docker-registry")
            });
        let registry = OciRegistry {
            child: Some(child),
            storage,
            address,
            _dir: dir,
        };
        let end = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&registry.address).is_err() {
            assert!(
                Instant::now() < end,
                "docker-registry did not start listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// Stops the registry, as a registry that went down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The folder of a stored blob's bytes.
    pub fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The folder of tag `tag` of `repository` (without the registry).
    pub fn tag_dir(&self, repository: &str, tag: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/repositories")
            .join(repository)
            .join("_manifests/tags")
            .join(tag)
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
