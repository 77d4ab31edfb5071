#!/bin/sh
# /usr/bin/runc of the kit's K3s node image.
#
# On an ordinary host this execs the real runc (k3s's runc fork, built by the
# kit) at once. On a sandboxed host whose capability bounding set lacks some
# capabilities (seen: CAP_SYS_RESOURCE), pods could not start: the kubelet
# asks for negative oom_score_adj values (pause: -998), which need
# CAP_SYS_RESOURCE, and privileged pods ask for every capability. There it
# adjusts the OCI config runc is handed (create/run: <bundle>/config.json,
# exec: --process FILE) before running the real runc:
#   - oomScoreAdj below this process's own value is raised to it;
#   - capabilities outside the bounding set are dropped.
set -eu
real=/usr/libexec/devstack-kit/runc
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 40)
full=$(( (1 << (last + 1)) - 1 ))
[ $(( 0x$bnd & full )) -ne "$full" ] || exec "$real" "$@"

cmd="" bundle="" process="" prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle|-b) bundle=$arg ;;
    --process|-p) [ "$cmd" = exec ] && process=$arg ;;
  esac
  case "$arg" in
    --bundle=*) bundle=${arg#--bundle=} ;;
    --process=*) process=${arg#--process=} ;;
    create|run|exec) [ -z "$cmd" ] && cmd=$arg ;;
  esac
  prev=$arg
done

missing=""
bit=0
for name in CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP \
  LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE \
  SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME \
  SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG \
  WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE; do
  [ $(( (0x$bnd >> bit) & 1 )) -eq 1 ] || missing="$missing\"CAP_$name\","
  bit=$((bit + 1))
done
own=$(cat /proc/self/oom_score_adj)

# fix FILE PATH: PATH is where the process object sits in FILE ("" or ".process").
fix() {
  [ -f "$1" ] || return 0
  jq --argjson own "$own" "[${missing%,}] as \$m
    | if ($2.oomScoreAdj // \$own) < \$own then $2.oomScoreAdj = \$own else . end
    | if $2.capabilities then $2.capabilities |= with_entries(.value |= (. // [] | map(select(. as \$c | \$m | index(\$c) | not)))) else . end" \
    "$1" >"$1.kit-tmp" && mv "$1.kit-tmp" "$1"
}
case "$cmd" in
  create|run) fix "${bundle:-.}/config.json" .process ;;
  exec) [ -z "$process" ] || fix "$process" "" ;;
esac
exec "$real" "$@"
