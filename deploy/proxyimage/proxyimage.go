// Package proxyimage builds the container image of infermetrics-proxy
// without a container daemon: the static binary (go build, CGO off,
// -trimpath, fixed -ldflags) on scratch, with /etc/passwd and /etc/group for
// its non-root user and a CA bundle from a pinned Go module, written as an
// OCI image layout that crane or skopeo push (docs/kubernetes.md).
//
// The same sources, Go toolchain, revision and time give the same bytes,
// and so the same digest: every file and the image's creation carry one
// fixed time (the commit's), nothing is read from the machine but the
// sources, and the layer's compression is Go's.
package proxyimage

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/infermetrics/infermetrics/instrument"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// What the image runs, as whom, and where the CA bundle is (where Go's
// crypto/x509 looks for it on Linux).
const (
	Entrypoint = "/infermetrics-proxy"
	UID        = 65532 // distroless's nonroot, which the chart's securityContext runs as
	User       = "65532:65532"
	CAFile     = "/etc/ssl/certs/ca-certificates.crt"
	// ProxyPackage is built from the repository's root module.
	ProxyPackage = "./cmd/infermetrics-proxy"
)

// ExposedPorts are the ports of the proxy's -listen and -metrics-listen
// defaults (the test reads them from its -h).
var ExposedPorts = []string{"8787/tcp", "9464/tcp"}

// Env makes the proxy listen on every interface of the container at the
// exposed ports: its defaults are the loopback (127.0.0.1), which no one
// outside the container reaches. Flags given at run time win over them.
var Env = []string{"INFERMETRICS_PROXY_LISTEN=:8787", "INFERMETRICS_PROXY_METRICS_LISTEN=:9464"}

// BuildFlags are go build's flags: no path of the machine (-trimpath), no
// VCS stamp (the revision is a label, so that the binary depends on the
// sources alone), no symbol table or DWARF.
var BuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// Options say what to build.
type Options struct {
	// Repo is the repository's root (the module github.com/infermetrics/infermetrics).
	Repo string
	// Platforms are the linux/ARCH images of the index; default the host's.
	Platforms []v1.Platform
	// Revision is org.opencontainers.image.revision; default the checkout's
	// HEAD (git), with "-dirty" when tracked files differ from it.
	Revision string
	// Created is every file's time and the image's; default the commit
	// time of HEAD.
	Created time.Time
}

// Label names (the OCI image spec's annotations, as config labels).
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelTitle    = "org.opencontainers.image.title"
	LabelLicenses = "org.opencontainers.image.licenses"
)

// Build builds an image index with one image per platform.
func Build(o Options) (v1.ImageIndex, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	module, err := modulePath(o.Repo)
	if err != nil {
		return nil, err
	}
	base, err := baseFiles()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		LabelSource:   "https://" + module,
		LabelVersion:  instrument.Version,
		LabelRevision: o.Revision,
		LabelCreated:  o.Created.UTC().Format(time.RFC3339),
		LabelTitle:    "infermetrics-proxy",
		LabelLicenses: "Apache-2.0",
	}
	goVersion, err := run(o.Repo, "go", "env", "GOVERSION")
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	tmp, err := os.MkdirTemp("", "proxyimage")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, p := range o.Platforms {
		bin := filepath.Join(tmp, p.Architecture, "infermetrics-proxy")
		if err := buildProxy(o.Repo, p, bin); err != nil {
			return nil, err
		}
		img, err := image(p, bin, base, labels, o.Created, goVersion)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return idx, nil
}

// WriteLayout writes idx as an OCI image layout in dir, which must not
// exist or be empty; its one entry is named by the version (ref.name).
func WriteLayout(dir string, idx v1.ImageIndex) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s: not empty (an OCI layout is written into an empty directory)", dir)
	}
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return l.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": instrument.Version,
	}))
}

func (o *Options) defaults() error {
	if o.Repo == "" {
		return errors.New("proxyimage: no repository root")
	}
	if len(o.Platforms) == 0 {
		o.Platforms = []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}
	}
	for _, p := range o.Platforms {
		if p.OS != "linux" || p.Architecture == "" {
			return fmt.Errorf("platform %s: want linux/ARCH", p.String())
		}
	}
	if o.Revision == "" {
		rev, err := run(o.Repo, "git", "rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("revision (give it, or build in a git checkout): %w", err)
		}
		status, err := run(o.Repo, "git", "status", "--porcelain", "--untracked-files=no")
		if err != nil {
			return err
		}
		if status != "" {
			rev += "-dirty"
		}
		o.Revision = rev
	}
	if o.Created.IsZero() {
		ct, err := run(o.Repo, "git", "log", "-1", "--format=%ct")
		if err != nil {
			return fmt.Errorf("time (give it, or build in a git checkout): %w", err)
		}
		sec, err := strconv.ParseInt(ct, 10, 64)
		if err != nil {
			return fmt.Errorf("commit time %q: %w", ct, err)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	return nil
}

// buildProxy builds the static proxy binary for p into out.
func buildProxy(repo string, p v1.Platform, out string) error {
	args := append([]string{"build"}, BuildFlags...)
	args = append(args, "-o", out, ProxyPackage)
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	// The environment of the build is fixed where it changes the output: no
	// cgo, the baseline instruction sets, no flags or workspace of the user.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOARM=7", "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (GOARCH=%s): %w\n%s", strings.Join(args, " "), p.Architecture, err, b)
	}
	return nil
}

// file is one entry of a layer.
type file struct {
	name string
	mode int64
	uid  int
	data []byte // nil for a directory
}

// baseFiles are the image's files but the binary: the users and groups of
// distroless's static image (root, nobody, nonroot) and the CA bundle.
func baseFiles() ([]file, error) {
	ca, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)
	group := "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("nonroot:x:%d:\n", UID)
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CAFile, "/"), mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID},
	}, nil
}

// caBundle is the PEM of the Mozilla NSS roots that golang.org/x/crypto's
// x509roots/fallback/bundle carries (its version pinned in go.mod), so that
// the bundle is the same on every machine. Roots with a constraint PEM
// cannot carry (a distrust-after date) are left out.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(r.Certificate); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	if b.Len() == 0 {
		return nil, errors.New("CA bundle: no roots")
	}
	return b.Bytes(), nil
}

// image is one platform's image: one layer of files and the binary.
func image(p v1.Platform, bin string, base []file, labels map[string]string, created time.Time, goVersion string) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := append(base[:len(base):len(base)], file{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o555, data: exe})
	layerTar, err := tarFiles(files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: fmt.Sprintf("go build %s %s (%s, CGO_ENABLED=0)", strings.Join(BuildFlags, " "), ProxyPackage, goVersion),
			Comment:   "deploy/proxyimage",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.User = User
	cf.Config.Env = append(cf.Config.Env[:0:0], Env...)
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = labels
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, port := range ExposedPorts {
		cf.Config.ExposedPorts[port] = struct{}{}
	}
	return mutate.ConfigFile(img, cf)
}

// tarFiles writes files as a tar archive, each at time t, owned by root
// (or its uid), in the order given.
func tarFiles(files []file, t time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: t, Format: tar.FormatUSTAR}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
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
	return b.Bytes(), nil
}

// modulePath reads the module path of repo's go.mod.
func modulePath(repo string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod: no module line", repo)
}

// run runs a command in dir and returns its output, trimmed.
func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
