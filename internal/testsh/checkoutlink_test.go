package testsh

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The first and the last line of the part of scripts/test.sh that moves
// the run to its fixed path: the variable's assignment, the path printed.
const (
	blockStart = "\ncheckout_link="
	blockEnd   = "\nprintf 'test.sh: at %s\\n' \"$PWD\"\n"
)

// checkoutLinkBlock is that part of scripts/test.sh.
func checkoutLinkBlock(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	start, end := strings.Index(s, blockStart), strings.Index(s, blockEnd)
	if start < 0 || end < start {
		t.Fatalf("scripts/test.sh: no checkout link block (%q ... %q)", blockStart, blockEnd)
	}
	return s[start+1 : end+len(blockEnd)]
}

// runBlock runs the block in dir with link as INFERMETRICS_CHECKOUT_LINK
// and returns the path the run goes on at.
func runBlock(t *testing.T, block, dir, link string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -euo pipefail\ncd \"$1\"\n"+block, "bash", dir)
	cmd.Env = append(os.Environ(), "INFERMETRICS_CHECKOUT_LINK="+link)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	at, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "test.sh: at ")
	if !ok {
		t.Fatalf("the block printed %q, not its path", out)
	}
	return at
}

// The run goes on through the link when it can, and at its own path when
// another run holds the lock, something else is at the link's path, or the
// link is turned off; the link then points at the last checkout that took it.
func TestCheckoutLink(t *testing.T) {
	for _, tool := range []string{"bash", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	block := checkoutLinkBlock(t)
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(tmp, "cache", "checkout")
	target := func() string {
		got, err := os.Readlink(link)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	if at := runBlock(t, block, a, link); at != link || target() != a {
		t.Errorf("first run: at %s, link to %s; want at %s, link to %s", at, target(), link, a)
	}
	if at := runBlock(t, block, b, link); at != link || target() != b {
		t.Errorf("second checkout: at %s, link to %s; want at %s, link to %s", at, target(), link, b)
	}

	lock, err := os.OpenFile(link+".lock", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if at := runBlock(t, block, a, link); at != a || target() != b {
		t.Errorf("lock taken: at %s, link to %s; want at %s, the link left to %s", at, target(), a, b)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}

	if at := runBlock(t, block, a, ""); at != a {
		t.Errorf("link turned off: at %s, want %s", at, a)
	}

	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(link, 0o755); err != nil {
		t.Fatal(err)
	}
	if at := runBlock(t, block, a, link); at != a {
		t.Errorf("a directory at the link's path: at %s, want %s", at, a)
	}
	if entries, _ := os.ReadDir(link); len(entries) != 0 {
		t.Errorf("the directory at the link's path was written to: %v", entries)
	}
}
