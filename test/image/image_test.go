// Package image tests the container image `make image` writes (hack/image):
// built twice it has the same digest; crane pushes it to a registry as
// docs/deploy.md says; unpacked with nothing but the OCI
// layout spec (this test reads the layout with the standard library, not with
// the library that wrote it), it is a static binary on an empty base with CA
// certificates and the nonroot user, no shell; the binary from it answers
// --help (chrooted into the image as user 65532 when the test runs as root),
// and starts against a real kube-apiserver, where it becomes ready behind
// the aggregator.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

var root = func() string {
	r, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return r
}()

// The parts of the OCI image spec this test reads.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type config struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Env          []string            `json:"Env"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// build runs the image builder into a new directory and returns it.
func build(t *testing.T, builder string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image")
	cmd := exec.Command(builder, "-out", out, "-tag", "test")
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	t.Logf("hack/image: %s", bytes.TrimSpace(b))
	return out
}

// blob reads a blob of the layout and checks it against its descriptor.
func blob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	alg, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || alg != "sha256" {
		t.Fatalf("digest %q", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", alg, hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: sha256 %x, %d bytes; descriptor says %d bytes", d.Digest, sum, len(b), d.Size)
	}
	return b
}

func readJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// image reads the layout's one image: its manifest descriptor, manifest and
// config.
func image(t *testing.T, dir string) (descriptor, manifest, config) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		t.Fatal(err)
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if readJSON(t, b, &layout); layout.Version != "1.0.0" {
		t.Fatalf("oci-layout: %s", b)
	}
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	readJSON(t, b, &idx)
	if idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %s", b)
	}
	md := idx.Manifests[0]
	if md.MediaType != "application/vnd.oci.image.manifest.v1+json" || md.Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Fatalf("index.json's manifest %+v", md)
	}
	var m manifest
	readJSON(t, blob(t, dir, md), &m)
	if m.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Fatalf("config media type %q", m.Config.MediaType)
	}
	var c config
	readJSON(t, blob(t, dir, m.Config), &c)
	return md, m, c
}

// TestMultiPlatform: with more than one platform the layout holds an image
// index with one image per platform, each of its own architecture.
func TestMultiPlatform(t *testing.T) {
	builder := filepath.Join(t.TempDir(), "image-builder")
	if b, err := exec.Command("go", "build", "-o", builder, filepath.Join(root, "hack", "image")).CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/image: %v\n%s", err, b)
	}
	out := filepath.Join(t.TempDir(), "image")
	cmd := exec.Command(builder, "-out", out, "-tag", "test", "-platforms", "linux/amd64,linux/arm64", "-package", "./test/image/testdata/hello")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top index
	readJSON(t, b, &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json: %s", b)
	}
	var idx struct {
		Manifests []struct {
			descriptor
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	readJSON(t, blob(t, out, top.Manifests[0]), &idx)
	var got []string
	for _, m := range idx.Manifests {
		var mf manifest
		readJSON(t, blob(t, out, m.descriptor), &mf)
		var c config
		readJSON(t, blob(t, out, mf.Config), &c)
		if c.OS != m.Platform.OS || c.Architecture != m.Platform.Architecture {
			t.Errorf("index says %s/%s, the image's config %s/%s", m.Platform.OS, m.Platform.Architecture, c.OS, c.Architecture)
		}
		got = append(got, c.OS+"/"+c.Architecture)
		// The binary is built for that architecture.
		rootfs := t.TempDir()
		unpack(t, out, mf, c, rootfs)
		f, err := elf.Open(filepath.Join(rootfs, "usr", "local", "bin", "index-apiserver"))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[c.Architecture]; f.Machine != want {
			t.Errorf("%s image: the binary is for %v", c.Architecture, f.Machine)
		}
		f.Close()
	}
	if !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %q", got)
	}
}

// cranePackage is the crane CLI docs/deploy.md pushes the layout with, at
// the go-containerregistry version go.mod pins.
const cranePackage = "github.com/google/go-containerregistry/cmd/crane@v0.22.1"

