package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The suite hands its processes ports it chose (a Prometheus, a collector,
// an example listen where a test tells them). A port the kernel chose for a
// listener a moment ago (127.0.0.1:0) is in the ephemeral range, from which
// every other listener that lets the kernel choose takes its port too: each
// httptest server of the tests running beside the suite. Measured here: of
// 2,000 such listeners after 32 ports were chosen that way, 8 and 14 (two
// runs) landed on one of the 32; a fleet holds 32 for seconds before its
// processes bind them (TestFleet failed 8.6 s in at CI, stop 45). So the
// ports come from outside that range, where only a bind that names its
// port takes one, and each is locked (flock on a file of portLockDir) for
// the rest of the test process: no other run of the suite at once, nor a
// later test of this one, is handed it while its process may still be up.
const portLockDir = "infermetrics-e2e-ports"

// portFloor is the lowest port handed out: above the registered services
// a machine runs on fixed ports (Prometheus 9090, the collector's 4317, the
// examples' 9400s).
const portFloor = 20000

var ports struct {
	sync.Mutex
	ranges [][2]int // candidate ranges, inclusive
	next   int      // offset of the next candidate over all ranges
	held   []*os.File
}

// distinctPorts returns n ports on 127.0.0.1, each free now, outside the
// ephemeral range, and handed to no other caller in this process or in
// another run of the suite while this process lives.
func distinctPorts(t *testing.T, n int) []int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.ranges == nil {
		r, err := portRanges()
		if err != nil {
			t.Fatal(err)
		}
		ports.ranges = r
		ports.next = os.Getpid() * 131 % portCount(r) // runs at once start apart
	}
	dir := filepath.Join(os.TempDir(), portLockDir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("port locks: %v", err)
	}
	total := portCount(ports.ranges)
	var out []int
	for tried := 0; len(out) < n; tried++ {
		if tried == total {
			t.Fatalf("ports: %d free of %v wanted, %d found (every other port locked or bound)", n, ports.ranges, len(out))
		}
		p := portAt(ports.ranges, ports.next%total)
		ports.next++
		f, ok := lockPort(t, dir, p)
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			// Bound by something outside the suite: kept locked, so never tried again here.
			ports.held = append(ports.held, f)
			continue
		}
		l.Close()
		ports.held = append(ports.held, f)
		out = append(out, p)
	}
	return out
}

// lockPort takes port's lock file without waiting; false when another
// process holds it.
func lockPort(t *testing.T, dir string, port int) (*os.File, bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("port lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false
		}
		t.Fatalf("port lock %s: %v", f.Name(), err)
	}
	return f, true
}

// portRanges are the ports from portFloor up that are outside the
// kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): below
// it and above it.
func portRanges() ([][2]int, error) {
	const path = "/proc/sys/net/ipv4/ip_local_port_range"
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ports: %v (the suite takes its ports outside the ephemeral range)", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return nil, fmt.Errorf("ports: %s: %q", path, b)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("ports: %s: %v", path, err)
	}
	var r [][2]int
	if lo-1 >= portFloor {
		r = append(r, [2]int{portFloor, lo - 1})
	}
	if hi < 65535 {
		r = append(r, [2]int{max(hi+1, portFloor), 65535})
	}
	if portCount(r) < 1000 {
		return nil, fmt.Errorf("ports: ephemeral range %d-%d leaves %d ports from %d up outside it; the suite needs about 1000", lo, hi, portCount(r), portFloor)
	}
	return r, nil
}

func portCount(r [][2]int) int {
	n := 0
	for _, x := range r {
		n += x[1] - x[0] + 1
	}
	return n
}

// portAt is the i-th port over the ranges.
func portAt(r [][2]int, i int) int {
	for _, x := range r {
		size := x[1] - x[0] + 1
		if i < size {
			return x[0] + i
		}
		i -= size
	}
	panic("portAt: out of range")
}
