package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestComplete: `demo __complete WORDS...` offers the subcommands that
// start with the first word, the flags that start with a later one, and
// nothing (the shell's file names) otherwise.
func TestComplete(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{""}, "sub\nother\n"},
		{[]string{"o"}, "other\n"},
		{[]string{"sub", "--f"}, "--foo\n"},
		{[]string{"sub", "--"}, "--bar\n--foo\n--help\n"},
		{[]string{"sub", "--foo", "fi"}, ""},
		{[]string{"nosuch", "--f"}, "--foo\n"}, // the command parses; it would refuse later
	} {
		out, _, code := helper(t, "sub", append([]string{"__complete"}, c.words...)...)
		if code != 0 || out != c.want {
			t.Errorf("%q: exit %d, offered %q, want %q", c.words, code, out, c.want)
		}
	}
	if _, stderr, code := helper(t, "sub", "--completion", "tcsh"); code != ExitUsage || !strings.Contains(stderr, "unknown shell") {
		t.Errorf("--completion tcsh: exit %d, stderr %q", code, stderr)
	}
}

// TestCompletionScripts: each shell's script is what that shell accepts;
// bash's and fish's, sourced, complete through the command (zsh's is
// only parsed: its completion needs an interactive shell).
func TestCompletionScripts(t *testing.T) {
	dir := t.TempDir()
	// demo on PATH is the helper in "sub" mode
	wrapper := "#!/bin/sh\nSTINT_CLI_HELPER=sub exec " + os.Args[0] + " -test.run='^TestMainHelper$' -- \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "demo"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	for _, shell := range []string{"bash", "zsh", "fish"} {
		script, _, code := helper(t, "sub", "--completion", shell)
		if code != 0 || !strings.Contains(script, "demo __complete") {
			t.Fatalf("%s: exit %d, script %q", shell, code, script)
		}
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s not installed: its script is not run", shell)
			continue
		}
		f := filepath.Join(dir, "demo."+shell)
		os.WriteFile(f, []byte(script), 0o644)
		var check *exec.Cmd
		switch shell {
		case "bash":
			check = exec.Command("bash", "-c", `source "$1"; COMP_WORDS=(demo sub --f); COMP_CWORD=2; _stint_demo; printf '%s\n' "${COMPREPLY[@]}"`, "-", f)
		case "zsh":
			check = exec.Command("zsh", "-n", f)
		case "fish":
			check = exec.Command("fish", "-c", `source $argv[1]; complete -C 'demo sub --f'`, f)
		}
		check.Env = env
		out, err := check.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", shell, err, out)
		}
		if shell != "zsh" && !strings.HasPrefix(string(out), "--foo") {
			t.Errorf("%s completed %q, want --foo", shell, out)
		}
	}
}
