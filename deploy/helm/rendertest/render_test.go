package rendertest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../weir"
	plainDir = "../../kubernetes"
)

// object is one Kubernetes object, decoded strictly into its API type (an
// unknown or misspelt field fails the test).
type object struct {
	kind, name string
	obj        any
}

func (o object) key() string { return o.kind + "/" + o.name }

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode splits a YAML stream into objects (comment-only documents are skipped).
func decode(t *testing.T, where, stream string) []object {
	t.Helper()
	var out []object
	for i, doc := range docSep.Split(stream, -1) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s, document %d: %v", where, i, err)
		}
		if head.Kind == "" {
			continue
		}
		var obj any
		switch head.Kind {
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "Service":
			obj = &corev1.Service{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		default:
			t.Fatalf("%s, document %d: kind %s: this test knows StatefulSet, Service and PodDisruptionBudget only (extend it)", where, i, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s, %s %s: %v", where, head.Kind, head.Metadata.Name, err)
		}
		out = append(out, object{head.Kind, head.Metadata.Name, obj})
	}
	return out
}

// plain reads deploy/kubernetes's objects, in the files its
// kustomization.yaml lists.
func plain(t *testing.T) []object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(plainDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	var out []object
	for _, f := range k.Resources {
		b, err := os.ReadFile(filepath.Join(plainDir, f))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decode(t, f, string(b))...)
	}
	return out
}

// render renders the chart as `helm template NAME deploy/helm/weir --set ...` would.
func render(t *testing.T, name string, set map[string]any) []object {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, set, chartutil.ReleaseOptions{Name: name, Namespace: "weir", IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a value the templates name and values.yaml lacks is an error.
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for f := range files {
			if !yield(f) {
				return
			}
		}
	})
	var out []object
	for _, f := range names {
		if strings.HasSuffix(f, ".tpl") || strings.HasSuffix(f, "NOTES.txt") {
			continue
		}
		out = append(out, decode(t, f, files[f])...)
	}
	return out
}

func byKey(objs []object) map[string]object {
	m := map[string]object{}
	for _, o := range objs {
		m[o.key()] = o
	}
	return m
}

func keys(objs []object) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.key())
	}
	sort.Strings(ks)
	return ks
}

// subset reports whether every label of want is in got with its value.
func subset(want, got map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// labels checks the chart's labels and selectors against the plain
// object's (a superset: the chart adds the release's), and that the
// selectors pick the pods; then it clears them, since they are the one
// difference allowed.
func labels(t *testing.T, key string, plainObj, chartObj any, podLabels map[string]string) {
	t.Helper()
	pair := func(what string, p, c *map[string]string) {
		if !subset(*p, *c) {
			t.Errorf("%s: %s %v lacks the plain manifest's %v", key, what, *c, *p)
		}
		*p, *c = nil, nil
	}
	selects := func(what string, sel map[string]string) {
		if len(sel) == 0 || !subset(sel, podLabels) {
			t.Errorf("%s: %s %v does not select the pods (labels %v)", key, what, sel, podLabels)
		}
	}
	switch p := plainObj.(type) {
	case *appsv1.StatefulSet:
		c := chartObj.(*appsv1.StatefulSet)
		selects("selector", c.Spec.Selector.MatchLabels)
		pair("labels", &p.Labels, &c.Labels)
		pair("selector", &p.Spec.Selector.MatchLabels, &c.Spec.Selector.MatchLabels)
		pair("pod labels", &p.Spec.Template.Labels, &c.Spec.Template.Labels)
		if a, b := p.Spec.Template.Spec.Affinity, c.Spec.Template.Spec.Affinity; a != nil && b != nil && a.PodAntiAffinity != nil && b.PodAntiAffinity != nil {
			for i := range min(len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution), len(b.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)) {
				pa := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm.LabelSelector
				pb := b.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm.LabelSelector
				if pa != nil && pb != nil {
					selects("anti-affinity selector", pb.MatchLabels)
					pair("anti-affinity selector", &pa.MatchLabels, &pb.MatchLabels)
				}
			}
		}
	case *corev1.Service:
		c := chartObj.(*corev1.Service)
		selects("selector", c.Spec.Selector)
		pair("labels", &p.Labels, &c.Labels)
		pair("selector", &p.Spec.Selector, &c.Spec.Selector)
	case *policyv1.PodDisruptionBudget:
		c := chartObj.(*policyv1.PodDisruptionBudget)
		selects("selector", c.Spec.Selector.MatchLabels)
		pair("labels", &p.Labels, &c.Labels)
		pair("selector", &p.Spec.Selector.MatchLabels, &c.Spec.Selector.MatchLabels)
	}
}

