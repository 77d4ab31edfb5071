// CNI plugins for the offline K3s node image: a flannel meta-plugin of the
// kit's own (./flannel) plus the standard plugins, built as main packages of
// the containernetworking/plugins dependency (go build <pkg>).
module devstack.dev/kit/cni

go 1.23

require (
	github.com/containernetworking/cni v1.2.3
	github.com/containernetworking/plugins v1.6.2
)

require (
	github.com/vishvananda/netns v0.0.4 // indirect
	golang.org/x/sys v0.27.0 // indirect
)
