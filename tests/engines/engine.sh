#!/usr/bin/env bash
# A second Docker engine for the "engines" test group: the kit's current
# dockerd (kit/components/engine.sh) beside the machine's engine, never
# replacing or touching it.
#
#   bash tests/engines/engine.sh start          # idempotent; prints what it checked
#   eval "$(bash tests/engines/engine.sh env)"   # DOCKER_HOST and the namespace facts
#   bash tests/engines/engine.sh exec CMD...     # CMD in the engine's network namespace, DOCKER_HOST set
#   bash tests/engines/engine.sh load IMAGE...   # host engine's images -> second engine
#   bash tests/engines/engine.sh status         # the checks of `start`, exit 1 when not running
#   bash tests/engines/engine.sh stop [--purge]  # every container, dockerd, containerd, namespace
#   bash tests/engines/engine.sh check          # can this machine run it? exit 1 and why when not
#
# The engine:
#   - runs in a network namespace of its own (`ip netns` name devstack-engines,
#     loopback up), so its firewall chains, bridges and published ports cannot
#     meet the host engine's (Docker 28 rewrites its chains at start). Published
#     ports on 127.0.0.1 are the namespace's loopback: reach them through `exec`.
#     A veth pair links the namespace to the host: the host is 10.213.213.1
#     from inside, the namespace 10.213.213.2 from the host (no default route,
#     no NAT: nothing beyond the host is reachable from inside);
#   - runs in a mount namespace of its own (unshare, propagation slave) with
#     the network namespace's sysfs bound over /sys/class/net and
#     /sys/devices/virtual/net (`ip netns exec` would remount all of /sys and
#     lose the cgroup mounts under it); its mounts vanish with its processes;
#   - socket unix:///run/devstack-engines/docker.sock, data root
#     /var/lib/devstack-engines/docker (kept by `stop`, a cache; `stop --purge`
#     removes it), exec root /run/devstack-engines/exec, its own managed
#     containerd, log /var/log/devstack-engines.log;
#   - daemon.json /run/devstack-engines/daemon.json (--config-file, so the
#     machine's /etc/docker/daemon.json is not read): the containerd image
#     store, "init": true on purpose (a user's daemon.json making docker-init
#     PID 1 of every container that does not say --init=false), the runc
#     wrapper scripts/runc-bounded (pointed at the kit's runc) as default
#     runtime, cgroup parent /devstack-engines (cgroupfs driver; none under
#     systemd);
#   - environment DOCKER_MIN_API_VERSION=1.44: clients below API 1.44 are
#     refused, as Docker 29 does.
# DEVSTACK_ENGINE_VERSION: v28.5.2 (default) or v29.8.0, the dockerd the kit
# builds (kit/components/engine.sh, built or reused there); a data root
# written by another version is removed at start. DEVSTACK_ENGINE_BIN: a
# directory with the engine binaries instead of the kit's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

NS=devstack-engines
NS_PATH=/run/netns/$NS
RUN_DIR=/run/devstack-engines
SOCK=$RUN_DIR/docker.sock
ENGINE_HOST=unix://$SOCK
EXEC_ROOT=$RUN_DIR/exec
PIDFILE=$RUN_DIR/dockerd.pid
CONFIG=$RUN_DIR/daemon.json
STATE_ROOT=/var/lib/devstack-engines
DATA_ROOT=$STATE_ROOT/docker
LOG=/var/log/devstack-engines.log
CGROUP_PARENT=devstack-engines
HOST_IF=dse-host NS_IF=host0
HOST_IP=10.213.213.1 NS_IP=10.213.213.2
HOST_ENGINE=${DEVSTACK_ENGINES_HOST_ENGINE:-unix:///var/run/docker.sock}
MIN_API=1.44
ENGINE_VERSION=${DEVSTACK_ENGINE_VERSION:-v28.5.2}
START_TIMEOUT=${DEVSTACK_ENGINES_START_TIMEOUT:-90}

log() { printf '[engines %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[engines] error: %s\n' "$*" >&2; exit 1; }

# cannot_run: why this machine cannot run the engine, or nothing when it can.
# Changes nothing: the namespace probe is one `unshare` that ends at once.
cannot_run() {
  if [ "$(id -u)" != 0 ]; then
    echo "needs root (it creates a network namespace, a veth pair and mounts, and runs a second dockerd); run the group as root, or leave engines out of DEVSTACK_TEST_TIERS"
    return
  fi
  local tool
  for tool in ip nsenter unshare setsid flock jq iptables; do
    command -v "$tool" >/dev/null || { echo "\`$tool\` not found (the engine's namespace and start need it)"; return; }
  done
  ip netns list >/dev/null 2>&1 || { echo "\`ip netns\` does not work here (iproute2 without network namespace support)"; return; }
  unshare --net true 2>/dev/null ||
    echo "cannot create a network namespace here (\`unshare --net\` refused: a container without CAP_SYS_ADMIN, or a kernel without network namespaces)"
}

edocker() { docker -H "$ENGINE_HOST" "$@"; }
answers() { [ -S "$SOCK" ] && timeout 10 docker -H "$ENGINE_HOST" version >/dev/null 2>&1; }
pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
dockerd_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  # A stale pid file may name a pid reused by another program.
  if pid_alive "$pid" && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ]; then echo "$pid"; fi
}
ns_exists() { [ -e "$NS_PATH" ] && ip netns list | awk '{print $1}' | grep -qx "$NS"; }

