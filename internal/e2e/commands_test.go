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
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not found")
	}
	bin := t.TempDir()
	if out, err := exec.Command(goCmd, "build", "-o", bin+"/", "../../cmd/...").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name  string
		words []string
		want  string // a line the completion must offer
	}{
		{"rewrite", []string{"--ev"}, "--every"},
		{"trace", []string{"c"}, "cat"},
		{"trace", []string{"export", "--fo"}, "--format"},
		{"trace", []string{"log", "m"}, "merge"},
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
