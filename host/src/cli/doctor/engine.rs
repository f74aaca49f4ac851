//! The `docker` provider's checks: the engine a run would connect to (same address,
//! same version negotiation, never another engine), asked with a short timeout so a
//! stopped or hung engine is reported rather than waited for, and whether its storage
//! driver can enforce `resources.disk`.

use std::time::Duration;

use crate::capabilities::docker::{self, DISK_QUOTA_FIX, ENGINE_FIX};

use super::{before_fix, said, Check, DOCKER, NO_PROVIDER};

const GROUP: &str = "docker";

/// How long the engine may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

pub async fn checks() -> Vec<Check> {
    let address = docker::engine_address();
    match docker::engine_facts(TIMEOUT).await {
        Ok(engine) => {
            let storage = match engine.storage.disk_quota() {
                Ok(()) => Check::ok(
                    "docker-storage",
                    GROUP,
                    DOCKER,
                    format!(
                        "storage driver {}: `resources.disk` limits are enforced",
                        engine.storage
                    ),
                ),
                // Runs without a disk limit are not affected; those with one are refused.
                Err(_) => Check::warn(
                    "docker-storage",
                    GROUP,
                    NO_PROVIDER,
                    format!(
                        "storage driver {}: no container size limit, so runs that set \
                         `resources.disk` are refused",
                        engine.storage
                    ),
                    DISK_QUOTA_FIX,
                ),
            };
            vec![
                Check::ok(
                    "docker-engine",
                    GROUP,
                    DOCKER,
                    format!(
                        "Docker {} at {address}, API {} agreed",
                        engine.version, engine.api_version
                    ),
                ),
                storage,
            ]
        }
        Err(e) => vec![
            Check::fail(
                "docker-engine",
                GROUP,
                DOCKER,
                before_fix(&said(&e), ENGINE_FIX),
                ENGINE_FIX,
            ),
            Check::skip(
                "docker-storage",
                GROUP,
                DOCKER,
                "the Docker engine is unreachable",
            ),
        ],
    }
}
