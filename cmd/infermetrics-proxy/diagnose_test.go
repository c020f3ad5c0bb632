package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// A port taken already: the error names the flag (or its variable) and the
// address, and the proxy exits 1.
func TestBindErrorNamesFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-listen", addr, "-metrics-listen", "127.0.0.1:0"}, nil, "-listen " + addr + ": bind: address already in use"},
		{[]string{"-listen", "127.0.0.1:0", "-metrics-listen", addr}, nil, "-metrics-listen " + addr + ": bind: address already in use"},
		{[]string{"-metrics-listen", "127.0.0.1:0"}, map[string]string{"INFERMETRICS_PROXY_LISTEN": addr}, "INFERMETRICS_PROXY_LISTEN=" + addr + ": bind: address already in use"},
	} {
		var out bytes.Buffer
		args := append([]string{"-upstream", "http://127.0.0.1:1"}, c.args...)
		if code := run(context.Background(), args, func(k string) string { return c.env[k] }, &out, &out, nil); code != 1 {
			t.Errorf("%v %v: exit %d, want 1:\n%s", c.args, c.env, code, out.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%v %v: logs lack %q:\n%s", c.args, c.env, c.want, out.String())
		}
	}
}
