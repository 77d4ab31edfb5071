#!/bin/sh
# iptables wrapper of the kit's kube-proxy and flannel images (installed as
# /usr/sbin/iptables{,-save,-restore} and the ip6tables names). On first use
# it picks the backend the node uses (the one holding the kubelet's hint
# chain, else the one with more rules, as kind's entrypoint decides), points
# the names at that backend's binaries and runs the command.
set -eu
# The kubelet marks its backend with a KUBE-IPTABLES-HINT chain in mangle.
hint() { "$1" -t mangle 2>/dev/null | grep -q '^:KUBE-IPTABLES-HINT\|^:KUBE-KUBELET-CANARY'; }
if hint iptables-nft-save || hint ip6tables-nft-save; then mode=nft
elif hint iptables-legacy-save || hint ip6tables-legacy-save; then mode=legacy
else
  # otherwise the same rule as kind's entrypoint: the backend with more rules
  legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c '^-' || true)
  nft=$( (timeout 5 sh -c 'iptables-nft-save; ip6tables-nft-save') 2>/dev/null | grep -c '^-' || true)
  if [ "${legacy:-0}" -ge "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
fi
for t in iptables ip6tables; do
  ln -sf "$t-$mode" "/usr/sbin/$t"
  ln -sf "$t-$mode-save" "/usr/sbin/$t-save"
  ln -sf "$t-$mode-restore" "/usr/sbin/$t-restore"
done
exec "$0" "$@"