# --- the namespace -----------------------------------------------------------------
make_netns() {
  if [ -e "$NS_PATH" ] && ! ip netns exec "$NS" true 2>/dev/null; then
    ip netns delete "$NS" 2>/dev/null || rm -f "$NS_PATH"
  fi
  ns_exists || ip netns add "$NS"
  ip -n "$NS" link set lo up
  if ! ip -n "$NS" link show "$NS_IF" >/dev/null 2>&1; then
    ip link delete "$HOST_IF" 2>/dev/null || true
    ip link add "$HOST_IF" type veth peer name "$NS_IF" netns "$NS"
    ip addr add "$HOST_IP/30" dev "$HOST_IF"
    ip -n "$NS" addr add "$NS_IP/30" dev "$NS_IF"
    ip link set "$HOST_IF" up
    ip -n "$NS" link set "$NS_IF" up
  fi
}

# --- start -------------------------------------------------------------------------
engine_bin() {
  local bin=${DEVSTACK_ENGINE_BIN:-}
  if [ -z "$bin" ]; then
    bin=$(ENGINE_DOCKER_VERSION=$ENGINE_VERSION bash "$repo/kit/components/engine.sh" | tail -1) \
      || die "kit/components/engine.sh failed"
  fi
  for b in dockerd docker-proxy containerd containerd-shim-runc-v2 runc; do
    [ -x "$bin/$b" ] || die "no $b in $bin"
  done
  echo "$bin"
}

write_config() {
  local bin=$1 init_path
  init_path=$(command -v docker-init || true)
  [ -n "$init_path" ] || die "docker-init not found (Debian: apt-get install docker.io, or tini as docker-init)"
  mkdir -p "$RUN_DIR"
  # The wrapper reads DEVSTACK_REAL_RUNC; a script of our own sets it, so it
  # does not depend on dockerd's environment reaching runc through the shims.
  cat >"$RUN_DIR/runc" <<EOF
#!/bin/sh
DEVSTACK_REAL_RUNC=$bin/runc exec $repo/scripts/runc-bounded "\$@"
EOF
  chmod 0755 "$RUN_DIR/runc"
  # A cgroup parent of its own for the cgroupfs driver (these machines: no
  # systemd); under systemd dockerd picks the systemd driver, which takes
  # only slices: left at its default there.
  local parent=/$CGROUP_PARENT
  [ -d /run/systemd/system ] && parent=""
  jq -n --arg runc "$RUN_DIR/runc" --arg init "$init_path" --arg proxy "$bin/docker-proxy" \
    --arg parent "$parent" '{
      features: {"containerd-snapshotter": true},
      init: true,
      "init-path": $init,
      runtimes: {"devstack-runc": {path: $runc}},
      "default-runtime": "devstack-runc",
      "userland-proxy-path": $proxy
    } + (if $parent == "" then {} else {"cgroup-parent": $parent} end)' >"$CONFIG"
  # Run inside the namespaces: this namespace's sysfs for the net classes
  # only, then dockerd.
  cat >"$RUN_DIR/dockerd-entry.sh" <<EOF
#!/bin/sh
set -e
mkdir -p $RUN_DIR/sysfs
mount -t sysfs sysfs-$NS $RUN_DIR/sysfs
mount --bind $RUN_DIR/sysfs/class/net /sys/class/net
mount --bind $RUN_DIR/sysfs/devices/virtual/net /sys/devices/virtual/net
exec dockerd --config-file $CONFIG --host $ENGINE_HOST --data-root $DATA_ROOT \\
  --exec-root $EXEC_ROOT --pidfile $PIDFILE
EOF
}