func statefulSet(t *testing.T, objs []object) *appsv1.StatefulSet {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.obj.(*appsv1.StatefulSet); ok {
			return s
		}
	}
	t.Fatal("no StatefulSet")
	return nil
}

// TestChartRendersThePlainManifests: with its defaults, the chart makes
// deploy/kubernetes's objects, field for field but for labels.
func TestChartRendersThePlainManifests(t *testing.T) {
	want := plain(t)
	got := render(t, "weir", nil)
	if !slices.Equal(keys(want), keys(got)) {
		t.Fatalf("the chart renders %v, deploy/kubernetes has %v", keys(got), keys(want))
	}
	podLabels := statefulSet(t, got).Spec.Template.Labels
	gotBy := byKey(got)
	for _, p := range want {
		c := gotBy[p.key()]
		labels(t, p.key(), p.obj, c.obj, podLabels)
		if !reflect.DeepEqual(p.obj, c.obj) {
			pb, _ := yaml.Marshal(p.obj)
			cb, _ := yaml.Marshal(c.obj)
			t.Errorf("%s differs (labels aside):\n%s", p.key(), lineDiff(string(pb), string(cb)))
		}
	}
}

// lineDiff lists the lines only one side has ("-" plain, "+" chart).
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestChartValues: the values an operator sets reach every place that
// names them, and the chart makes no Secret (it reads the operator's).
func TestChartValues(t *testing.T) {
	got := render(t, "edge", map[string]any{
		"replicas":    5,
		"clusterName": "edge",
		"image":       map[string]any{"repository": "registry.example.com/weir", "tag": "v1.2.3"},
		"tls":         map[string]any{"secretName": "edge-certs"},
		"gossip":      map[string]any{"secretName": "edge-gossip"},
		"adminToken":  map[string]any{"secretName": "edge-admin", "key": "token"},
		"storage":     map[string]any{"size": "5Gi", "storageClassName": "fast"},
	})
	want := []string{"PodDisruptionBudget/edge", "Service/edge", "Service/edge-peers", "StatefulSet/edge"}
	if !slices.Equal(keys(got), want) {
		t.Fatalf("rendered %v, want %v (no Secret: the chart reads the operator's)", keys(got), want)
	}
	s := statefulSet(t, got)
	if *s.Spec.Replicas != 5 || s.Spec.ServiceName != "edge-peers" {
		t.Errorf("replicas %d, serviceName %q", *s.Spec.Replicas, s.Spec.ServiceName)
	}
	c := s.Spec.Template.Spec.Containers[0]
	// bootstrapExpect stays 3 whatever replicas says: it only matters for the first bootstrap.
	for _, arg := range []string{"--join=edge-peers", "--bootstrap-expect=3"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %s", c.Args, arg)
		}
	}
	if c.Image != "registry.example.com/weir:v1.2.3" {
		t.Errorf("image %q", c.Image)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["WEIR_CLUSTER_NAME"].Value != "edge" {
		t.Errorf("WEIR_CLUSTER_NAME %q", env["WEIR_CLUSTER_NAME"].Value)
	}
	if r := env["WEIR_ADMIN_TOKEN"].ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != "edge-admin" || r.SecretKeyRef.Key != "token" {
		t.Errorf("WEIR_ADMIN_TOKEN %+v", env["WEIR_ADMIN_TOKEN"])
	}
	secrets := map[string]string{}
	for _, v := range s.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	if fmt.Sprint(secrets) != "map[gossip-key:edge-gossip tls:edge-certs]" {
		t.Errorf("secret volumes %v", secrets)
	}
	pvc := s.Spec.VolumeClaimTemplates[0].Spec
	if pvc.Resources.Requests.Storage().String() != "5Gi" || pvc.StorageClassName == nil || *pvc.StorageClassName != "fast" {
		t.Errorf("volume claim %+v", pvc)
	}
}
