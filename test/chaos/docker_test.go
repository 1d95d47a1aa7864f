//go:build chaos

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// label marks every Docker object of a run; its value is the run id.
const label = "weir-chaos-run"

// docker runs the docker CLI (bounded to a minute) and returns its
// combined output.
func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// requireDocker skips the test when there is no Docker daemon at all, and
// fails it when the image is missing.
func requireDocker(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("chaos: no docker CLI on this machine; skipping")
	}
	if out, err := docker("info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("chaos: no Docker daemon (docker info: %s); skipping", out)
	}
	image := os.Getenv("WEIR_CHAOS_IMAGE")
	if image == "" {
		image = "weir:dev"
	}
	if _, err := docker("image", "inspect", "--format", "{{.Id}}", image); err != nil {
		t.Fatalf("chaos: image %s missing: run `make image` (or `make chaos`, which builds it)", image)
	}
	return image
}

// runID is this run's id: WEIR_CHAOS_RUN, else random.
func runID() string {
	if id := os.Getenv("WEIR_CHAOS_RUN"); id != "" {
		return id
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "weirchaos" + hex.EncodeToString(b) // letters and digits: also a Compose project name
}

// removeByLabel removes every container, network and volume labelled
// with run (containers first: they hold the others).
func removeByLabel(t testing.TB, key, run string) {
	filter := "label=" + key + "=" + run
	if ids, _ := docker("ps", "-aq", "--filter", filter); ids != "" {
		if out, err := docker(append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)...); err != nil {
			t.Logf("cleanup: %v %s", err, out)
		}
	}
	if ids, _ := docker("network", "ls", "-q", "--filter", filter); ids != "" {
		if out, err := docker(append([]string{"network", "rm"}, strings.Fields(ids)...)...); err != nil {
			t.Logf("cleanup: %v %s", err, out)
		}
	}
	if ids, _ := docker("volume", "ls", "-q", "--filter", filter); ids != "" {
		if out, err := docker(append([]string{"volume", "rm", "-f"}, strings.Fields(ids)...)...); err != nil {
			t.Logf("cleanup: %v %s", err, out)
		}
	}
}

// createNetwork makes a bridge network with a /24 of its own (fixed
// container IPs need a configured subnet), avoiding subnets in use by
// other networks or this host's interfaces. It returns the subnet's first
// three octets.
func createNetwork(t *testing.T, name, run string) string {
	t.Helper()
	var used []*net.IPNet
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				used = append(used, n)
			}
		}
	}
	var lastErr error
	for range 20 {
		b, _ := rand.Int(rand.Reader, big.NewInt(250))
		c, _ := rand.Int(rand.Reader, big.NewInt(250))
		prefix := fmt.Sprintf("10.%d.%d", 150+b.Int64()%100, c.Int64()+1)
		ip := net.ParseIP(prefix + ".1")
		clash := false
		for _, n := range used {
			if n.Contains(ip) {
				clash = true
			}
		}
		if clash {
			continue
		}
		_, err := docker("network", "create", "--driver", "bridge", "--label", label+"="+run,
			"--subnet", prefix+".0/24", name)
		if err == nil {
			return prefix
		}
		lastErr = err // most likely a subnet another network holds: try another
	}
	t.Fatalf("chaos: no free subnet for the network: %v", lastErr)
	return ""
}
