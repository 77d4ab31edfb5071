#!/bin/sh
# /bin/k3s of the kit's K3s node image.
#
# Upstream's /bin/k3s is cmd/k3s, a front end that runs `k3s kubectl|crictl|ctr`
# as the named tool and everything else through the multicall k3s-server
# (cmd/server). The kit builds only cmd/server (installed as k3s-server, with
# kubectl/crictl/ctr/containerd linked to it: it dispatches on its name), so
# this script does the front end's part. exec keeps k3s-server as PID 1.
case "${1:-}" in
  kubectl|crictl|ctr)
    tool=$1; shift
    exec "/usr/bin/$tool" "$@" ;;
esac
exec /usr/bin/k3s-server "$@"
