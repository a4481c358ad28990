// Command image builds index-apiserver's container image without a container
// runtime: a static binary (CGO_ENABLED=0, -trimpath) on an empty base, plus
// the files a distroless "static" base would bring (CA certificates, a
// passwd/group naming the nonroot user 65532, /tmp), written as an OCI image
// layout. `make image` runs it.
//
// The image is reproducible: every file in it has the same mtime (the commit's
// time, or SOURCE_DATE_EPOCH), the config's created time is that time too, the
// CA bundle comes from a pinned Go module (golang.org/x/crypto/x509roots/fallback,
// the NSS roots Go itself falls back to) rather than from the build machine, and
// the layers are gzipped by the same code every time. Two builds of the same
// commit with the same Go toolchain give the same manifest digest.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
	"k8s.io/klog/v2"
)

// Where things are in the image. The Deployment runs it as 65532 (runAsUser).
const (
	binaryPath = "usr/local/bin/index-apiserver"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
	nonrootUID = 65532
)

func main() {
	var (
		out       = flag.String("out", "_output/image", "directory of the OCI image layout to write (replaced)")
		tag       = flag.String("tag", "dev", "tag recorded in the layout (org.opencontainers.image.ref.name)")
		platforms = flag.String("platforms", "linux/amd64", "comma-separated os/arch list; more than one writes an image index")
		pkg       = flag.String("package", "./cmd/index-apiserver", "Go package of the binary")
		source    = flag.String("source", "https://github.com/index-apiserver/index-apiserver", "org.opencontainers.image.source label")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*out, *tag, *platforms, *pkg, *source); err != nil {
		klog.ErrorS(err, "building the image failed")
		os.Exit(1)
	}
}

func run(out, tag, platformList, pkg, source string) error {
	epoch, revision, err := sourceTime()
	if err != nil {
		return err
	}
	base, err := baseLayer(epoch)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "index-apiserver-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var images []struct {
		img      v1.Image
		platform v1.Platform
	}
	for _, p := range strings.Split(platformList, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return fmt.Errorf("platform %q is not os/arch", p)
		}
		bin := filepath.Join(tmp, osName+"-"+arch, "index-apiserver")
		if err := goBuild(pkg, bin, osName, arch); err != nil {
			return err
		}
		img, err := image(base, bin, osName, arch, epoch, revision, source)
		if err != nil {
			return err
		}
		images = append(images, struct {
			img      v1.Image
			platform v1.Platform
		}{img, v1.Platform{OS: osName, Architecture: arch}})
	}

	// Write next to out and swap, so a failed build leaves the old layout.
	staging := out + ".tmp"
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	lp, err := layout.Write(staging, empty.Index)
	if err != nil {
		return err
	}
	ref := layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})
	var digest v1.Hash
	if len(images) == 1 {
		if err := lp.AppendImage(images[0].img, ref); err != nil {
			return err
		}
		digest, err = images[0].img.Digest()
	} else {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, i := range images {
			pl := i.platform
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: i.img, Descriptor: v1.Descriptor{Platform: &pl}})
		}
		if err := lp.AppendIndex(idx, ref); err != nil {
			return err
		}
		digest, err = idx.Digest()
	}
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(staging, out); err != nil {
		return err
	}
	fmt.Printf("%s %s:%s\n", digest, out, tag)
	return nil
}

// sourceTime is SOURCE_DATE_EPOCH if set (reproducible-builds.org), else the
// time of the checked-out commit; and that commit (empty outside git).
func sourceTime() (time.Time, string, error) {
	rev, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	revision := strings.TrimSpace(string(rev))
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		return time.Unix(n, 0).UTC(), revision, nil
	}
	ct, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
	if err != nil {
		return time.Time{}, "", errors.New("not in a git checkout: set SOURCE_DATE_EPOCH")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(ct)), 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	return time.Unix(n, 0).UTC(), revision, nil
}

// goBuild compiles a static binary for os/arch. -trimpath and no VCS stamp
// keep paths and checkout state out of it; -s -w drop the symbol tables.
func goBuild(pkg, out, osName, arch string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+osName, "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	klog.InfoS("building", "package", pkg, "os", osName, "arch", arch)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w", pkg, osName, arch, err)
	}
	return nil
}

// file is one entry of a layer.
type file struct {
	path string
	mode int64
	uid  int
	dir  bool
	data []byte
}

// baseLayer holds what every platform's image shares: the users, the CA
// bundle and the writable directories.
func baseLayer(epoch time.Time) (v1.Layer, error) {
	var ca bytes.Buffer
	for r := range bundle.Roots() {
		// A root NSS distrusts after a date cannot say so in a PEM bundle:
		// leave it out rather than trust it unconditionally.
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&ca, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	return layer(epoch, []file{
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/ssl", mode: 0o755, dir: true},
		{path: "etc/ssl/certs", mode: 0o755, dir: true},
		{path: caPath, mode: 0o644, data: ca.Bytes()},
		{path: "home", mode: 0o755, dir: true},
		{path: "home/nonroot", mode: 0o700, uid: nonrootUID, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
	})
}

func image(base v1.Layer, bin, osName, arch string, epoch time.Time, revision, source string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	app, err := layer(epoch, []file{
		{path: "usr", mode: 0o755, dir: true},
		{path: "usr/local", mode: 0o755, dir: true},
		{path: "usr/local/bin", mode: 0o755, dir: true},
		{path: binaryPath, mode: 0o755, data: data},
	})
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":   "index-apiserver",
		"org.opencontainers.image.source":  source,
		"org.opencontainers.image.created": epoch.Format(time.RFC3339),
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: arch,
		OS:           osName,
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			User:         strconv.Itoa(nonrootUID) + ":" + strconv.Itoa(nonrootUID),
			Entrypoint:   []string{"/" + binaryPath},
			Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/" + caPath},
			WorkingDir:   "/",
			ExposedPorts: map[string]struct{}{"6443/tcp": {}},
			Labels:       labels,
		},
	})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: epoch}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/image: CA certificates, passwd/group (nonroot 65532), /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "hack/image: go build -trimpath " + "CGO_ENABLED=0 " + binaryPath}},
	)
}

// layer tars files (in the given order, all owned by root unless uid is
// set, all with mtime epoch) into a gzipped OCI layer.
func layer(epoch time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.path,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
