package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", errors.New("boom"), 1},
		{"usage", Usagef("bad flag %q", "x"), 2},
		{"wrapped usage", fmt.Errorf("compare: %w", Usagef("no runs")), 2},
		{"child status", &ExitStatus{Code: 7}, 7},
		{"wrapped status", fmt.Errorf("run: %w", &ExitStatus{Code: 130, Msg: "killed"}), 130},
	}
	for _, tt := range tests {
		if have := ExitCode(tt.err); have != tt.want {
			t.Errorf("%s: have %d, want %d", tt.name, have, tt.want)
		}
	}
	inner := errors.New("inner")
	if ue := Usagef("wrap: %w", inner); !errors.Is(ue, inner) {
		t.Errorf("Usagef does not wrap %%w: %v", ue)
	}
}

func TestParseFlags(t *testing.T) {
	fs := pflag.NewFlagSet("build", pflag.ContinueOnError)
	n := fs.Int("top", 10, "")
	if err := ParseFlags(fs, "cct", []string{"--top", "3", "a.arrow"}); err != nil || *n != 3 || fs.NArg() != 1 {
		t.Fatalf("good flags: %v, top %d, %d args", err, *n, fs.NArg())
	}
	fs = pflag.NewFlagSet("build", pflag.ContinueOnError)
	fs.Int("top", 10, "")
	err := ParseFlags(fs, "cct", []string{"--top", "x"})
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "run 'cct build --help'") {
		t.Errorf("bad value: %v (exit %d), want a usage error pointing at the help", err, ExitCode(err))
	}
	fs = pflag.NewFlagSet("rewrite", pflag.ContinueOnError)
	err = ParseFlags(fs, "rewrite", []string{"--nope"})
	if ExitCode(err) != ExitUsage || !strings.HasSuffix(err.Error(), "(run 'rewrite --help')") || strings.HasPrefix(err.Error(), "rewrite:") {
		t.Errorf("a command without subcommands: %v, want a usage error pointing at its help", err)
	}
	fs = pflag.NewFlagSet("build", pflag.ContinueOnError)
	if err := ParseFlags(fs, "cct", []string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: %v, want pflag.ErrHelp", err)
	}
}
