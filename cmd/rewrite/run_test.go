package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/rewrite"
)

func TestRunUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout (help) or the error
	}{
		{"help", []string{"--help"}, 0, "STINT_OUT"},
		{"no args", nil, 2, "want exactly one input file"},
		{"no -o", []string{"/usr/bin/gzip"}, 2, "missing -o OUT"},
		{"bad tool", []string{"--tool", "nope", "-o", "x", "y"}, 2, "unknown tool"},
		{"bad flag", []string{"--frobnicate"}, 2, "unknown flag"},
		{"bad budget", []string{"--budget", "200%", "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 2, "want a percentage"},
		{"bad sample", []string{"--sample", "bogus", "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 2, "unknown method"},
		{"period without budget", []string{"--period", "1s", "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 2, "a period needs a budget"},
		{"not ELF", []string{"-o", filepath.Join(t.TempDir(), "out"), "/etc/hostname"}, 1, "not an ELF file"},
		{"missing input", []string{"-o", filepath.Join(t.TempDir(), "out"), "/nonexistent"}, 1, "no such file"},
		{"skip-covered not a log", []string{"--skip-covered", "/etc/hostname", "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 1, "--skip-covered"},
		{"retire-since not a log", []string{"--skip-covered", exactLog(t), "--retire-since", "/etc/hostname", "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 1, "--retire-since"},
		{"skip-covered region log", []string{"--skip-covered", hashLog(t), "-o", filepath.Join(t.TempDir(), "out"), "/usr/bin/gzip"}, 1, "only an exact log"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			code := cli.ExitCode(err)
			if code != tc.code {
				t.Errorf("exit %d, want %d (err %v)", code, tc.code, err)
			}
			got := stdout.String() + stderr.String()
			if err != nil {
				got += err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("output %q lacks %q", got, tc.want)
			}
			if code != 0 && strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err.Error())
			}
			if code == 2 && !strings.Contains(err.Error(), "rewrite --help") {
				t.Errorf("usage error %q does not point at the help", err.Error())
			}
		})
	}
}

func TestRunRewrite(t *testing.T) {
	const in = "/usr/bin/gzip"
	if _, err := os.Stat(in); err != nil {
		t.Skip("no gzip")
	}
	dir := t.TempDir()
	out, stats := filepath.Join(dir, "gzip"), filepath.Join(dir, "stats.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--tool", "call", "--stats-json", stats, "-o", out, in}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "sites") || stdout.Len() != 0 {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	var j map[string]any
	b, err := os.ReadFile(stats)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sites", "patched", "fallback", "failed", "reasons"} {
		if _, ok := j[k]; !ok {
			t.Errorf("stats lack %q", k)
		}
	}
	if j["tool"] != "call" {
		t.Errorf("tool %v", j["tool"])
	}
	// -q prints nothing; rewriting the output again fails with exit 1.
	stderr.Reset()
	err = run(context.Background(), []string{"-q", "-o", out + "2", out}, &stdout, &stderr)
	if code := cli.ExitCode(err); code != 1 || err == nil || !strings.Contains(err.Error(), "already rewritten") || stderr.Len() != 0 {
		t.Errorf("second rewrite: exit %d, %v, stderr %q", code, err, stderr.String())
	}
	if _, err := os.Stat(out + "2"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output of a failed rewrite exists: %v", err)
	}
}

// TestSummaryEdges: the summary names the jccs left to edge probes among
// the patched sites, and the edge probes themselves.
func TestSummaryEdges(t *testing.T) {
	st := &rewrite.Stats{Module: "shared", Tool: "branch", Sites: 10, Patched: map[string]int{"B1": 6, "edge": 3},
		EdgeProbes: 4, EdgeFailed: 1, Reasons: map[string]*rewrite.Reason{}}
	s := summary("lib.so", st)
	for _, want := range []string{"10 sites, 9 patched (B1 6, jccs probed at their destinations 3)", "4 edge probes (1 destinations could not be patched)"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
}

// exactLog writes an empty exact redundancy log.
func exactLog(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "exact.log")
	if err := os.WriteFile(p, redlog.EncodeHeader(redlog.Exact), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// hashLog writes an empty log of the DIME* hash policy.
func hashLog(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "hash.log")
	if err := os.WriteFile(p, redlog.EncodeHeader(redlog.Hash), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCodeBytes: the memory limit follows the code of the input, which
// for a Go test binary is its .text (and a little more), less than the
// file; a file that is not ELF gives 0 (no limit set).
func TestCodeBytes(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if n := codeBytes(exe); n <= 0 || n >= fi.Size() {
		t.Errorf("codeBytes(%s) = %d of a %d-byte file", exe, n, fi.Size())
	}
	text := filepath.Join(t.TempDir(), "text")
	if err := os.WriteFile(text, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := codeBytes(text); n != 0 {
		t.Errorf("codeBytes of a text file = %d, want 0", n)
	}
}