cmd_start() {
  if [ -n "$(dockerd_pid)" ] && ns_exists && answers; then
    log "already running (pid $(dockerd_pid))"
    report
    return 0
  fi
  # Whatever a crash or a half start left behind, without touching the data.
  cleanup
  local bin
  bin=$(engine_bin)
  command -v iptables >/dev/null || die "iptables not found"
  make_netns
  write_config "$bin"
  # A data root another dockerd version wrote is not reused (no downgrades).
  local version
  version=$("$bin/dockerd" --version)
  if [ -d "$DATA_ROOT" ] && [ "$(cat "$STATE_ROOT/dockerd-version" 2>/dev/null)" != "$version" ]; then
    log "data root of another engine version: removing $DATA_ROOT"
    rm -rf "$DATA_ROOT"
  fi
  mkdir -p "$DATA_ROOT" "$EXEC_ROOT"
  echo "$version" >"$STATE_ROOT/dockerd-version"
  printf '\n=== %s start (%s)\n' "$(date -Is)" "$bin" >>"$LOG"
  log "starting dockerd in netns $NS (log $LOG)"
  # setsid: out of the caller's session, so the engine outlives it. No
  # descriptor of the caller's beyond 0-2 reaches dockerd (the lock of
  # `lifecycle`, a pipe a caller waits on to end).
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    exec env -i PATH="$bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
      DOCKER_MIN_API_VERSION=$MIN_API \
      setsid nsenter --net="$NS_PATH" -- unshare --mount --propagation slave -- \
      /bin/sh "$RUN_DIR/dockerd-entry.sh"
  ) >>"$LOG" 2>&1 </dev/null &
  local launcher=$! waited=0
  until answers; do
    if ! pid_alive "$launcher" && [ -z "$(dockerd_pid)" ]; then
      tail -25 "$LOG" >&2
      die "dockerd exited during start (log $LOG)"
    fi
    if [ "$waited" -ge "$START_TIMEOUT" ]; then
      tail -25 "$LOG" >&2
      die "dockerd did not answer within ${START_TIMEOUT}s (log $LOG)"
    fi
    sleep 1; waited=$((waited + 1))
  done
  log "dockerd answers after ${waited}s (pid $(dockerd_pid))"
  report
}

# report: what `start` checks and prints; non-zero when a check fails.
report() {
  local v info ok=0
  v=$(edocker version --format '{{.Server.Version}} {{.Server.APIVersion}} {{.Server.MinAPIVersion}}') \
    || die "docker version failed against $ENGINE_HOST"
  info=$(edocker info --format '{{json .}}')
  local version api min driver_type cg_driver cg_version runtime init
  read -r version api min <<<"$v"
  driver_type=$(jq -r '[.DriverStatus[]? | select(.[0] == "driver-type") | .[1]] | first // "-"' <<<"$info")
  cg_driver=$(jq -r .CgroupDriver <<<"$info")
  cg_version=$(jq -r .CgroupVersion <<<"$info")
  runtime=$(jq -r .DefaultRuntime <<<"$info")
  init=$(jq -r '.InitBinary' <<<"$info")
  echo "engine: $version (API $api, minimum API $min) at $ENGINE_HOST, netns $NS"
  echo "storage: $(jq -r .Driver <<<"$info"), driver-type $driver_type"
  echo "cgroup: driver $cg_driver, version $cg_version; default runtime $runtime; init $init"
  echo "containerd: $(jq -r .ContainerdCommit.ID <<<"$info"); runc: $(jq -r .RuncCommit.ID <<<"$info")"
  [ "$min" = "$MIN_API" ] || { echo "check failed: minimum API $min, not $MIN_API" >&2; ok=1; }
  [ "$driver_type" = io.containerd.snapshotter.v1 ] \
    || { echo "check failed: not the containerd image store (driver-type $driver_type)" >&2; ok=1; }
  return $ok
}

# --- stop --------------------------------------------------------------------------
ns_pids() { [ -e "$NS_PATH" ] && ip netns pids "$NS" 2>/dev/null || true; }
# Shims and containerd of this engine, found by its exec root in their command line.
engine_pids() {
  local p args
  for p in /proc/[0-9]*; do
    mapfile -t -d '' args 2>/dev/null <"$p/cmdline" || continue
    [[ " ${args[*]} " == *"$EXEC_ROOT/"* ]] && echo "${p#/proc/}"
  done
  return 0
}
# Processes of the engine's containers: under its cgroup parent, or (with
# systemd's cgroup driver, where no parent is set) in a cgroup named after a
# container of its data root.
cgroup_pids() {
  local d c
  for d in /sys/fs/cgroup/*/"$CGROUP_PARENT" /sys/fs/cgroup/"$CGROUP_PARENT"; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done
  if [ -d /run/systemd/system ] && [ -d "$DATA_ROOT/containers" ]; then
    for c in "$DATA_ROOT"/containers/*; do
      [ -d "$c" ] || continue
      find /sys/fs/cgroup -type d -name "*${c##*/}*" -exec sh -c 'cat "$1"/cgroup.procs' _ {} \; 2>/dev/null
    done
  fi
  return 0
}
kill_pids() {
  local sig=$1; shift
  local p
  for p in "$@"; do
    if [ "$p" != $$ ]; then kill "-$sig" "$p" 2>/dev/null || true; fi
  done
}

