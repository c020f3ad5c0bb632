package proxyimage_test

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/infermetrics/infermetrics/deploy/proxyimage"
	"github.com/infermetrics/infermetrics/instrument"
)

// repo is the repository's root, from this package's directory.
const repo = "../.."

// built is the layout the tests share: one build of the host's platform.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// buildLayout builds the image for the host's platform into a new
// directory under dir.
func buildLayout(t *testing.T, dir string) string {
	t.Helper()
	if err := build(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// build builds the image for the host's platform as a layout in dir.
func build(dir string) error {
	idx, err := proxyimage.Build(proxyimage.Options{Repo: repo})
	if err != nil {
		return err
	}
	return proxyimage.WriteLayout(dir, idx)
}

// sharedLayout is one build, made once for the tests that only read it.
func sharedLayout(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "proxyimage-test")
		if err != nil {
			built.err = err
			return
		}
		built.dir = filepath.Join(dir, "layout")
		built.err = build(built.dir)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(filepath.Dir(built.dir))
	}
	os.Exit(code)
}

// layoutDigest is the digest of the layout's one entry: what crane push
// pushes and a registry then serves under the tag.
func layoutDigest(t *testing.T, dir string) (v1.Hash, map[string]string) {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: %d entries, want 1", dir, len(m.Manifests))
	}
	return m.Manifests[0].Digest, m.Manifests[0].Annotations
}

// hostImage returns the layout's image for this machine's platform.
func hostImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := layoutDigest(t, dir)
	idx, err := l.ImageIndex(d)
	if err != nil {
		t.Fatalf("the layout's entry is not an image index: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		if desc.Platform != nil && desc.Platform.OS == "linux" && desc.Platform.Architecture == runtime.GOARCH {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no image for linux/%s in %+v", runtime.GOARCH, m.Manifests)
	return nil
}

// TestReproducible builds the image again from the sources (go build runs
// again) and checks that it holds the same bytes as the shared build: the
// same digest.
func TestReproducible(t *testing.T) {
	a := sharedLayout(t)
	b := buildLayout(t, filepath.Join(t.TempDir(), "b"))
	da, _ := layoutDigest(t, a)
	db, _ := layoutDigest(t, b)
	if da != db {
		t.Fatalf("two builds: digests %s and %s", da, db)
	}
	blobs := func(dir string) []string {
		entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if ba, bb := blobs(a), blobs(b); !slices.Equal(ba, bb) {
		t.Errorf("blobs differ:\n%v\n%v", ba, bb)
	}
	t.Logf("digest of both builds (linux/%s): %s", runtime.GOARCH, da)
}

// TestImageConfig checks the image's entrypoint, user, ports and labels:
// the entrypoint is the binary, the user the non-root 65532 the chart runs
// it as, the ports those of the proxy's -listen and -metrics-listen (read
// from its -h), the labels the source, instrument.Version and the
// checkout's revision; and that the layout's entry is named by the version.
func TestImageConfig(t *testing.T) {
	dir := sharedLayout(t)
	_, ann := layoutDigest(t, dir)
	if got := ann["org.opencontainers.image.ref.name"]; got != instrument.Version {
		t.Errorf("ref.name %q, want instrument.Version %q", got, instrument.Version)
	}
	cf, err := hostImage(t, dir).ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{proxyimage.Entrypoint}) || len(c.Cmd) > 0 {
		t.Errorf("entrypoint %q, cmd %q: want [%s] and none", c.Entrypoint, c.Cmd, proxyimage.Entrypoint)
	}
	for i, e := range proxyimage.Env { // each listens on its exposed port, on every interface
		if want := ":" + strings.TrimSuffix(proxyimage.ExposedPorts[i], "/tcp"); !slices.Contains(c.Env, e) || !strings.HasSuffix(e, "="+want) {
			t.Errorf("env %q: want %q, listening on %s", c.Env, e, want)
		}
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root, numeric: runAsNonRoot checks it)", c.User)
	}
	rev := gitOut(t, "rev-parse", "HEAD")
	if gitOut(t, "status", "--porcelain", "--untracked-files=no") != "" {
		rev += "-dirty"
	}
	for k, want := range map[string]string{
		proxyimage.LabelSource:   "https://github.com/infermetrics/infermetrics",
		proxyimage.LabelVersion:  instrument.Version,
		proxyimage.LabelRevision: rev,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s=%q, want %q", k, got, want)
		}
	}
	help := runHelp(t, extract(t, hostImage(t, dir), strings.TrimPrefix(proxyimage.Entrypoint, "/")))
	var ports []string
	for _, f := range []string{"listen", "metrics-listen"} {
		// The flag's line, then its indented description, which ends with the default.
		m := regexp.MustCompile(`(?m)^  -` + f + ` string\n(?:[\t ]+.*\n)*?[\t ]+.*\(default "[^"]*:(\d+)"\)`).FindStringSubmatch(help)
		if m == nil {
			t.Fatalf("-%s's default not found in -h:\n%s", f, help)
		}
		ports = append(ports, m[1]+"/tcp")
	}
	var exposed []string
	for p := range c.ExposedPorts {
		exposed = append(exposed, p)
	}
	slices.Sort(exposed)
	slices.Sort(ports)
	if !slices.Equal(exposed, ports) {
		t.Errorf("exposed ports %v, want the defaults of -listen and -metrics-listen %v", exposed, ports)
	}
}

