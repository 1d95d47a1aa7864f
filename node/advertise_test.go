package node

import "testing"

func TestConfigAdvertise(t *testing.T) {
	for adv, ok := range map[string]bool{
		"": true, "10.0.0.5": true, "fd00::2": true, "weir-0.weir-peers.default.svc": true, "n1": true,
		"n1:7000": false, "0.0.0.0": false, "::": false, "http://n1": false, "[fd00::2]": false,
	} {
		cfg := DefaultConfig("n1")
		cfg.DataDir = "/tmp/x"
		cfg.Advertise = adv
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("Advertise %q: Validate() = %v, want ok %v", adv, err, ok)
		}
	}
}
