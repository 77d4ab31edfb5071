package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestDelegateFromLease(t *testing.T) {
	env := filepath.Join(t.TempDir(), "subnet.env")
	// What k3s's embedded flannel writes for a single node.
	lease := "FLANNEL_NETWORK=10.42.0.0/16\nFLANNEL_SUBNET=10.42.0.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	if err := os.WriteFile(env, []byte(lease), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel",
		"subnetFile":"` + env + `","delegate":{"hairpinMode":true,"forceAddress":true,"isDefaultGateway":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := readLease(c.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := delegateConfig(c, l)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(d)
	var got struct {
		Name, Type, CNIVersion string
		IPMasq                 bool `json:"ipMasq"`
		MTU                    int
		IsGateway              bool `json:"isGateway"`
		IPAM                   struct {
			Type   string
			Ranges [][]struct{ Subnet string }
			Routes []struct{ Dst string }
		}
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "cbr0" || got.Type != "bridge" || got.CNIVersion != "1.0.0" || got.IPMasq || got.MTU != 1450 || !got.IsGateway {
		t.Fatalf("delegate: %s", raw)
	}
	if got.IPAM.Type != "host-local" || got.IPAM.Ranges[0][0].Subnet != "10.42.0.0/24" || got.IPAM.Routes[0].Dst != "10.42.0.0/16" {
		t.Fatalf("ipam: %s", raw)
	}
}

func TestIncompleteLease(t *testing.T) {
	env := filepath.Join(t.TempDir(), "subnet.env")
	_ = os.WriteFile(env, []byte("FLANNEL_NETWORK=10.42.0.0/16\n"), 0o600)
	if _, err := readLease(env); err == nil {
		t.Fatal("want an error for a lease without subnet/MTU/ipmasq")
	}
}