// TestImageFiles checks the layer: the binary is the proxy (it runs and
// prints the proxy's -h), /etc/passwd names the user 65532, the CA bundle
// parses into certificates.
func TestImageFiles(t *testing.T) {
	img := hostImage(t, sharedLayout(t))
	help := runHelp(t, extract(t, img, strings.TrimPrefix(proxyimage.Entrypoint, "/")))
	if !strings.HasPrefix(help, "infermetrics-proxy: ") || !strings.Contains(help, "-upstream") {
		t.Errorf("%s -h printed:\n%s\nwant infermetrics-proxy's help", proxyimage.Entrypoint, help)
	}
	passwd := string(fileIn(t, img, "etc/passwd"))
	if !regexp.MustCompile(`(?m)^nonroot:x:65532:65532:`).MatchString(passwd) {
		t.Errorf("/etc/passwd has no user 65532:\n%s", passwd)
	}
	ca := fileIn(t, img, strings.TrimPrefix(proxyimage.CAFile, "/"))
	n := 0
	for {
		var b *pem.Block
		b, ca = pem.Decode(ca)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 100 || len(bytes.TrimSpace(ca)) > 0 {
		t.Errorf("%s: %d certificates, then %d bytes that are not PEM", proxyimage.CAFile, n, len(ca))
	}
	t.Logf("%s: %d root certificates", proxyimage.CAFile, n)
}

// TestCranePush pushes the layout as docs/kubernetes.md says (go run
// .../cmd/crane push DIR REF, from deploy/) to a registry on the loopback
// (go-containerregistry's, in memory) and checks that the registry serves
// the layout's digest under the tag.
func TestCranePush(t *testing.T) {
	dir := sharedLayout(t)
	want, _ := layoutDigest(t, dir)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref := u.Host + "/infermetrics-proxy:" + instrument.Version
	cmd := exec.Command("go", "run", "github.com/google/go-containerregistry/cmd/crane", "push", dir, ref)
	cmd.Dir = ".." // deploy/, whose go.mod pins crane
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crane push: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, "@"+want.String()) {
		t.Errorf("crane push printed %q, want the layout's digest %s", got, want)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(r)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("the registry serves %s as %s, want %s", ref, desc.Digest, want)
	}
}

// TestWriteLayoutRefusesNonEmpty checks that a layout is never written
// over another directory's files.
func TestWriteLayoutRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := proxyimage.WriteLayout(dir, nil); err == nil {
		t.Error("wrote into a directory with a file")
	}
}

// extract writes the named file of the image's layers to a temporary
// executable file.
func extract(t *testing.T, img v1.Image, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(out, fileIn(t, img, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// fileIn returns a file of the image's flattened file system.
func fileIn(t *testing.T, img v1.Image, name string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the image", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// runHelp runs bin -h and returns what it printed; it must exit 0.
func runHelp(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v\n%s", bin, err, out)
	}
	return string(out)
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestDockerfile checks that cmd/infermetrics-proxy/Dockerfile, the
// alternative for a machine with a container daemon (not built here),
// builds the binary with the same flags and runs it as the same user,
// entrypoint and ports as this package's image.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "cmd", "infermetrics-proxy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{} // instruction -> its lines' arguments
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		lines[instr] = append(lines[instr], args)
	}
	var build string
	for _, run := range lines["RUN"] {
		if strings.Contains(run, " go build ") {
			build = run
		}
	}
	for _, f := range proxyimage.BuildFlags {
		if k, v, ok := strings.Cut(f, "="); ok && strings.Contains(v, " ") {
			f = k + "='" + v + "'" // as the shell takes it
		}
		if !strings.Contains(build, " "+f+" ") {
			t.Errorf("Dockerfile's go build %q: no %s", build, f)
		}
	}
	if !strings.HasPrefix(build, "CGO_ENABLED=0 ") || !strings.HasSuffix(build, " "+proxyimage.ProxyPackage) {
		t.Errorf("Dockerfile's go build %q: want CGO_ENABLED=0 and %s", build, proxyimage.ProxyPackage)
	}
	var ports []string
	for _, p := range proxyimage.ExposedPorts {
		ports = append(ports, strings.TrimSuffix(p, "/tcp"))
	}
	for instr, want := range map[string]string{
		"ENV":        strings.Join(proxyimage.Env, " "),
		"USER":       proxyimage.User,
		"EXPOSE":     strings.Join(ports, " "),
		"ENTRYPOINT": `["` + proxyimage.Entrypoint + `"]`,
	} {
		if got := lines[instr]; len(got) != 1 || got[0] != want {
			t.Errorf("Dockerfile %s %q, want %q", instr, got, want)
		}
	}
}
