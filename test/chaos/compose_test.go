//go:build chaos

package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
)

// composeProjectLabel is the label Compose puts on what it creates.
const composeProjectLabel = "com.docker.compose.project"

// TestCompose brings deploy/compose.yaml up as the README says (its ports
// moved to free ones through the variables the file names, under a
// project of its own) and checks that the three nodes and the gateway
// answer: a check through every node, the example rules applied, the
// gateway counting down to 429 on /v1/login. Then it takes it down with
// its volumes.
func TestCompose(t *testing.T) {
	image := requireDocker(t)
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("chaos: no docker-compose on this machine; skipping the compose check")
	}
	project := runID() + "compose"
	env := []string{"WEIR_IMAGE=" + image}
	ports := map[string]string{}
	for _, v := range []string{"WEIR_N1_HTTP", "WEIR_N2_HTTP", "WEIR_N3_HTTP", "WEIR_N1_GRPC", "WEIR_N2_GRPC", "WEIR_N3_GRPC", "WEIR_GATEWAY_PORT"} {
		ports[v] = freePort(t)
		env = append(env, v+"="+ports[v])
	}
	compose := func(d time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-p", project, "-f", "../../deploy/compose.yaml"}, args...)...)
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := compose(time.Minute, "logs", "--tail", "30")
			t.Logf("--- compose logs:\n%s", out)
		}
		if out, err := compose(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "30"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
		removeByLabel(t, composeProjectLabel, project)
	})
	start := time.Now()
	if out, err := compose(3*time.Minute, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	t.Logf("docker-compose up -d returned after %v", time.Since(start).Round(time.Millisecond))
	hc := &http.Client{Timeout: 2 * time.Second}
	// The nodes speak HTTPS and want a certificate: the admin's, copied out
	// of the tls volume as the README does.
	var admin *http.Client
	waitFor(t, time.Minute, "the admin certificate", func() error {
		id, err := compose(time.Minute, "ps", "-q", "n1")
		if err != nil || strings.TrimSpace(id) == "" {
			return fmt.Errorf("no n1 container: %v %s", err, id)
		}
		dir := t.TempDir()
		if out, err := docker("cp", strings.TrimSpace(id)+":/tls/.", dir); err != nil {
			return fmt.Errorf("docker cp: %v %s", err, out)
		}
		admin, err = httpsClient(dir, "admin-compose")
		return err
	})
	for _, v := range []string{"WEIR_N1_HTTP", "WEIR_N2_HTTP", "WEIR_N3_HTTP"} {
		url := "https://127.0.0.1:" + ports[v] + "/v1/limits/check"
		waitFor(t, 30*time.Second, "a check through "+v, func() error {
			resp, err := admin.Post(url, "application/json", strings.NewReader(`{"key":"apikey:ak_compose","rule":"orders.write"}`))
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true`) {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
	}
	// Without a certificate a node answers nothing: plain HTTP gets no
	// answer over TLS, and HTTPS without a client certificate a 401.
	if resp, err := hc.Get("http://127.0.0.1:" + ports["WEIR_N1_HTTP"] + "/v1/rules"); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		t.Errorf("plain HTTP to n1 answered 200: TLS is not on")
	}
	gw := "http://127.0.0.1:" + ports["WEIR_GATEWAY_PORT"] + "/v1/login"
	codes := ""
	waitFor(t, 30*time.Second, "the gateway to count down to 429", func() error {
		resp, err := hc.Post(gw, "application/json", nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes += fmt.Sprint(resp.StatusCode, " ")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			return fmt.Errorf("statuses so far: %s", codes)
		}
		return nil
	})
	// login.ip allows 5 per minute per client IP and fails closed (503) when
	// its 5 ms timeout passes on a busy machine: at most five 200s, then 429.
	if ok := strings.Count(codes, "200"); ok == 0 || ok > 5 {
		t.Errorf("gateway /v1/login answered %s; want at most five 200 (login.ip: 5 per minute) then 429", codes)
	}
	// Live gossip key rotation from the host with the admin certificate, as
	// the compose file says (the node sees Docker's gateway address, not
	// loopback): install reaches all three members.
	key := `{"key":"` + peerauth.EncodeKey(peerauth.GenerateKey()) + `"}`
	resp, err := admin.Post("https://127.0.0.1:"+ports["WEIR_N1_HTTP"]+"/v1/keyring/install", "application/json", strings.NewReader(key))
	if err != nil {
		t.Fatalf("keyring install with the admin certificate: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Count(string(body), `"node":"n`) != 3 {
		t.Errorf("keyring install with the admin certificate: %d %s; want 200 from n1, n2 and n3", resp.StatusCode, body)
	}
	t.Logf("compose: checks through n1, n2, n3 and the gateway (%s) after %v", strings.TrimSpace(codes), time.Since(start).Round(time.Millisecond))
}

// httpsClient presents dir/<name>.pem and trusts dir/ca.pem.
func httpsClient(dir, name string) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.pem: no certificate", dir)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}}
	return &http.Client{Timeout: 2 * time.Second, Transport: tr}, nil
}

// freePort returns a port free on 127.0.0.1 now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// waitFor polls f every 200 ms until it returns nil or d passes.
func waitFor(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
	}
}
