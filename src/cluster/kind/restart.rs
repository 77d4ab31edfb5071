//! What a Kind node that starts again from a snapshot needs, which kind's
//! entrypoint does not do.
//!
//! Its `/run` is a new tmpfs: flannel (the kit's node image's CNI) keeps the
//! node's pod subnet there, so until flannel runs again every pod sandbox
//! fails for want of `/run/flannel/subnet.env` and waits out the kubelet's
//! back-off. The subnet is the node's for life: a snapshot keeps a copy
//! beside kind's files, and a restore puts it back as the node starts.
//! (kind's own kindnet keeps its config in `/etc/cni/net.d`, which
//! survives; nothing happens on nodes without the file.) `start` does not
//! put it back: pods that start before kube-proxy has written its rules
//! dial Service addresses into the node's default route and wait out 30 s
//! dial time-outs, which cost more than the kubelet's back-off saves
//! (docs/performance.md, "Stop and start").

use crate::docker::{Engine, exec_in};
use crate::error::Error;

/// Right after a restored node container starts, before its kubelet does.
pub(super) async fn after_start(engine: &dyn Engine, node: &str) -> Result<(), Error> {
    let (code, out) = exec_in(engine, node, &["sh", "-c", PUT_BACK_FLANNEL_SUBNET]).await?;
    if code != 0 {
        tracing::debug!("node {node}: putting flannel's subnet file back: {out}");
    }
    Ok(())
}

pub(super) async fn keep_flannel_subnet(engine: &dyn Engine, node: &str) -> Result<(), Error> {
    let (code, out) = exec_in(engine, node, &["sh", "-c", KEEP_FLANNEL_SUBNET]).await?;
    if code != 0 {
        tracing::debug!("node {node}: keeping flannel's subnet file: {out}");
    }
    Ok(())
}

const KEEP_FLANNEL_SUBNET: &str = "[ -f /run/flannel/subnet.env ] || exit 0; \
     cp /run/flannel/subnet.env /kind/devstack-flannel-subnet.env";
const PUT_BACK_FLANNEL_SUBNET: &str = "[ -f /kind/devstack-flannel-subnet.env ] || exit 0; \
     mkdir -p /run/flannel && cp /kind/devstack-flannel-subnet.env /run/flannel/subnet.env";
