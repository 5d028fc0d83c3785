package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/merge"
)

func TestMergeCLI(t *testing.T) {
	fs := files(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "m.arrow")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"merge", "-o", out, fs["good.arrow"], fs["cut.arrow"], fs["zeros.arrow"]}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if s := stdout.String(); !strings.Contains(s, "cut.arrow: cut short") || !strings.Contains(s, "3 runs from 3 files") {
		t.Errorf("stdout:\n%s", s)
	}
	r, err := merge.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rows := 0
	runs := map[int]int{}
	for r.Next() {
		b := r.Batch()
		for i := 0; i < b.Len(); i++ {
			runs[b.RunOf(i)]++
			rows++
		}
	}
	// good: 5 events; cut: the 4 of its complete batches; zeros: all 5.
	if r.Err() != nil || len(r.Runs()) != 3 || runs[0] != 5 || runs[1] != 4 || runs[2] != 5 || len(r.Modules()) != 2 {
		t.Errorf("merged: err %v, %d runs, rows per run %v, %d modules", r.Err(), len(r.Runs()), runs, len(r.Modules()))
	}

	// A merged file merges again, and `trace stats` is not confused.
	out2 := filepath.Join(dir, "m2.arrow")
	if err := run(context.Background(), []string{"merge", "-o", out2, out, fs["good.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"merge", fs["good.arrow"]}, 2, "-o OUT"},
		{[]string{"merge", "-o", out}, 2, "no input"},
		{[]string{"merge", "-o", filepath.Join(dir, "x.arrow"), fs["good.arrow"], fs["text.arrow"]}, 1, "text.arrow"},
		{[]string{"merge", "-o", filepath.Join(dir, "x.arrow"), fs["other.arrow"]}, 1, "other.arrow"},
	} {
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if have := exitCode(err); have != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: exit %d (%v), want %d and %q", tt.args, have, err, tt.code, tt.want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "x.arrow*")); len(matches) != 0 {
		t.Errorf("failed merges left %v", matches)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".x.arrow*")); len(matches) != 0 {
		t.Errorf("failed merges left %v", matches)
	}
}
