use crate::cluster::{ClusterInfo, UpOptions};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;
pub async fn up(_: &bollard::Docker, _: &Settings, _: UpOptions, _: &Step) -> Result<ClusterInfo, Error> { Err(Error::internal("kind provider in progress")) }
pub async fn down(_: &bollard::Docker, _: &Settings) -> Result<bool, Error> { Ok(false) }
