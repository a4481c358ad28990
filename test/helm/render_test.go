// Package helm tests the chart in charts/index-apiserver with the helm binary
// `make test-chart` builds (hack/lib/helm.sh; $HELM): helm lint, the rendered
// objects compared with what kustomize renders from artifacts/ for the same
// settings (the chart must not drift from the base), a server-side dry run of
// every combination against a real kube-apiserver, and an install into a
// running local control plane whose APIService, RBAC and CRD then serve a
// real index-apiserver process.
package helm

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	release   = "index-apiserver"
	namespace = "index-apiserver"
	// serviceDNS is the name the aggregator verifies the certificate for.
	serviceDNS = "index-apiserver.index-apiserver.svc"
)

var (
	root      = mustAbs("../..")
	chartDir  = filepath.Join(root, "charts", "index-apiserver")
	artifacts = filepath.Join(root, "artifacts")
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

// helmBinary is $HELM (make test-chart builds _output/bin/helm and sets it).
// Without it the tests skip, so `go test ./...` works anywhere.
func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HELM")
	if p == "" {
		t.Skip("HELM is not set: `make test-chart` builds helm and runs these tests")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("HELM=%s: %v (build it with hack/lib/helm.sh)", p, err)
	}
	return p
}

// switches are the chart's on/off choices; every combination is tested.
type switches struct {
	cert       string // certificate.source
	proxy      bool   // clusterProxy.enabled (with its example binding)
	monitoring bool   // monitoring.enabled (with the metrics-reader binding)
	examples   bool   // exampleIndexPolicies
	pdb        bool   // podDisruptionBudget.enabled
}

func (s switches) String() string {
	return fmt.Sprintf("cert=%s,proxy=%t,monitoring=%t,examples=%t,pdb=%t", s.cert, s.proxy, s.monitoring, s.examples, s.pdb)
}

func (s switches) helmArgs() []string {
	return []string{
		"--set", "certificate.source=" + s.cert,
		"--set", fmt.Sprintf("clusterProxy.enabled=%t", s.proxy),
		"--set", fmt.Sprintf("clusterProxy.exampleBinding.enabled=%t", s.proxy),
		"--set", fmt.Sprintf("monitoring.enabled=%t", s.monitoring),
		"--set", fmt.Sprintf("monitoring.metricsReaderBinding.enabled=%t", s.monitoring),
		"--set", fmt.Sprintf("exampleIndexPolicies=%t", s.examples),
		"--set", fmt.Sprintf("podDisruptionBudget.enabled=%t", s.pdb),
	}
}

// defaults are the chart's default values.
var defaults = switches{cert: "selfSigned", examples: true, pdb: true}

func allSwitches() []switches {
	var out []switches
	for _, cert := range []string{"selfSigned", "certManager", "secret"} {
		for i := 0; i < 16; i++ {
			out = append(out, switches{cert: cert, proxy: i&1 != 0, monitoring: i&2 != 0, examples: i&4 != 0, pdb: i&8 != 0})
		}
	}
	return out
}

func run(t *testing.T, stdin []byte, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// rendered caches helmTemplate's output by arguments: the dry run applies
// what the comparisons checked, without rendering it again.
var rendered sync.Map

// helmTemplate renders the chart (CRDs included) and returns its manifest.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	k := strings.Join(args, "\x00")
	if b, ok := rendered.Load(k); ok {
		return b.([]byte)
	}
	b := run(t, nil, helmBinary(t), append([]string{"template", release, chartDir, "--namespace", namespace, "--include-crds"}, args...)...)
	rendered.Store(k, b)
	return b
}

type objects map[string]*unstructured.Unstructured

