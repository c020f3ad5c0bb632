package openaihttp

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	"github.com/felixge/httpsnoop"
)

// methods returns the names of the methods of v's type.
func methods(v any) []string {
	t := reflect.TypeOf(v)
	names := make([]string, t.NumMethod())
	for i := range names {
		names[i] = t.Method(i).Name
	}
	return names
}

// TestH1WriterKeepsInterfaces: net/http's HTTP/1 writer gets h1Writer,
// whose methods are those of httpsnoop's wrapper of the same writer; an
// HTTP/2 writer (a Pusher) gets httpsnoop's.
func TestH1WriterKeepsInterfaces(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		var got, want []string
		var fast bool
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wrapped := snoop(w, tap{sw: &statusWriter{}}, nil)
			_, fast = wrapped.(*h1Writer)
			got, want = methods(wrapped), methods(httpsnoop.Wrap(w, httpsnoop.Hooks{}))
		}))
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
		} else {
			srv.Start()
		}
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
			t.Fatalf("served %s", resp.Proto)
		}
		if fast == h2 {
			t.Errorf("%s: h1Writer %v, want %v", resp.Proto, fast, !h2)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: methods %v, httpsnoop's %v", resp.Proto, got, want)
		}
	}
}
