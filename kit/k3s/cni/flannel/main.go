// Command flannel is the CNI meta-plugin that k3s's flannel conflist
// (type "flannel") invokes. The devstack offline kit builds it because the
// upstream plugin module is not available from the Go module proxy here.
//
// On ADD it reads the subnet lease flannel wrote (/run/flannel/subnet.env),
// turns the "delegate" section of its own config into a full bridge config
// (host-local IPAM over the node's pod subnet, a route to the whole cluster
// network, MTU and masquerading from the lease), stores that config under
// dataDir/<container id> and runs the delegate. On DEL it replays the stored
// config through the delegate and removes it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

type config struct {
	types.NetConf
	SubnetFile    string         `json:"subnetFile"`
	DataDir       string         `json:"dataDir"`
	Delegate      map[string]any `json:"delegate"`
	IPAM          map[string]any `json:"ipam,omitempty"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
}

type lease struct {
	networks []string // FLANNEL_NETWORK / FLANNEL_IPV6_NETWORK (comma separated)
	subnets  []string // FLANNEL_SUBNET / FLANNEL_IPV6_SUBNET
	mtu      int
	ipMasq   bool
}

func parseConfig(data []byte) (*config, error) {
	c := &config{SubnetFile: "/run/flannel/subnet.env", DataDir: "/var/lib/cni/flannel"}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("parse flannel netconf: %w", err)
	}
	if c.Delegate == nil {
		c.Delegate = map[string]any{}
	}
	if c.RuntimeConfig != nil {
		c.Delegate["runtimeConfig"] = c.RuntimeConfig
	}
	return c, nil
}

func readLease(path string) (*lease, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l := &lease{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		seen[key] = true
		switch key {
		case "FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK":
			for _, n := range strings.Split(val, ",") {
				if n == "" {
					continue
				}
				if n, err = network(n); err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, key, err)
				}
				l.networks = append(l.networks, n)
			}
		case "FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET":
			// The lease names the bridge's own address (10.42.0.1/24);
			// host-local wants the network (10.42.0.0/24).
			if val != "" {
				n, err := network(val)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, key, err)
				}
				l.subnets = append(l.subnets, n)
			}
		case "FLANNEL_MTU":
			if l.mtu, err = strconv.Atoi(val); err != nil {
				return nil, fmt.Errorf("%s: bad FLANNEL_MTU %q", path, val)
			}
		case "FLANNEL_IPMASQ":
			l.ipMasq = val == "true"
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(l.subnets) == 0 || len(l.networks) == 0 || !seen["FLANNEL_MTU"] || !seen["FLANNEL_IPMASQ"] {
		return nil, fmt.Errorf("%s is incomplete (need FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ)", path)
	}
	return l, nil
}

// network returns the network of a CIDR with host bits cleared.
func network(cidr string) (string, error) {
	_, n, err := net.ParseCIDR(strings.TrimSpace(cidr))
	if err != nil {
		return "", err
	}
	return n.String(), nil
}

// delegateConfig renders the bridge (or other delegate) configuration.
func delegateConfig(c *config, l *lease) (map[string]any, error) {
	d := c.Delegate
	if _, ok := d["name"]; ok {
		return nil, errors.New("delegate must not set name: it is taken from the network")
	}
	if _, ok := d["ipam"]; ok {
		return nil, errors.New("delegate must not set ipam: it is derived from the flannel lease")
	}
	d["name"] = c.Name
	if _, ok := d["type"]; !ok {
		d["type"] = "bridge"
	}
	if _, ok := d["type"].(string); !ok {
		return nil, errors.New("delegate type must be a string")
	}
	if _, ok := d["ipMasq"]; !ok {
		d["ipMasq"] = !l.ipMasq // masquerade in the bridge only when flannel does not
	}
	if _, ok := d["mtu"]; !ok {
		d["mtu"] = l.mtu
	}
	if d["type"] == "bridge" {
		if _, ok := d["isGateway"]; !ok {
			d["isGateway"] = true
		}
	}
	if c.CNIVersion != "" {
		d["cniVersion"] = c.CNIVersion
	}
	ipam := map[string]any{}
	for k, v := range c.IPAM {
		ipam[k] = v
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = "host-local"
	}
	ranges := [][]map[string]any{}
	for _, s := range l.subnets {
		ranges = append(ranges, []map[string]any{{"subnet": s}})
	}
	ipam["ranges"] = ranges
	routes := []any{}
	if r, ok := ipam["routes"].([]any); ok {
		routes = append(routes, r...)
	}
	for _, n := range l.networks {
		routes = append(routes, map[string]any{"dst": n})
	}
	ipam["routes"] = routes
	d["ipam"] = ipam
	return d, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	l, err := readLease(c.SubnetFile)
	if err != nil {
		return err
	}
	d, err := delegateConfig(c, l)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, args.ContainerID), raw, 0o600); err != nil {
		return err
	}
	res, err := invoke.DelegateAdd(context.TODO(), d["type"].(string), raw, nil)
	if err != nil {
		return fmt.Errorf("delegate add: %w", err)
	}
	return res.Print()
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	path := filepath.Join(c.DataDir, args.ContainerID)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // already gone: DEL must be idempotent
	}
	if err != nil {
		return err
	}
	var nc types.NetConf
	if err := json.Unmarshal(raw, &nc); err != nil {
		_ = os.Remove(path)
		return nil
	}
	if err := invoke.DelegateDel(context.TODO(), nc.Type, raw, nil); err != nil {
		return err
	}
	_ = os.Remove(path)
	return nil
}

func cmdCheck(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck},
		version.All, "CNI flannel plugin (devstack kit)")
}
