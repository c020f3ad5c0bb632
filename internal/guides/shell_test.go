package guides

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// module is this repository's module path.
const module = "github.com/infermetrics/infermetrics"

// checkShell checks each command of a shell block: joined across trailing
// backslashes, comments and leading VAR=value assignments dropped, split
// at "&&", with "cd DIR" changing the directory the next ones run in; a
// command may pipe into grep, head or tail, which need no check.
func checkShell(t *testing.T, b block) {
	t.Helper()
	for _, line := range strings.Split(strings.ReplaceAll(b.text, "\\\n", " "), "\n") {
		words, err := split(line)
		if err != nil {
			t.Errorf("%s: %v: %s", b, err, line)
			continue
		}
		dir := "."
		var cmds [][]string
		for _, c := range splitAt(words, "&&") {
			pipeline := splitAt(c, "|")
			cmds = append(cmds, pipeline[0])
			for _, filter := range pipeline[1:] {
				if len(filter) == 0 || !slices.Contains([]string{"grep", "head", "tail"}, filter[0]) {
					t.Errorf("%s: no check for a pipe into %q (give it one in internal/guides)", b, strings.Join(filter, " "))
				}
			}
		}
		for _, cmd := range cmds {
			for len(cmd) > 0 && regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`).MatchString(cmd[0]) {
				cmd = cmd[1:]
			}
			if len(cmd) == 0 {
				continue
			}
			if cmd[0] == "cd" && len(cmd) == 2 {
				dir = filepath.Join(dir, cmd[1])
				if !isDir(dir) {
					t.Errorf("%s: cd %s: no such directory", b, cmd[1])
				}
				continue
			}
			if err := checkCommand(t, dir, cmd); err != "" {
				t.Errorf("%s: %s: %s", b, strings.Join(cmd, " "), err)
			}
		}
	}
}

// checkCommand checks one command run in dir (from the root), returning
// what is wrong with it, "" for nothing.
func checkCommand(t *testing.T, dir string, cmd []string) string {
	switch {
	case cmd[0] == "go" && len(cmd) >= 3 && cmd[1] == "run":
		return checkFlags(t, dir, cmd[2], cmd[3:])
	case cmd[0] == "go" && len(cmd) == 3 && cmd[1] == "install":
		return checkFlags(t, dir, cmd[2], nil)
	case cmd[0] == "go" && len(cmd) == 3 && cmd[1] == "get":
		if mod, _, _ := strings.Cut(cmd[2], "@"); mod != module {
			return "not this module, " + module
		}
		return ""
	case cmd[0] == "go" && len(cmd) >= 3 && cmd[1] == "test":
		return checkGoTest(dir, cmd[2:])
	case cmd[0] == "infermetrics-proxy":
		return checkFlags(t, dir, "./cmd/infermetrics-proxy", cmd[1:])
	case strings.HasPrefix(cmd[0], "./") && len(cmd) == 1:
		if fi, err := os.Stat(filepath.Join(root, dir, cmd[0])); err != nil || fi.Mode()&0o111 == 0 {
			return "no such executable file"
		}
		return ""
	case cmd[0] == "curl":
		return checkCurl(t, cmd[1:])
	case cmd[0] == "jb" && len(cmd) == 3 && cmd[1] == "install":
		if mod, _, _ := strings.Cut(cmd[2], "@"); mod != module {
			return "not this module, " + module
		}
		return ""
	case cmd[0] == "cp" && len(cmd) >= 3:
		return checkFiles(dir, cmd[1:len(cmd)-1])
	case cmd[0] == "kubectl":
		return checkFiles(dir, fileArgs(cmd))
	case cmd[0] == "helm":
		if err := checkFiles(dir, fileArgs(cmd)); err != "" {
			return err
		}
		return checkSetKeys(dir, cmd)
	}
	return "no check for this command (give it one in internal/guides)"
}

// checkFlags checks that pkg (from dir) is a program and that its -h lists
// each flag of args.
func checkFlags(t *testing.T, dir, pkg string, args []string) string {
	help, err := helpOf(t, dir, pkg)
	if err != "" {
		return err
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `\b`).MatchString(help) {
			return pkg + " -h lists no flag -" + name
		}
	}
	return ""
}

var (
	helpMu    sync.Mutex
	helpCache = map[string]string{}
)

// helpOf builds the program pkg in dir and returns what its -h prints, or
// the build's error.
func helpOf(t *testing.T, dir, pkg string) (help, errText string) {
	helpMu.Lock()
	defer helpMu.Unlock()
	key := filepath.Join(dir, pkg)
	if h, ok := helpCache[key]; ok {
		return h, ""
	}
	bin := filepath.Join(t.TempDir(), "prog")
	build := exec.Command(goCommand(t), "build", "-o", bin, pkg)
	build.Dir = filepath.Join(root, dir)
	if out, err := build.CombinedOutput(); err != nil {
		return "", "go build: " + err.Error() + ": " + string(out)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2 by the flag package's choice
	helpCache[key] = string(out)
	return string(out), ""
}

// checkGoTest checks that the test a -run names exists in the packages
// given (a directory, or one ending in /... and those below it).
func checkGoTest(dir string, args []string) string {
	var run, pkg string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-run" && i+1 < len(args):
			run = args[i+1]
			i++
		case strings.HasPrefix(args[i], "-"):
		default:
			pkg = args[i]
		}
	}
	if pkg == "" {
		return "no package"
	}
	base, recursive := strings.CutSuffix(pkg, "/...")
	if !isDir(filepath.Join(dir, base)) {
		return "no such package directory"
	}
	if run == "" {
		return ""
	}
	top := filepath.Join(root, dir, base)
	decl := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(run) + `\(t \*testing\.T\)`)
	found := false
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && p != top && (!recursive || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			src, err := os.ReadFile(p)
			found = err == nil && decl.Match(src)
		}
		return nil
	})
	if !found {
		return "no test " + run + " in " + pkg
	}
	return ""
}

// checkCurl checks that the URL a curl command asks for is at an address a
// program of the repository listens on by default (its -h names it; a
// default ":port" is any host's port).
func checkCurl(t *testing.T, args []string) string {
	for _, a := range args {
		u, err := url.Parse(a)
		if err != nil || u.Scheme != "http" {
			continue
		}
		for _, pkg := range []string{"./example/pd", "./cmd/infermetrics-proxy"} { // the programs whose addresses the guides curl
			help, errText := helpOf(t, ".", pkg)
			if errText != "" {
				return errText
			}
			for _, d := range regexp.MustCompile(`\(default "([^"]*)"\)`).FindAllStringSubmatch(help, -1) {
				if d[1] == u.Host || strings.HasPrefix(d[1], ":") && strings.HasSuffix(u.Host, d[1]) {
					return ""
				}
			}
		}
		return "no program of the repository listens on " + u.Host + " by default"
	}
	return "no http:// URL"
}

