package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/internal/mdtable"
)

// TestGuideFlagReference keeps docs/proxy.md's reference table equal to the
// flags -h lists: one row per flag, in the order of the table, with its
// environment variable and, where -h shows one, its default.
func TestGuideFlagReference(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out, nil); code != 0 {
		t.Fatalf("-h exit %d", code)
	}
	_, flags, ok := strings.Cut(out.String(), "\nFlags:\n")
	if !ok {
		t.Fatalf("-h has no Flags: section:\n%s", out.String())
	}
	// Each flag is a line "  -name [type]" and its description's lines,
	// the last ending in "(default X)" when the default is not the zero value.
	defaults := map[string]string{}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n((?:    \t[^\n]*\n?)*)`).FindAllStringSubmatch(flags, -1) {
		names = append(names, m[1])
		if d := regexp.MustCompile(`\(default (.+)\)\s*$`).FindStringSubmatch(m[2]); d != nil {
			defaults[m[1]] = strings.Trim(d[1], `"`)
		}
	}
	if len(names) == 0 {
		t.Fatalf("-h lists no flag:\n%s", flags)
	}

	table, err := mdtable.Rows("../../docs/proxy.md", "| flag | variable | default | what it sets |")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, cells := range table {
		name := strings.Trim(cells[0], "`-")
		rows = append(rows, name)
		if want := "`" + EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "`"; cells[1] != want {
			t.Errorf("docs/proxy.md gives -%s the variable %s, want %s", name, cells[1], want)
		}
		if d, ok := defaults[name]; ok && !strings.Contains(cells[2], "`"+d+"`") {
			t.Errorf("docs/proxy.md gives -%s the default %s; -h says %s", name, cells[2], d)
		}
	}
	slices.Sort(rows)
	slices.Sort(names)
	if !slices.Equal(rows, names) {
		t.Errorf("docs/proxy.md's flag table lists %q; -h lists %q", rows, names)
	}
}

// TestGuideAddresses keeps the addresses README.md and docs/proxy.md give
// clients and Prometheus ("Clients then use http://HOST:PORT/v1, Prometheus
// scrapes HOST:PORT/metrics") equal to the defaults -h shows of -listen and
// -metrics-listen.
func TestGuideAddresses(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out, nil); code != 0 {
		t.Fatalf("-h exit %d", code)
	}
	def := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  -((?:metrics-)?listen) string\n(?:    \t[^\n]*\n)*?    \t[^\n]*\(default "([^"]+)"\)`).FindAllStringSubmatch(out.String(), -1) {
		def[m[1]] = m[2]
	}
	if def["listen"] == "" || def["metrics-listen"] == "" {
		t.Fatalf("no default of -listen or -metrics-listen in -h:\n%s", out.String())
	}
	for _, file := range []string{"../../README.md", "../../docs/proxy.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile("Clients then use `http://([^/`]+)/[^`]*`[^\n]*\n?[^\n]*?scrapes\\s+`([^/`]+)/metrics`").FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no \"Clients then use `http://HOST:PORT/...`, Prometheus scrapes `HOST:PORT/metrics`\"", file)
			continue
		}
		if string(m[1]) != def["listen"] || string(m[2]) != def["metrics-listen"] {
			t.Errorf("%s: clients use %s and Prometheus scrapes %s; -h's defaults: -listen %s, -metrics-listen %s", file, m[1], m[2], def["listen"], def["metrics-listen"])
		}
	}
}
