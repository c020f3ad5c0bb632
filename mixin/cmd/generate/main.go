// Command generate writes the rules, alerts, unit tests, dashboards and
// runbook of package mixin.
//
// Without flags it writes the shipped files (mixin.Default) into the
// repository, from mixin/ (go generate ./... does that). With -config, a
// JSON file of the parameters to change (mixin.Config's fields), it writes
// them with those parameters under -out.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/infermetrics/infermetrics/mixin"
)

func main() {
	config := flag.String("config", "", "JSON file of the parameters to change from the defaults (fields of mixin.Config)")
	out := flag.String("out", "..", "directory the files' paths start from: the repository's root by default, run from mixin/")
	flag.Parse()
	if err := run(*config, *out); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(config, out string) error {
	c := mixin.Default()
	if config != "" {
		b, err := os.ReadFile(config)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("%s: %w", config, err)
		}
	}
	files, err := mixin.Files(c)
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(out, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
