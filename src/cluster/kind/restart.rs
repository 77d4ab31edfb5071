//! What a Kind node that starts again from a snapshot needs, which kind's
//! entrypoint does not do.
//!
//! Its `/run` is a new tmpfs: flannel (the kit's node image's CNI) keeps the
//! node's pod subnet there, so until flannel runs again every pod sandbox
//! fails for want of `/run/flannel/subnet.env` and waits out the kubelet's
//! back-off. The subnet is the node's for life: devstack keeps a copy
//! beside kind's files, and a restore puts it back as the node starts.
//! (kind's own kindnet keeps its config in `/etc/cni/net.d`, which
//! survives; nothing happens on nodes without the file.) `start` does not
//! put it back: pods that start before kube-proxy has written its rules
//! dial Service addresses (the LocalStack Service the Bucket is fetched
//! from) into the node's default route and wait out 30 s dial time-outs,
//! which cost more than the kubelet's back-off saves (docs/performance.md,
//! "Stop and start").
//!
//! It begins in a new network namespace with empty netfilter tables, and
//! its kubelet can start pods before kube-proxy, one of those pods, has
//! written the rules behind the `kubernetes` Service: a pod that dials the
//! API server at the Service's address then sends its SYN out of the
//! node's default route, where nothing answers, and client-go's dialer
//! waits its 30 s out. (K3s runs kube-proxy inside its own process before
//! its kubelet.) So every node carries a kubelet drop-in that, before the
//! kubelet starts, points the Service's address at the API server the
//! kubelet itself reaches (its kubeconfig's server, resolved on the node's
//! networks); a restore also runs it right after it starts a node, for
//! nodes saved before the drop-in existed. kube-proxy's rules, once
//! written, come first in the chains and take over.

use crate::docker::{Engine, exec_in};
use crate::error::Error;