# cleanup: ends every process of the engine (dockerd, containerd, shims,
# containers, anything in the namespace), unmounts, removes the namespace and
# the run directory. Works on what a crash left; keeps the data root.
cleanup() {
  local pid
  pid=$(dockerd_pid)
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do pid_alive "$pid" || break; sleep 1; done
    pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  local pids
  for _ in 1 2 3; do
    # shellcheck disable=SC2207
    pids=($(engine_pids) $(cgroup_pids) $(ns_pids))
    [ ${#pids[@]} -eq 0 ] && break
    kill_pids KILL "${pids[@]}"
    sleep 1
  done
  # Container cgroups of this engine, deepest first.
  local d
  for d in /sys/fs/cgroup/*/"$CGROUP_PARENT" /sys/fs/cgroup/"$CGROUP_PARENT"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # Mounts in the machine's mount namespace (none in normal operation: the
  # engine mounts in its own namespace, which ends with its processes).
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk '{print $5}' /proc/self/mountinfo | grep -E "^($RUN_DIR|$STATE_ROOT)(/|$)" | sort -r)
  ip link delete "$HOST_IF" 2>/dev/null || true
  if [ -e "$NS_PATH" ]; then
    ip netns delete "$NS" 2>/dev/null || { umount -l "$NS_PATH" 2>/dev/null || true; rm -f "$NS_PATH"; }
  fi
  rm -rf "$RUN_DIR"
}

cmd_stop() {
  local purge=0
  [ "${1:-}" = --purge ] && purge=1
  if [ -n "$(dockerd_pid)" ] && answers; then
    local ids
    ids=$(edocker ps -aq)
    if [ -n "$ids" ]; then
      log "removing $(wc -l <<<"$ids") container(s)"
      # shellcheck disable=SC2086
      edocker rm -f -v $ids >/dev/null || true
    fi
  fi
  log "stopping"
  cleanup
  if [ "$purge" = 1 ]; then
    log "removing $STATE_ROOT"
    rm -rf "$STATE_ROOT"
  fi
  log "stopped"
}

# --- the rest ----------------------------------------------------------------------
cmd_env() {
  cat <<EOF
export DOCKER_HOST=$ENGINE_HOST
export DEVSTACK_ENGINES_NETNS=$NS
export DEVSTACK_ENGINES_NETNS_PATH=$NS_PATH
export DEVSTACK_ENGINES_HOST_IP=$HOST_IP
export DEVSTACK_ENGINES_NS_IP=$NS_IP
EOF
}

cmd_exec() {
  [ $# -gt 0 ] || die "usage: engine.sh exec CMD [ARGS...]"
  ns_exists || die "not started (bash tests/engines/engine.sh start)"
  exec nsenter --net="$NS_PATH" -- env DOCKER_HOST="$ENGINE_HOST" "$@"
}

cmd_load() {
  [ $# -gt 0 ] || die "usage: engine.sh load IMAGE..."
  answers || die "not started (bash tests/engines/engine.sh start)"
  log "docker save (host) | docker load (engine): $*"
  docker -H "$HOST_ENGINE" save "$@" | edocker load
}

cmd_status() {
  if [ -n "$(dockerd_pid)" ] && answers; then
    report
  else
    echo "not running" >&2
    return 1
  fi
}

# start and stop: one at a time, and from outside the namespace (stop ends
# every process in it; start links the namespace to the caller's).
lifecycle() {
  if [ -e "$NS_PATH" ] && [ "$(stat -L -c %i /proc/self/ns/net)" = "$(stat -L -c %i "$NS_PATH")" ]; then
    die "run $1 from the host's network namespace, not through \`engine.sh exec\`"
  fi
  exec 9>/run/devstack-engines.lock
  flock -w 300 9 || die "another start or stop holds /run/devstack-engines.lock"
}

case "${1:-}" in
  check)
    why=$(cannot_run)
    [ -z "$why" ] || { echo "$why"; exit 1; }
    echo "this machine can run the engine (root, network namespaces, the tools)"
    exit 0
    ;;
  start | stop | env | exec | load | status)
    why=$(cannot_run)
    [ -z "$why" ] || die "$why"
    ;;
esac

case "${1:-}" in
  start) shift; lifecycle start; cmd_start "$@" ;;
  stop) shift; lifecycle stop; cmd_stop "$@" ;;
  env) shift; cmd_env ;;
  exec) shift; cmd_exec "$@" ;;
  load) shift; cmd_load "$@" ;;
  status) shift; cmd_status ;;
  *) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