func key(u *unstructured.Unstructured) string {
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

func decode(t *testing.T, y []byte) objects {
	t.Helper()
	objs := objects{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(o.Object) == 0 {
			continue
		}
		if objs[key(&o)] != nil {
			t.Fatalf("%s rendered twice", key(&o))
		}
		objs[key(&o)] = &o
	}
	return objs
}

func (o objects) keys() []string {
	var out []string
	for k := range o {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kustomize renders a kustomization made of the base, the cert-manager
// resources and the components the switches name, plus extra (more
// kustomization fields), the way docs/deploy.md tells users to combine them.
func kustomize(t *testing.T, s switches, extra string) objects {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(artifacts, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(".") + "\n"
	if s.cert == "certManager" {
		k += "  - " + rel("cert-manager") + "\n"
	}
	k += "components: []\n"
	var comps []string
	if s.proxy {
		comps = append(comps, rel("cluster-proxy"))
	}
	if s.monitoring {
		comps = append(comps, rel("monitoring"))
	}
	if len(comps) > 0 {
		k = strings.Replace(k, "components: []\n", "components:\n  - "+strings.Join(comps, "\n  - ")+"\n", 1)
	}
	k += extra
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of\n%s: %v", k, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, y)
}

// readFile decodes a manifest of artifacts/.
func readFile(t *testing.T, p string) objects {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(artifacts, p))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

// helmLabels are the labels the chart adds to its own objects
// (templates/_helpers.tpl index-apiserver.helmLabels), and the only
// difference from the base's labels.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// expected turns what kustomize renders into what the chart must render for
// the same switches. Every difference between the two is made here, on
// purpose:
//   - no Namespace: a chart installs into a namespace (docs/deploy.md creates
//     it with the Pod Security labels of artifacts/namespace.yaml);
//   - the examples, the PDB: dropped when switched off;
//   - the APIService's cert-manager.io/inject-ca-from: only with
//     cert-manager; with the generated certificate the APIService has its CA
//     as caBundle and the chart adds the Secret (checked by
//     checkSelfSignedCertificate);
//   - the example bindings the components ship but do not apply are applied
//     by the chart with their switch.
func expected(t *testing.T, s switches, k, chart objects) objects {
	t.Helper()
	for key, u := range k {
		switch {
		case u.GetKind() == "Namespace",
			u.GetKind() == "IndexPolicy" && !s.examples,
			u.GetKind() == "PodDisruptionBudget" && !s.pdb:
			delete(k, key)
		case u.GetKind() == "APIService" && s.cert != "certManager":
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations", "cert-manager.io/inject-ca-from")
			if len(u.GetAnnotations()) == 0 {
				unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
			}
		}
	}
	if s.cert == "selfSigned" {
		secret := chart["Secret/"+namespace+"/index-apiserver-serving"]
		if secret == nil {
			t.Fatalf("no Secret index-apiserver-serving in %v", chart.keys())
		}
		ca := checkSelfSignedCertificate(t, secret)
		k[key(secret)] = secret
		for _, u := range k {
			if u.GetKind() == "APIService" {
				if err := unstructured.SetNestedField(u.Object, ca, "spec", "caBundle"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	add := func(o objects) {
		for key, u := range o {
			k[key] = u
		}
	}
	if s.proxy {
		add(readFile(t, "cluster-proxy/examples/spark-clusterrolebinding.yaml"))
	}
	if s.monitoring {
		add(readFile(t, "monitoring/examples/prometheus-clusterrolebinding.yaml"))
	}
	return k
}

// withoutHelmLabels drops helmLabels from every object (and checks they are
// there on the chart's own objects).
func withoutHelmLabels(t *testing.T, objs objects) objects {
	t.Helper()
	for k, u := range objs {
		l := u.GetLabels()
		own := u.GetKind() != "IndexPolicy" && u.GetKind() != "CustomResourceDefinition"
		for _, h := range helmLabels {
			if _, ok := l[h]; !ok && own {
				t.Errorf("%s lacks the label %s", k, h)
			}
			delete(l, h)
		}
		if len(l) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "labels")
		} else {
			u.SetLabels(l)
		}
	}
	return objs
}

func compare(t *testing.T, want, got objects) {
	t.Helper()
	for _, k := range want.keys() {
		if got[k] == nil {
			t.Errorf("the chart does not render %s", k)
			continue
		}
		if d := cmp.Diff(want[k].Object, got[k].Object); d != "" {
			t.Errorf("%s differs from kustomize's (-kustomize +chart):\n%s", k, d)
		}
	}
	for _, k := range got.keys() {
		if want[k] == nil {
			t.Errorf("the chart renders %s, which kustomize does not", k)
		}
	}
}

// checkSelfSignedCertificate: the generated Secret is a kubernetes.io/tls
// Secret whose key pair matches and whose certificate its ca.crt signs for
// the Service's DNS name; it returns ca.crt (base64).
func checkSelfSignedCertificate(t *testing.T, secret *unstructured.Unstructured) string {
	t.Helper()
	if typ, _, _ := unstructured.NestedString(secret.Object, "type"); typ != "kubernetes.io/tls" {
		t.Errorf("Secret type %q, want kubernetes.io/tls", typ)
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	dec := func(k string) []byte {
		b, err := base64.StdEncoding.DecodeString(data[k])
		if err != nil || len(b) == 0 {
			t.Fatalf("Secret data %s: %v (%d bytes)", k, err, len(b))
		}
		return b
	}
	caPEM, certPEM, keyPEM := dec("ca.crt"), dec("tls.crt"), dec("tls.key")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("tls.crt and tls.key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: serviceDNS, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("tls.crt does not verify against ca.crt for %s: %v", serviceDNS, err)
	}
	if b, _ := pem.Decode(caPEM); b == nil {
		t.Error("ca.crt is not PEM")
	}
	return data["ca.crt"]
}

// TestLint: helm lint --strict passes for the defaults and every combination
// of the switches.
func TestLint(t *testing.T) {
	helm := helmBinary(t)
	run(t, nil, helm, "lint", "--strict", chartDir, "--namespace", namespace)
	for _, s := range allSwitches() {
		run(t, nil, helm, append([]string{"lint", "--strict", chartDir, "--namespace", namespace}, s.helmArgs()...)...)
	}
}

// TestDefaultsMatchKustomize: `helm template` with the default values renders
// what `kubectl kustomize artifacts/` does, plus the generated certificate.
func TestDefaultsMatchKustomize(t *testing.T) {
	chart := decode(t, helmTemplate(t))
	want := expected(t, defaults, kustomize(t, defaults, ""), chart)
	compare(t, want, withoutHelmLabels(t, chart))
}

// TestSwitchesMatchKustomize: every combination of the switches renders
// what the base with the matching components renders.
func TestSwitchesMatchKustomize(t *testing.T) {
	helmBinary(t)
	for _, s := range allSwitches() {
		t.Run(s.String(), func(t *testing.T) {
			chart := decode(t, helmTemplate(t, s.helmArgs()...))
			want := expected(t, s, kustomize(t, s, ""), chart)
			compare(t, want, withoutHelmLabels(t, chart))
		})
	}
}

// settingsValues sets every value that is not a switch; settingsKustomize is
// how a kustomize user writes the same.
const settingsValues = `
replicas: 3
goawayChance: 0.002
image:
  repository: registry.example.com/platform/index-apiserver
  tag: v1.2.3
goMemLimit: 900MiB
resources:
  requests: {cpu: 500m, memory: 1Gi}
  # Helm merges maps with the defaults: null drops the default CPU limit.
  limits: {cpu: null, memory: 2Gi}
nodeSelector:
  node-role.kubernetes.io/infra: ""
tolerations:
  - {key: dedicated, operator: Equal, value: infra, effect: NoSchedule}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: index-apiserver}
podDisruptionBudget:
  minAvailable: 2
certificate:
  source: secret
  secretName: my-serving-cert
  caBundle: Y2EK
`

const settingsKustomize = `
replicas:
  - name: index-apiserver
    count: 3
images:
  - name: index-apiserver
    newName: registry.example.com/platform/index-apiserver
    newTag: v1.2.3
patches:
  - target: {kind: Deployment, name: index-apiserver}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/args/4
        value: --goaway-chance=0.002
      - op: replace
        path: /spec/template/spec/containers/0/env/1
        value: {name: GOMEMLIMIT, value: 900MiB}
      - op: replace
        path: /spec/template/spec/containers/0/resources
        value:
          requests: {cpu: 500m, memory: 1Gi}
          limits: {memory: 2Gi}
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {node-role.kubernetes.io/infra: ""}
      - op: add
        path: /spec/template/spec/tolerations
        value: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
      - op: replace
        path: /spec/template/spec/affinity
        value:
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              - topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels: {app.kubernetes.io/name: index-apiserver}
      - op: replace
        path: /spec/template/spec/volumes/0/secret/secretName
        value: my-serving-cert
  - target: {kind: PodDisruptionBudget, name: index-apiserver}
    patch: |-
      - op: replace
        path: /spec/minAvailable
        value: 2
  - target: {kind: APIService}
    patch: |-
      - op: add
        path: /spec/caBundle
        value: Y2EK
`

// TestSettingsMatchKustomize: replicas, --goaway-chance, image, GOMEMLIMIT, resources, node
// selection, tolerations, affinity, the PDB and an existing Secret land where
// a kustomize user patches them.
func TestSettingsMatchKustomize(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(settingsValues), 0o644); err != nil {
		t.Fatal(err)
	}
	s := switches{cert: "secret", examples: true, pdb: true}
	chart := decode(t, helmTemplate(t, "-f", values))
	want := expected(t, s, kustomize(t, s, settingsKustomize), chart)
	compare(t, want, withoutHelmLabels(t, chart))
}

// TestPackagedChart: `helm package` resolves the chart's links into
// artifacts/ (CRD, dashboard, rules, example policies), and the packaged
// chart renders what the chart directory renders.
func TestPackagedChart(t *testing.T) {
	helm := helmBinary(t)
	dir := t.TempDir()
	run(t, nil, helm, "package", chartDir, "--destination", dir)
	tgz, err := filepath.Glob(filepath.Join(dir, "index-apiserver-*.tgz"))
	if err != nil || len(tgz) != 1 {
		t.Fatalf("helm package wrote %v (%v)", tgz, err)
	}
	// The generated certificate differs between renders: use cert-manager's.
	args := []string{"--namespace", namespace, "--include-crds", "--set", "certificate.source=certManager", "--set", "monitoring.enabled=true"}
	fromDir := decode(t, run(t, nil, helm, append([]string{"template", release, chartDir}, args...)...))
	fromPackage := decode(t, run(t, nil, helm, append([]string{"template", release, tgz[0]}, args...)...))
	compare(t, fromDir, fromPackage)
	for _, k := range []string{"CustomResourceDefinition//indexpolicies.config.indexing.k8s.io", "IndexPolicy//spark", "ConfigMap/index-apiserver/index-apiserver-dashboard", "PrometheusRule/index-apiserver/index-apiserver"} {
		if fromPackage[k] == nil {
			t.Errorf("the packaged chart does not render %s", k)
		}
	}
}

// TestBadCertificateSource: a typo in certificate.source fails the render
// with a message naming the choices (rather than rendering no certificate).
func TestBadCertificateSource(t *testing.T) {
	cmd := exec.Command(helmBinary(t), "template", release, chartDir, "--set", "certificate.source=selfsigned")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "certificate.source must be selfSigned, certManager or secret") {
		t.Fatalf("helm template with certificate.source=selfsigned: %v\n%s", err, out)
	}
}
