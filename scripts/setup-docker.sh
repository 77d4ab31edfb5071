#!/usr/bin/env bash
# Makes a Docker engine answer on this machine: installs Debian's docker.io
# (and the tools the kit needs) when missing and starts dockerd in the
# background when no engine answers. Safe to run repeatedly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[host] %s\n' "$*" >&2; }
export DEBIAN_FRONTEND=noninteractive

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v jq >/dev/null || need+=(jq)
command -v flock >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v socat >/dev/null || need+=(socat)
# The docker group checks that Podman's Docker-compatible API is refused up front.
command -v podman >/dev/null || need+=(podman)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  log "docker engine answers: $(docker version -f '{{.Server.Version}}')"
  exit 0
fi

# Sandboxed hosts can lack capabilities in their bounding set; a runc wrapper
# keeps --privileged working there (see runc-bounded). On a host with the full
# set the wrapper passes everything through unchanged.
install -D -m 0755 "$here/runc-bounded" /usr/local/libexec/devstack/runc-bounded
mkdir -p /etc/docker
if [ ! -f /etc/docker/daemon.json ] || ! grep -q devstack-runc /etc/docker/daemon.json; then
  cat >/etc/docker/daemon.json <<'JSON'
{"runtimes":{"devstack-runc":{"path":"/usr/local/libexec/devstack/runc-bounded"}},"default-runtime":"devstack-runc"}
JSON
fi
log "starting dockerd in the background (log: /var/log/dockerd.log)"
nohup dockerd >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "docker engine answers: $(docker version -f '{{.Server.Version}}')"
    exit 0
  fi
  sleep 1
done
tail -20 /var/log/dockerd.log >&2
log "error: dockerd did not answer within 60s"
exit 1
