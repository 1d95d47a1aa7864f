package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/weirlimit/weir/node"
)

// The deployment files (deploy/Dockerfile, deploy/compose.yaml and
// deploy/kubernetes/) run this binary with flags, variables, ports and
// probes that no test executes here (no cluster, and the compose file only
// in the chaos suite). These tests parse them and check each command line
// against the real command tree: every command, flag and WEIR_* variable
// exists and its value parses, every port is the one a listen flag names,
// and every probe asks what the node serves.

const deployDir = "../../deploy"

// invocation is a weir command line from a deployment file, with its
// environment (the image's ENV, then the file's own).
type invocation struct {
	where string // for messages
	argv  []string
	env   map[string]string
	own   []string // the variables the file itself sets: each must be read by a flag
}

// parse checks inv against the command tree and returns the command with
// its flags parsed and its variables bound, as run would before RunE.
func (inv invocation) parse(t testing.TB) *cobra.Command {
	t.Helper()
	getenv := func(k string) string { return inv.env[k] }
	root := (&cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: getenv, now: time.Now}).newRoot()
	cmd, rest, err := root.Find(inv.argv)
	if err != nil || cmd == root || !cmd.Runnable() || cmd.HasAvailableSubCommands() {
		t.Fatalf("%s: %q is not a weir command (%v)", inv.where, inv.argv, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: weir %s: %v", inv.where, cmd.Name(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Fatalf("%s: weir %s: %v", inv.where, cmd.Name(), err)
	}
	read := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if env := f.Annotations[envAnnotation]; env != nil {
			read[env[0]] = true
		}
	})
	for _, k := range inv.own {
		if strings.HasPrefix(k, "WEIR_") && !read[k] {
			t.Errorf("%s: $%s is read by no flag of weir %s", inv.where, k, cmd.Name())
		}
	}
	if err := bindEnv(cmd.Flags(), getenv); err != nil {
		t.Fatalf("%s: weir %s: %v", inv.where, cmd.Name(), err)
	}
	return cmd
}

func flagString(t *testing.T, cmd *cobra.Command, name string) string {
	t.Helper()
	f := cmd.Flags().Lookup(name)
	if f == nil {
		t.Fatalf("weir %s has no --%s", cmd.Name(), name)
	}
	return f.Value.String()
}

// flagPort is the port of the address flag name.
func flagPort(t *testing.T, cmd *cobra.Command, name string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(flagString(t, cmd, name))
	if err != nil {
		t.Fatalf("weir %s --%s: %v", cmd.Name(), name, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n == 0 {
		t.Fatalf("weir %s --%s %q: want a fixed port", cmd.Name(), name, p)
	}
	return n
}

// nodeConfig checks a `weir node` command line the way the command does
// before it starts a node (node.Config.Validate), and returns its
// listen ports by flag and the leave timeout.
func nodeConfig(t *testing.T, where string, cmd *cobra.Command) (ports map[string]int, leave time.Duration) {
	t.Helper()
	if cmd.Name() != "node" {
		t.Fatalf("%s runs weir %s, want weir node", where, cmd.Name())
	}
	cfg := node.DefaultConfig(flagString(t, cmd, "id"))
	cfg.DataDir = flagString(t, cmd, "data-dir")
	cfg.HTTPAddr, cfg.GRPCAddr = flagString(t, cmd, "http"), flagString(t, cmd, "grpc")
	cfg.RaftAddr, cfg.GossipAddr = flagString(t, cmd, "raft"), flagString(t, cmd, "gossip")
	cfg.Advertise = flagString(t, cmd, "advertise")
	var err error
	if cfg.LeaveTimeout, err = cmd.Flags().GetDuration("leave-timeout"); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	ports = map[string]int{}
	for _, f := range []string{"http", "grpc", "raft", "gossip"} {
		ports[f] = flagPort(t, cmd, f)
	}
	return ports, cfg.LeaveTimeout
}

// dockerfile is what the tests read from deploy/Dockerfile.
type dockerfile struct {
	env         map[string]string
	cmd         []string // ENTRYPOINT ["/weir"] stripped
	healthcheck []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{env: map[string]string{}}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		array := func(s string) []string {
			var out []string
			if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &out); err != nil {
				t.Fatalf("Dockerfile: %s %s: want a JSON array (exec form): %v", word, s, err)
			}
			return out
		}
		switch word {
		case "FROM":
			if strings.TrimSpace(rest) != "scratch" {
				t.Errorf("Dockerfile: FROM %s; nothing can be pulled, want scratch", rest)
			}
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.env[k] = v
			}
		case "ENTRYPOINT":
			if e := array(rest); !slices.Equal(e, []string{"/weir"}) {
				t.Errorf("Dockerfile: ENTRYPOINT %q, want [\"/weir\"]", e)
			}
		case "CMD":
			d.cmd = array(rest)
		case "HEALTHCHECK":
			_, c, ok := strings.Cut(rest, "CMD ")
			if !ok {
				t.Fatalf("Dockerfile: HEALTHCHECK %s: no CMD", rest)
			}
			d.healthcheck = array(c)
		case "USER":
			if u := strings.TrimSpace(rest); strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
				t.Errorf("Dockerfile: USER %s; want a non-root user", u)
			}
		}
	}
	if d.cmd == nil || d.healthcheck == nil {
		t.Fatal("Dockerfile: no CMD or HEALTHCHECK")
	}
	return d
}

