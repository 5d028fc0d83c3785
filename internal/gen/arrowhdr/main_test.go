package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCommittedHeader fails when runtime/include/stint_arrow.h is not
// what the generator writes now; regenerate with
// go run ./internal/gen/arrowhdr -o runtime/include/stint_arrow.h
func TestCommittedHeader(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", "..", "..", "runtime", "include", "stint_arrow.h"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), committed) {
		t.Fatal("runtime/include/stint_arrow.h is stale: run go run ./internal/gen/arrowhdr -o runtime/include/stint_arrow.h")
	}
	// Same bytes on a second run, and through -o.
	name := filepath.Join(t.TempDir(), "h.h")
	if err := run(context.Background(), []string{"-o", name}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(name); !bytes.Equal(b, committed) {
		t.Fatal("-o output differs")
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"extra"}, {"--bogus"}} {
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
}