// fileArgs returns the arguments of a kubectl or helm command that name
// files of the repository: the values of -f and, for helm install, the
// chart.
func fileArgs(cmd []string) []string {
	var files []string
	for i := 1; i < len(cmd); i++ {
		switch {
		case (cmd[i] == "-f" || cmd[i] == "--filename" || cmd[i] == "--values") && i+1 < len(cmd):
			files = append(files, cmd[i+1])
			i++
		case cmd[0] == "helm" && i == 3 && cmd[1] == "install":
			files = append(files, cmd[i])
		}
	}
	return files
}

// checkSetKeys checks that each key a helm command's --set names is a
// key of its chart's values.yaml: each dotted part a key at its depth.
func checkSetKeys(dir string, cmd []string) string {
	if len(cmd) < 4 {
		return "no chart"
	}
	values, err := os.ReadFile(filepath.Join(root, dir, cmd[3], "values.yaml"))
	if err != nil {
		return err.Error()
	}
	for i := 1; i+1 < len(cmd); i++ {
		if cmd[i] != "--set" {
			continue
		}
		key, _, _ := strings.Cut(cmd[i+1], "=")
		for depth, part := range strings.Split(key, ".") {
			if !regexp.MustCompile(`(?m)^` + strings.Repeat("  ", depth) + regexp.QuoteMeta(part) + `:`).Match(values) {
				return "the chart's values.yaml has no key " + key
			}
		}
	}
	return ""
}

// checkFiles checks that each path names a file or directory of the
// repository (from dir).
func checkFiles(dir string, paths []string) string {
	if len(paths) == 0 {
		return "names no file of the repository"
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(root, dir, p)); err != nil {
			return "no such file " + p
		}
	}
	return ""
}

func isDir(path string) bool {
	fi, err := os.Stat(filepath.Join(root, path))
	return err == nil && fi.IsDir()
}

// splitAt splits words at each sep.
func splitAt(words []string, sep string) [][]string {
	var out [][]string
	var cur []string
	for _, w := range words {
		if w == sep {
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

// split splits a shell line into words as sh does for the quoting the
// guides use (single and double quotes, backslashes), up to a comment.
func split(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word is under way
		quote rune
	)
	for i := 0; i < len(line); i++ {
		c := rune(line[i])
		switch {
		case quote == '\'' && c != '\'', quote == '"' && c != '"' && c != '\\':
			cur.WriteRune(c)
		case quote != 0 && c == quote:
			quote = 0
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			in = true
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '#' && !in:
			return append(words, flush(&cur, in)...), nil
		case c == ' ' || c == '\t':
			words = append(words, flush(&cur, in)...)
			in = false
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, errUnclosedQuote
	}
	return append(words, flush(&cur, in)...), nil
}

type shellError string

func (e shellError) Error() string { return string(e) }

const errUnclosedQuote = shellError("an unclosed quote")

// flush returns the word under way, if any, and starts the next.
func flush(cur *strings.Builder, in bool) []string {
	if !in {
		return nil
	}
	w := cur.String()
	cur.Reset()
	return []string{w}
}