// weirArgv strips the binary from a command that names it.
func weirArgv(t *testing.T, where string, argv []string) []string {
	t.Helper()
	if len(argv) == 0 || (argv[0] != "/weir" && argv[0] != "weir") {
		t.Fatalf("%s: %q does not run /weir", where, argv)
	}
	return argv[1:]
}

// checkHealthcheck checks a `weir health` command line against the node's
// gRPC port.
func checkHealthcheck(t *testing.T, where string, argv []string, env map[string]string, grpcPort int) {
	t.Helper()
	cmd := invocation{where: where, argv: argv, env: env}.parse(t)
	if cmd.Name() != "health" {
		t.Fatalf("%s: runs weir %s, want weir health", where, cmd.Name())
	}
	if p := flagPort(t, cmd, "addr"); p != grpcPort {
		t.Errorf("%s: weir health asks port %d; the node's gRPC listens on %d", where, p, grpcPort)
	}
}

func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	cmd := invocation{where: "Dockerfile CMD", argv: d.cmd, env: d.env, own: slices.Collect(maps.Keys(d.env))}.parse(t)
	ports, _ := nodeConfig(t, "Dockerfile CMD", cmd)
	checkHealthcheck(t, "Dockerfile HEALTHCHECK", weirArgv(t, "Dockerfile HEALTHCHECK", d.healthcheck), d.env, ports["grpc"])
	if d.env["WEIR_DATA_DIR"] != "/data" {
		t.Errorf("Dockerfile: WEIR_DATA_DIR %q, want /data (the volume)", d.env["WEIR_DATA_DIR"])
	}
}

// compose is the part of deploy/compose.yaml the test reads.
type compose struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Command         []string          `yaml:"command"`
		Environment     map[string]string `yaml:"environment"`
		Ports           []string          `yaml:"ports"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
		Healthcheck     struct {
			Test    []string `yaml:"test"`
			Disable bool     `yaml:"disable"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
	Networks map[string]any `yaml:"networks"`
}

// composeVar expands ${NAME:-default} to its default.
var composeVar = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

