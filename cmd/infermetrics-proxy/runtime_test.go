package main

import (
	"strings"
	"testing"
)

// The proxy's /metrics shows its own health beside its clients' traffic:
// the Go runtime's families (goroutines, threads, heap, GC) and the
// process's, as a Go service's scrape does (issue 27, item 7).
func TestOwnHealthFamilies(t *testing.T) {
	p := startProxy(t, nil, "-upstream", "http://127.0.0.1:1")
	s := p.scrape(t)
	for _, name := range []string{"go_goroutines", "go_threads", "go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes",
		"go_gc_duration_seconds_count", "go_info", "process_resident_memory_bytes", "process_open_fds"} {
		if v, ok := value(s, name); !ok || (name != "go_gc_duration_seconds_count" && v <= 0) {
			t.Errorf("%s: %v (found %v), want a value above 0", name, v, ok)
		}
	}
	if strings.Count(s, "# TYPE go_goroutines ") != 1 {
		t.Errorf("go_goroutines not served once:\n%s", grep(s, "go_goroutines"))
	}
}
