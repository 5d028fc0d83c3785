package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsConventions builds every command and checks what each
// answers the way a shell and a script use it: --version, and completion
// of its subcommands and flags through `NAME __complete`.
func TestCommandsConventions(t *testing.T) {
	bin := buildCommands(t)
	for _, c := range []struct {
		name  string
		words []string
		want  string // a line the completion must offer
	}{
		{"rewrite", []string{"--ev"}, "--every"},
		{"trace", []string{"c"}, "cat"},
		{"trace", []string{"export", "--fo"}, "--format"},
		{"trace", []string{"log", "m"}, "merge"},
		{"trace", []string{"s"}, "sql"},
		{"trace-sql", []string{"--fo"}, "--format"},
		{"cov", []string{""}, "compare"},
		{"cov", []string{"compare", "--fu"}, "--functions"},
		{"cct", []string{"b"}, "build"},
		{"qos", []string{"w"}, "watch"},
		{"report", []string{"a"}, "auto"},
	} {
		path := filepath.Join(bin, c.name)
		out, err := exec.Command(path, "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), c.name+" (stint) ") {
			t.Errorf("%s --version: %q, %v", c.name, out, err)
		}
		out, err = exec.Command(path, append([]string{"__complete"}, c.words...)...).Output()
		if err != nil || !strings.Contains("\n"+string(out), "\n"+c.want+"\n") {
			t.Errorf("%s __complete %q: %q, %v; want %s among them", c.name, c.words, out, err, c.want)
		}
	}
}

// TestHelpNamesEveryFlag: each command's and subcommand's --help names
// every flag its flag set has (as completion lists them), so the help
// cannot fall behind the flags.
func TestHelpNamesEveryFlag(t *testing.T) {
	bin := buildCommands(t)
	for _, c := range [][]string{
		{"rewrite"},
		{"trace", "cat"}, {"trace", "stats"}, {"trace", "merge"}, {"trace", "export"}, {"trace", "sql"}, {"trace-sql"},
		{"trace", "log", "show"}, {"trace", "log", "check"}, {"trace", "log", "add"}, {"trace", "log", "merge"},
		{"cov", "compare"}, {"cct", "build"}, {"cct", "compare"},
		{"qos", "run"}, {"qos", "watch"}, {"qos", "show"},
		{"report", "auto"}, {"report", "render"},
	} {
		path := filepath.Join(bin, c[0])
		flags, err := exec.Command(path, append(append([]string{"__complete"}, c[1:]...), "--")...).Output()
		if err != nil || len(flags) == 0 {
			t.Errorf("%q: no flags completed: %v", c, err)
			continue
		}
		help, _ := exec.Command(path, append(c[1:], "--help")...).CombinedOutput()
		for _, f := range strings.Fields(string(flags)) {
			if f != "--help" && !strings.Contains(string(help), f) {
				t.Errorf("%s --help does not name %s", strings.Join(c, " "), f)
			}
		}
	}
}

// buildCommands builds every command into a directory it returns.
func buildCommands(t *testing.T) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not found")
	}
	bin := t.TempDir()
	if out, err := exec.Command(goCmd, "build", "-o", bin+"/", "../../cmd/...").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