func TestComposeFile(t *testing.T) {
	d := readDockerfile(t)
	b, err := os.ReadFile(filepath.Join(deployDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	// What the issue asks for: three nodes on 127.0.0.1 at these ports, the
	// gateway on 8000, rules applied once the nodes are healthy.
	wantPublished := map[string][]string{
		"n1": {"127.0.0.1:8081:http", "127.0.0.1:9091:grpc"}, "n2": {"127.0.0.1:8082:http", "127.0.0.1:9092:grpc"},
		"n3": {"127.0.0.1:8083:http", "127.0.0.1:9093:grpc"}, "gateway": {"127.0.0.1:8000:listen"},
	}
	for _, name := range []string{"n1", "n2", "n3", "rules", "upstream", "gateway"} {
		svc, ok := c.Services[name]
		if !ok {
			t.Fatalf("compose.yaml: no service %s", name)
		}
		where := "compose.yaml " + name
		if composeVar.ReplaceAllString(svc.Image, "$1") != "weir:dev" {
			t.Errorf("%s: image %q, want weir:dev (what make image builds)", where, svc.Image)
		}
		env := map[string]string{}
		for k, v := range d.env {
			env[k] = v
		}
		for k, v := range svc.Environment {
			env[k] = v
		}
		cmd := invocation{where: where, argv: svc.Command, env: env, own: slices.Collect(maps.Keys(svc.Environment))}.parse(t)
		listen := map[string]int{}
		switch cmd.Name() {
		case "node":
			ports, leave := nodeConfig(t, where, cmd)
			listen = ports
			if flagString(t, cmd, "gossip-key-file") == "" {
				t.Errorf("%s: no --gossip-key-file: across containers the nodes would bind gossip and Raft to loopback", where)
			}
			if want := "/tls/node-" + name + ".pem"; flagString(t, cmd, "tls-cert") != want || flagString(t, cmd, "tls-ca") == "" {
				t.Errorf("%s: --tls-cert %q --tls-ca %q, want mutual TLS with %s", where, flagString(t, cmd, "tls-cert"), flagString(t, cmd, "tls-ca"), want)
			}
			if flagString(t, cmd, "id") != name || flagString(t, cmd, "advertise") != name {
				t.Errorf("%s: --id %s --advertise %s, want the service name", where, flagString(t, cmd, "id"), flagString(t, cmd, "advertise"))
			}
			if v, _ := cmd.Flags().GetInt("bootstrap-expect"); v != 3 {
				t.Errorf("%s: --bootstrap-expect %d, want 3", where, v)
			}
			if join := flagString(t, cmd, "join"); join != "[n1,n2,n3]" {
				t.Errorf("%s: --join %s, want every node by service name", where, join)
			}
			grace, err := time.ParseDuration(svc.StopGracePeriod)
			if err != nil || grace <= leave {
				t.Errorf("%s: stop_grace_period %q; want more than --leave-timeout %v", where, svc.StopGracePeriod, leave)
			}
			if svc.Healthcheck.Disable || len(svc.Healthcheck.Test) < 2 || svc.Healthcheck.Test[0] != "CMD" {
				t.Fatalf("%s: healthcheck %+v, want [CMD /weir health ...]", where, svc.Healthcheck)
			}
			checkHealthcheck(t, where+" healthcheck", weirArgv(t, where, svc.Healthcheck.Test[1:]), env, ports["grpc"])
		case "gateway":
			listen["listen"] = flagPort(t, cmd, "listen")
			for _, a := range strings.Split(strings.Trim(flagString(t, cmd, "cluster"), "[]"), ",") {
				host, port, err := net.SplitHostPort(a)
				if _, ok := c.Services[host]; err != nil || !ok || port != "9090" {
					t.Errorf("%s: --cluster %s: want nodes' gRPC addresses by service name", where, a)
				}
			}
			if !svc.Healthcheck.Disable {
				t.Errorf("%s: the image's health check asks a node's gRPC port; disable it", where)
			}
		default:
			if !svc.Healthcheck.Disable {
				t.Errorf("%s: the image's health check asks a node's gRPC port; disable it", where)
			}
		}
		var published []string
		for _, p := range svc.Ports {
			parts := strings.Split(composeVar.ReplaceAllString(p, "$1"), ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q, want 127.0.0.1:HOST:CONTAINER", where, p)
				continue
			}
			flag := ""
			for f, port := range listen {
				if strconv.Itoa(port) == parts[2] {
					flag = f
				}
			}
			if flag == "" {
				t.Errorf("%s: port %q publishes %s, where nothing listens", where, p, parts[2])
			}
			published = append(published, parts[0]+":"+parts[1]+":"+flag)
		}
		if !slices.Equal(published, wantPublished[name]) {
			t.Errorf("%s: publishes %q, want %q", where, published, wantPublished[name])
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if c.Services["rules"].DependsOn[n].Condition != "service_healthy" {
			t.Errorf("compose.yaml rules: must wait for %s to be healthy", n)
		}
	}
	if c.Services["gateway"].DependsOn["rules"].Condition != "service_completed_successfully" {
		t.Errorf("compose.yaml gateway: must start after the rules are applied")
	}
}

// The parts of Kubernetes objects the test reads.
type (
	k8sObject struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec yaml.Node `yaml:"spec"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"`
		} `yaml:"httpGet"`
		Exec *struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
		GRPC *struct {
			Port int `yaml:"port"`
		} `yaml:"grpc"`
	}
	k8sContainer struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
				SecretKeyRef any `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		StartupProbe   *k8sProbe `yaml:"startupProbe"`
	}
	k8sStatefulSet struct {
		ServiceName         string `yaml:"serviceName"`
		Replicas            int    `yaml:"replicas"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		Selector            struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	}
	k8sService struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string    `yaml:"name"`
			Port       int       `yaml:"port"`
			TargetPort yaml.Node `yaml:"targetPort"`
			Protocol   string    `yaml:"protocol"`
		} `yaml:"ports"`
	}
	k8sPDB struct {
		MaxUnavailable yaml.Node `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
)

// fieldRefSample stands in for what Kubernetes fills in.
var fieldRefSample = map[string]string{
	"metadata.name": "weir-0", "metadata.namespace": "default", "status.podIP": "10.244.1.7",
}

// k8sVar is Kubernetes' $(NAME) in args.
var k8sVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// matches reports whether labels has every pair of selector.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestKubernetesManifests(t *testing.T) {
	d := readDockerfile(t)
	dir := filepath.Join(deployDir, "kubernetes")
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	objs := map[string]map[string]k8sObject{} // kind -> name -> object
	for _, file := range kust.Resources {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", file, err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var o k8sObject
			if err := dec.Decode(&o); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if objs[o.Kind] == nil {
				objs[o.Kind] = map[string]k8sObject{}
			}
			objs[o.Kind][o.Metadata.Name] = o
		}
		f.Close()
	}
	if len(objs["StatefulSet"]) != 1 || len(objs["PodDisruptionBudget"]) != 1 || len(objs["Service"]) != 2 {
		t.Fatalf("want one StatefulSet, one PodDisruptionBudget and two Services; have %v", objs)
	}
	var ss k8sStatefulSet
	var ssName string
	for name, o := range objs["StatefulSet"] {
		ssName = name
		if err := o.Spec.Decode(&ss); err != nil {
			t.Fatal(err)
		}
	}
	where := "StatefulSet " + ssName
	pod := ss.Template.Metadata.Labels
	if ss.Replicas != 3 || ss.PodManagementPolicy != "Parallel" || !matches(ss.Selector.MatchLabels, pod) {
		t.Errorf("%s: replicas %d, podManagementPolicy %q, selector %v; want 3, Parallel, matching %v",
			where, ss.Replicas, ss.PodManagementPolicy, ss.Selector.MatchLabels, pod)
	}
	if len(ss.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container", where)
	}
	ct := ss.Template.Spec.Containers[0]
	env := map[string]string{}
	for k, v := range d.env {
		env[k] = v
	}
	var own []string
	for _, e := range ct.Env {
		own = append(own, e.Name)
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, ok := fieldRefSample[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("%s: env %s: no sample for fieldRef %s", where, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			env[e.Name] = "secret"
		}
	}
	argv := ct.Args
	if len(ct.Command) > 0 {
		argv = append(weirArgv(t, where, ct.Command), ct.Args...)
	}
	var expanded []string
	for _, a := range argv {
		expanded = append(expanded, k8sVar.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				t.Errorf("%s: %s names no variable of the container", where, m)
			}
			return v
		}))
	}
	cmd := invocation{where: where, argv: expanded, env: env, own: own}.parse(t)
	ports, leave := nodeConfig(t, where, cmd)
	if flagString(t, cmd, "gossip-key-file") == "" {
		t.Errorf("%s: no --gossip-key-file: across pods the nodes would bind gossip and Raft to loopback", where)
	}
	if c := flagString(t, cmd, "tls-cert"); !strings.Contains(c, "$(POD_NAME)") || flagString(t, cmd, "tls-ca") == "" {
		t.Errorf("%s: --tls-cert %q --tls-ca %q, want mutual TLS with each pod's node certificate", where, c, flagString(t, cmd, "tls-ca"))
	}
	if v, _ := cmd.Flags().GetInt("bootstrap-expect"); v != ss.Replicas {
		t.Errorf("%s: --bootstrap-expect %d with %d replicas", where, v, ss.Replicas)
	}
	if g := time.Duration(ss.Template.Spec.TerminationGracePeriodSeconds) * time.Second; g <= leave {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want more than --leave-timeout %v", where, g, leave)
	}
	if flagString(t, cmd, "id") != fieldRefSample["metadata.name"] {
		t.Errorf("%s: --id is not the pod name (stable across restarts)", where)
	}

	// Container ports: exactly the listen flags' ports, gossip on TCP and UDP.
	want := map[string]string{"http": "http/TCP", "grpc": "grpc/TCP", "raft": "raft/TCP", "gossip-tcp": "gossip/TCP", "gossip-udp": "gossip/UDP"}
	byName := map[string]int{}
	protoOf := map[string]string{}
	for _, p := range ct.Ports {
		w, ok := want[p.Name]
		flag, proto, _ := strings.Cut(w, "/")
		if !ok || p.Protocol != proto || ports[flag] != p.ContainerPort {
			t.Errorf("%s: container port %s %d/%s; want one of %v at the listen flags' ports %v", where, p.Name, p.ContainerPort, p.Protocol, want, ports)
		}
		byName[p.Name], protoOf[p.Name] = p.ContainerPort, p.Protocol
	}
	if len(byName) != len(want) {
		t.Errorf("%s: container ports %v, want %v", where, byName, want)
	}
	portOf := func(n yaml.Node) (int, string) {
		if v, err := strconv.Atoi(n.Value); err == nil {
			for name, p := range byName {
				if p == v {
					return v, name
				}
			}
			return v, ""
		}
		return byName[n.Value], n.Value
	}
	// Probes: readiness on /readyz, liveness on /healthz, on the HTTP port.
	for _, pr := range []struct {
		name  string
		probe *k8sProbe
		path  string
	}{{"readinessProbe", ct.ReadinessProbe, "/readyz"}, {"livenessProbe", ct.LivenessProbe, "/healthz"}, {"startupProbe", ct.StartupProbe, ""}} {
		switch p := pr.probe; {
		case p == nil && pr.path == "":
		case p == nil:
			t.Errorf("%s: no %s", where, pr.name)
		case p.HTTPGet != nil:
			if port, _ := portOf(p.HTTPGet.Port); port != ports["http"] || (pr.path != "" && p.HTTPGet.Path != pr.path) ||
				(p.HTTPGet.Path != "/readyz" && p.HTTPGet.Path != "/healthz") {
				t.Errorf("%s: %s GET %s on port %v; want %s on the HTTP port %d", where, pr.name, p.HTTPGet.Path, p.HTTPGet.Port.Value, pr.path, ports["http"])
			}
		case p.Exec != nil:
			checkHealthcheck(t, where+" "+pr.name, weirArgv(t, where, p.Exec.Command), env, ports["grpc"])
		case p.GRPC != nil:
			if p.GRPC.Port != ports["grpc"] {
				t.Errorf("%s: %s asks gRPC health on %d; the node listens on %d", where, pr.name, p.GRPC.Port, ports["grpc"])
			}
		default:
			t.Errorf("%s: %s: no httpGet, exec or grpc", where, pr.name)
		}
	}

	// Services: select the pods, target their ports; the StatefulSet's is
	// headless, lists pods before they are ready and is what --join names.
	for name, o := range objs["Service"] {
		var svc k8sService
		if err := o.Spec.Decode(&svc); err != nil {
			t.Fatal(err)
		}
		if !matches(svc.Selector, pod) {
			t.Errorf("Service %s: selector %v does not select the pods %v", name, svc.Selector, pod)
		}
		for _, p := range svc.Ports {
			port, pname := portOf(p.TargetPort)
			if pname == "" || port == 0 || protoOf[pname] != p.Protocol {
				t.Errorf("Service %s: port %s targets %s/%s, which the pods do not listen on", name, p.Name, p.TargetPort.Value, p.Protocol)
			}
		}
		if name == ss.ServiceName {
			if svc.ClusterIP != "None" || !svc.PublishNotReadyAddresses {
				t.Errorf("Service %s (the StatefulSet's): want clusterIP None and publishNotReadyAddresses", name)
			}
		}
	}
	if _, ok := objs["Service"][ss.ServiceName]; !ok {
		t.Errorf("%s: serviceName %s is no Service here", where, ss.ServiceName)
	}
	for _, j := range strings.Split(strings.Trim(flagString(t, cmd, "join"), "[]"), ",") {
		host := j
		if h, _, err := net.SplitHostPort(j); err == nil {
			host = h
		}
		if host != ss.ServiceName && !strings.HasPrefix(host, ss.ServiceName+".") {
			t.Errorf("%s: --join %s; want the headless Service %s", where, j, ss.ServiceName)
		}
	}
	for name, o := range objs["PodDisruptionBudget"] {
		var pdb k8sPDB
		if err := o.Spec.Decode(&pdb); err != nil {
			t.Fatal(err)
		}
		if pdb.MaxUnavailable.Value != "1" || !matches(pdb.Selector.MatchLabels, pod) {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %q selector %v; want 1 of the pods %v", name, pdb.MaxUnavailable.Value, pdb.Selector.MatchLabels, pod)
		}
	}
}

// The checks above must catch what they are for: a command or flag the
// binary does not know, a bad value, a variable no flag reads.
func TestDeployChecksCatchMistakes(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		env  map[string]string
		want string
	}{
		{[]string{"node", "--no-such-flag"}, nil, "unknown flag"},
		{[]string{"node", "--leave-timeout", "ten"}, nil, "invalid argument"},
		{[]string{"nodes"}, nil, "not a weir command"},
		{[]string{"node"}, map[string]string{"WEIR_LEAVE_TIMOUT": "1s"}, "read by no flag"},
		{[]string{"node"}, map[string]string{"WEIR_LEAVE_TIMEOUT": "soon"}, "invalid value"},
	} {
		r := &recorder{TB: t}
		func() {
			defer func() {
				if p := recover(); p != nil && p != errFatal {
					panic(p)
				}
			}()
			invocation{where: "x", argv: tc.argv, env: tc.env, own: slices.Collect(maps.Keys(tc.env))}.parse(r)
		}()
		if got := strings.Join(r.msgs, "; "); !strings.Contains(got, tc.want) {
			t.Errorf("%q %v: got %q, want a failure with %q", tc.argv, tc.env, got, tc.want)
		}
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	msgs []string
}

var errFatal = fmt.Errorf("recorder: fatal")

func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(errFatal)
}