/// The script, kept in the node beside kind's own files. It reads the
/// Service range from kind's kubeadm config and the API server from the
/// kubelet's kubeconfig, so it follows a node that moved (a restore) and a
/// cluster whose subnets kind chose. Every rule is checked before it is
/// added: the drop-in and devstack may both run it.
const SCRIPT_PATH: &str = "/kind/devstack-api-route.sh";
const SCRIPT: &str = r#"#!/bin/sh
# devstack: until kube-proxy writes its rules, send the `kubernetes`
# Service's address to the API server the kubelet reaches.
server=$(sed -n 's#^ *server: *https://##p' /etc/kubernetes/kubelet.conf 2>/dev/null | head -n 1)
subnet=$(sed -n 's/^ *serviceSubnet: *//p' /kind/kubeadm.conf 2>/dev/null | head -n 1 | cut -d, -f1 | tr -d '"')
[ -n "$server" ] && [ -n "$subnet" ] || exit 0
host=${server%:*}; port=${server##*:}
case "$subnet" in *:*) exit 0 ;; esac
net=${subnet%/*}
service=${net%.*}.$(( ${net##*.} + 1 ))
address=$(getent ahostsv4 "$host" | awk 'NR == 1 { print $1 }')
[ -n "$address" ] || exit 0
rule() { iptables -w 5 -t nat -C "$@" 2>/dev/null || iptables -w 5 -t nat -A "$@"; }
why="devstack: the API server until kube-proxy serves the kubernetes Service"
for chain in PREROUTING OUTPUT; do
  rule "$chain" -d "$service/32" -p tcp --dport 443 -m comment --comment "$why" -j DNAT --to-destination "$address:$port"
done
rule POSTROUTING -d "$address/32" -p tcp --dport "$port" -m comment --comment "$why" -j MASQUERADE
exit 0
"#;

/// The kubelet unit's drop-in: runs the script before every kubelet start
/// (`-`: a failure of the script never keeps the kubelet from starting).
const DROP_IN_PATH: &str = "/etc/systemd/system/kubelet.service.d/20-devstack-api-route.conf";
const DROP_IN: &str = "[Service]\nExecStartPre=-/bin/sh /kind/devstack-api-route.sh\n";

/// Once the cluster runs: the drop-in for the node's next start (`start`,
/// a snapshot of it, the machine's reboot). Best effort, as [`after_start`].
///
/// Only the files: the nodes' iptables are kube-proxy's by now, and an
/// `iptables` run beside its own would wait on the same lock.
pub(super) async fn prepare(engine: &dyn Engine, node: &str) -> Result<(), Error> {
    install_api_route(engine, node, false).await
}

/// Right after a restored node container starts, before its kubelet does.
pub(super) async fn after_start(engine: &dyn Engine, node: &str) -> Result<(), Error> {
    let (code, out) = exec_in(engine, node, &["sh", "-c", PUT_BACK_FLANNEL_SUBNET]).await?;
    if code != 0 {
        tracing::debug!("node {node}: putting flannel's subnet file back: {out}");
    }
    install_api_route(engine, node, true).await
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

/// Writes the script and the kubelet drop-in into `node` and, with `run`,
/// runs the script now. Best effort: a node without the rules only waits longer for
/// its pods, so a failure is logged, not raised.
///
/// On a node just started, it runs once kind's entrypoint has handed over
/// to systemd: the entrypoint chooses the node's iptables backend by
/// counting the rules it finds, which rules added earlier would sway.
async fn install_api_route(engine: &dyn Engine, node: &str, run: bool) -> Result<(), Error> {
    const WRITE_AND_RUN: &str = "i=0; while [ \"$(cat /proc/1/comm)\" != systemd ] && [ $i -lt 100 ]; \
         do sleep 0.1; i=$((i + 1)); done; \
         printf '%s' \"$1\" > \"$2\" && mkdir -p \"$(dirname \"$4\")\" \
         && printf '%s' \"$3\" > \"$4\" && { [ \"$5\" != run ] || sh \"$2\"; }";
    let (code, out) = exec_in(
        engine,
        node,
        &[
            "sh",
            "-c",
            WRITE_AND_RUN,
            "sh",
            SCRIPT,
            SCRIPT_PATH,
            DROP_IN,
            DROP_IN_PATH,
            if run { "run" } else { "write" },
        ],
    )
    .await?;
    if code != 0 {
        tracing::debug!("node {node}: routing the kubernetes Service until kube-proxy: {out}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs the script with the node's files at `files` and an `iptables`
    /// that records its arguments (and says a rule is missing to `-C`).
    fn run_in(dir: &std::path::Path, kubelet_conf: &str, kubeadm_conf: &str) -> Vec<String> {
        std::fs::write(dir.join("kubelet.conf"), kubelet_conf).unwrap();
        std::fs::write(dir.join("kubeadm.conf"), kubeadm_conf).unwrap();
        let log = dir.join("iptables.log");
        let fake = dir.join("iptables");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *' -C '*) exit 1 ;; esac\n",
                log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = SCRIPT
            .replace(
                "/etc/kubernetes/kubelet.conf",
                &dir.join("kubelet.conf").display().to_string(),
            )
            .replace(
                "/kind/kubeadm.conf",
                &dir.join("kubeadm.conf").display().to_string(),
            );
        let path = dir.join("route.sh");
        std::fs::write(&path, script).unwrap();
        let parse = Command::new("sh").arg("-n").arg(&path).status().unwrap();
        assert!(parse.success(), "sh -n {SCRIPT}");
        let run = Command::new("sh")
            .arg(&path)
            .env(
                "PATH",
                format!("{}:{}", dir.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" -A "))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_service_address_goes_to_the_kubelets_api_server() {
        let dir = tempfile::tempdir().unwrap();
        let added = run_in(
            dir.path(),
            "clusters:\n- cluster:\n    certificate-authority-data: x\n    server: https://localhost:6443\n",
            "networking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/16\n",
        );
        assert_eq!(added.len(), 3, "{added:?}");
        for chain in ["PREROUTING", "OUTPUT"] {
            assert!(
                added.iter().any(|r| r
                    .contains(&format!("-A {chain} -d 10.96.0.1/32 -p tcp --dport 443"))
                    && r.ends_with("-j DNAT --to-destination 127.0.0.1:6443")),
                "{added:?}"
            );
        }
        assert!(
            added[2].contains("-A POSTROUTING -d 127.0.0.1/32 -p tcp --dport 6443"),
            "{added:?}"
        );
    }

    #[test]
    fn nothing_is_added_without_kubeadm_files_or_on_ipv6() {
        let dir = tempfile::tempdir().unwrap();
        assert!(run_in(dir.path(), "", "").is_empty());
        let v6 = run_in(
            dir.path(),
            "    server: https://localhost:6443\n",
            "  serviceSubnet: fd00:10:96::/112\n",
        );
        assert!(v6.is_empty(), "{v6:?}");
    }
}
