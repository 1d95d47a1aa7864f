package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

// nginxBinary finds Debian's nginx (in /usr/sbin, often not on a user's PATH).
func nginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Skip("nginx not installed (apt-get install -y nginx; .ci/run installs it): skipping the nginx forward-auth test")
	return ""
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestNginxForwardAuth runs a real nginx on loopback with the shipped
// deploy/nginx/weir.conf (addresses substituted) in front of an upstream,
// asking a 3-node Weir cluster: 200 with the rate-limit fields until the
// limit, then 429 with Retry-After and the fields, and the upstream never
// sees a denied request.
func TestNginxForwardAuth(t *testing.T) {
	bin := nginxBinary(t)
	conf, err := os.ReadFile("../deploy/nginx/weir.conf")
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 3)
	c.ApplyRules(`rules:
  - id: api.per-ip
    match: {route: /v1/*}
    key: ip
    rate: 3
    period: 1h
`)
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
	}))
	defer up.Close()

	listen := freeLoopbackAddr(t)
	var servers strings.Builder
	for _, n := range c.Live() {
		fmt.Fprintf(&servers, "server %s;\n    ", n.HTTPAddr())
	}
	site := strings.NewReplacer(
		"server 127.0.0.1:8080;", servers.String(),
		"server 127.0.0.1:9000;", "server "+strings.TrimPrefix(up.URL, "http://")+";",
		"listen 127.0.0.1:8000;", "listen "+listen+";",
	).Replace(string(conf))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "weir.conf"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n"
	}
	main := user + `worker_processes 1;
pid ` + filepath.Join(dir, "nginx.pid") + `;
error_log ` + filepath.Join(dir, "error.log") + ` warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path ` + filepath.Join(dir, "body") + `;
    proxy_temp_path ` + filepath.Join(dir, "proxy") + `;
    fastcgi_temp_path ` + filepath.Join(dir, "fastcgi") + `;
    uwsgi_temp_path ` + filepath.Join(dir, "uwsgi") + `;
    scgi_temp_path ` + filepath.Join(dir, "scgi") + `;
    include ` + filepath.Join(dir, "weir.conf") + `;
}
`
	mainPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(mainPath, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", mainPath).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", mainPath, "-g", "daemon off;")
	// Output goes to error.log; nginx's workers must not hold the test's
	// stdout.
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, cmd, "nginx", filepath.Join(dir, "error.log"))
	get := func(path string) (*http.Response, string, error) {
		resp, err := http.Get("http://" + listen + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	testwait.For(t, 10*time.Second, "nginx to serve", func() error {
		_, _, err := get("/health")
		return err
	})
	hits.Store(0)

	checkForwardAuthLimit(t, get, &hits, "rate limited", func(http.Header) error { return nil })
	// A route no rule matches passes without fields.
	resp, _, err := get("/health")
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("/health: %v %v", err, resp)
	}
}