// push does what docs/deploy.md says, `crane push _output/image
// <registry>/index-apiserver:<tag>`, to a registry on loopback
// (go-containerregistry's in-memory registry), and checks the registry
// serves the manifest under the tag with the layout's digest.
func push(t *testing.T, layout, digest string) {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	cmd := exec.Command("go", "run", cranePackage, "push", "--insecure", layout, host+"/index-apiserver:v0.0.1")
	cmd.Dir = t.TempDir() // outside this module: crane builds with its own go.mod
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("crane push: %v\n%s", err, out)
	}
	req, _ := http.NewRequest(http.MethodGet, reg.URL+"/v2/index-apiserver/manifests/v0.0.1", nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	sum := sha256.Sum256(body)
	if res.StatusCode != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("the registry serves %d, manifest sha256:%x; the layout's digest is %s\n%s", res.StatusCode, sum, digest, body)
	}
	t.Logf("crane push: %s", bytes.TrimSpace(out))
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// unpack extracts the layers into rootfs (no whiteouts: the image has none
// to apply) and returns every entry by path; it checks each layer's
// uncompressed digest against the config's diff_ids.
func unpack(t *testing.T, dir string, m manifest, c config, rootfs string) map[string]entry {
	t.Helper()
	if len(c.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("%d diff_ids for %d layers", len(c.RootFS.DiffIDs), len(m.Layers))
	}
	entries := map[string]entry{}
	for i, l := range m.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer media type %q", l.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(t, dir, l)))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != c.RootFS.DiffIDs[i] {
			t.Fatalf("layer %d: diff_id %s, uncompressed sha256 %x", i, c.RootFS.DiffIDs[i], sum)
		}
		tr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			name := path.Clean(h.Name)
			if strings.HasPrefix(name, "../") || path.IsAbs(name) || strings.Contains(path.Base(name), ".wh.") {
				t.Fatalf("unexpected entry %q", h.Name)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			entries[name] = entry{h, data}
			target := filepath.Join(rootfs, filepath.FromSlash(name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(target, os.FileMode(h.Mode).Perm())
				if err == nil {
					err = os.Chmod(target, os.FileMode(h.Mode).Perm())
				}
			case tar.TypeReg:
				err = os.WriteFile(target, data, os.FileMode(h.Mode).Perm())
			default:
				t.Fatalf("entry %s of type %c: the image has only files and directories", name, h.Typeflag)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return entries
}

func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image twice and starts a control plane")
	}
	builder := filepath.Join(t.TempDir(), "image-builder")
	if b, err := exec.Command("go", "build", "-o", builder, filepath.Join(root, "hack", "image")).CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/image: %v\n%s", err, b)
	}

	// Reproducible: two builds of the same checkout, the same digest.
	first, second := build(t, builder), build(t, builder)
	md, m, c := image(t, first)
	md2, _, _ := image(t, second)
	if md.Digest != md2.Digest {
		t.Fatalf("two builds of the same commit: %s and %s", md.Digest, md2.Digest)
	}
	var size int64
	for _, l := range m.Layers {
		size += l.Size
	}
	t.Logf("image %s: %d layers, %.1f MiB compressed", md.Digest, len(m.Layers), float64(size)/(1<<20))

	push(t, first, md.Digest)

	// The config: nonroot, the binary as entrypoint, the https port.
	if c.OS != "linux" || c.Architecture == "" {
		t.Errorf("platform %s/%s", c.OS, c.Architecture)
	}
	if c.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (the Deployment's runAsUser)", c.Config.User)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/usr/local/bin/index-apiserver"}) {
		t.Errorf("entrypoint %q", c.Config.Entrypoint)
	}
	if _, ok := c.Config.ExposedPorts["6443/tcp"]; !ok {
		t.Errorf("exposed ports %v", c.Config.ExposedPorts)
	}

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	entries := unpack(t, first, m, c, rootfs)

	// Every file has the same mtime, the config's created time.
	for name, e := range entries {
		if !e.hdr.ModTime.Equal(c.Created) {
			t.Errorf("%s: mtime %v, created %v", name, e.hdr.ModTime, c.Created)
		}
	}
	// No shell, nothing but what the server needs.
	var files []string
	for name, e := range entries {
		if e.hdr.Typeflag == tar.TypeReg {
			files = append(files, name)
		}
	}
	slices.Sort(files)
	want := []string{"etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/index-apiserver"}
	if !slices.Equal(files, want) {
		t.Errorf("files %q, want %q", files, want)
	}
	if e := entries["etc/passwd"]; !strings.Contains(string(e.data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", e.data)
	}
	if e := entries["tmp"]; e.hdr == nil || e.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not 1777")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(entries["etc/ssl/certs/ca-certificates.crt"].data) {
		t.Error("the CA bundle holds no certificate")
	}
	// Static: no program interpreter, no shared libraries.
	bin := filepath.Join(rootfs, "usr", "local", "bin", "index-apiserver")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %q", libs)
	}
	f.Close()

	// --help, with nothing but the image's files, as the image's user.
	help := exec.Command(bin, "--help")
	if os.Geteuid() == 0 {
		help = exec.Command("/usr/local/bin/index-apiserver", "--help")
		help.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		help.Dir = "/"
	} else {
		t.Log("not root: --help runs the unpacked binary without chroot")
	}
	out, err := help.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--secure-port") || !strings.Contains(string(out), "--enable-cluster-proxy") {
		t.Fatalf("index-apiserver --help from the image: %v\n%.2000s", err, out)
	}

	// A real start: the stack runs the image's binary; Up returns once the
	// APIService is Available through kube-apiserver's aggregator.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := localstack.UpForTest(ctx, t, "image-", localstack.Config{
		RepoRoot:             root,
		IndexAPIServerBinary: bin,
		SkipExamples:         true,
		Timeout:              90 * time.Second,
	})
	dyn, err := dynamic.NewForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "indexing.k8s.io", Version: "v1alpha1", Resource: "nodes"}
	if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing nodes.indexing.k8s.io through the aggregator: %v", err)
	}
}
