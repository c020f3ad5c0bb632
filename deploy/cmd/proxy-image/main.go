// Command proxy-image builds infermetrics-proxy's container image, without
// a container daemon, as an OCI image layout (package proxyimage), and
// prints its digest. From deploy/:
//
//	go run ./cmd/proxy-image -o ../bin/infermetrics-proxy.oci
//	go run github.com/google/go-containerregistry/cmd/crane push ../bin/infermetrics-proxy.oci REGISTRY/infermetrics-proxy:VERSION
//
// The layout is written into an empty or new directory (bin/ is ignored by
// git); docs/kubernetes.md has the rest.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/infermetrics/infermetrics/deploy/proxyimage"
)

func main() {
	out := flag.String("o", "", "the OCI image layout's directory (new or empty)")
	repo := flag.String("repo", "..", "the repository's root")
	platforms := flag.String("platform", "", "comma-separated linux/ARCH (default: this machine's, linux/"+hostArch()+")")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (default: git HEAD, -dirty when tracked files changed)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: proxy-image -o DIR [-platform linux/amd64,linux/arm64] [-repo ..] [-revision REV]")
		os.Exit(2)
	}
	o := proxyimage.Options{Repo: *repo, Revision: *revision}
	if *platforms != "" {
		for _, s := range strings.Split(*platforms, ",") {
			p, err := v1.ParsePlatform(strings.TrimSpace(s))
			if err != nil {
				fail(err)
			}
			o.Platforms = append(o.Platforms, *p)
		}
	}
	idx, err := proxyimage.Build(o)
	if err != nil {
		fail(err)
	}
	if err := proxyimage.WriteLayout(*out, idx); err != nil {
		fail(err)
	}
	d, err := idx.Digest()
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s\n", *out, d)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "proxy-image:", err)
	os.Exit(1)
}

func hostArch() string { return runtime.GOARCH }
