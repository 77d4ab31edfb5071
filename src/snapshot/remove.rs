//! Removing a snapshot: its directory, then the shared volumes no snapshot
//! left in the store has.

use super::store::{check_name, io_error, not_found, store_dir};
use super::volume::prune_shared_volumes;
use crate::docker;
use crate::error::Error;
use crate::profile::Settings;

/// What removing a snapshot did with its shared volumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// Volumes a stack restored from it still mounts: that stack's `down`
    /// removes them.
    pub volumes_in_use: Vec<String>,
    /// Docker was not reachable, so its volumes stay until the next
    /// `down` or `snapshot rm` that reaches it.
    pub docker_unreachable: bool,
}

/// Removes snapshot `name` and the shared volumes no other snapshot of the
/// store has (those a running stack mounts stay; see [`Removal`]).
pub async fn remove(settings: &Settings, name: &str) -> Result<Removal, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.exists() {
        return Err(not_found(name));
    }
    std::fs::remove_dir_all(&dir).map_err(io_error(format!("remove {}", dir.display())))?;
    let Ok(engine) = docker::connect().await else {
        return Ok(Removal {
            docker_unreachable: true,
            ..Removal::default()
        });
    };
    Ok(Removal {
        volumes_in_use: prune_shared_volumes(engine.as_ref(), settings).await?,
        docker_unreachable: false,
    })
}
