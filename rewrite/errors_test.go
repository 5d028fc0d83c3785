package rewrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/runtime"
)

// mutate returns a copy of b with f applied.
func mutate(b []byte, f func([]byte) []byte) []byte { return f(append([]byte(nil), b...)) }

func TestBadInputs(t *testing.T) {
	gz := readInput(t, gzipPath)
	le := binary.LittleEndian
	var fe *FormatError
	tests := []struct {
		name string
		in   []byte
		want error // sentinel, or nil for "a *FormatError"
	}{
		{"empty", nil, ErrNotELF},
		{"text", []byte("#!/bin/sh\necho hi\n"), ErrNotELF},
		{"ident only", gz[:16], ErrTruncated},
		{"header cut", gz[:40], ErrTruncated},
		{"32-bit", mutate(gz, func(b []byte) []byte { b[4] = 1; return b }), ErrNot64},
		{"big-endian", mutate(gz, func(b []byte) []byte { b[5] = 2; return b }), ErrNot64},
		{"aarch64", mutate(gz, func(b []byte) []byte { le.PutUint16(b[18:], 183); return b }), ErrNotX86_64},
		{"relocatable", mutate(gz, func(b []byte) []byte { le.PutUint16(b[16:], 1); return b }), ErrNotExecutable},
		{"core", mutate(gz, func(b []byte) []byte { le.PutUint16(b[16:], 4); return b }), ErrNotExecutable},
		{"phdrs past end", mutate(gz, func(b []byte) []byte { le.PutUint64(b[32:], uint64(len(b))-10); return b }), ErrTruncated},
		{"phentsize", mutate(gz, func(b []byte) []byte { le.PutUint16(b[54:], 32); return b }), nil},
		{"no phdrs", mutate(gz, func(b []byte) []byte { le.PutUint16(b[56:], 0); return b }), nil},
		{"truncated file", gz[:len(gz)/2], ErrTruncated},
		{"shdrs past end", mutate(gz, func(b []byte) []byte { le.PutUint16(b[60:], 60000); return b }), ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := RewriteBytes(tc.in, Options{Blob: testBlob()})
			if err == nil {
				t.Fatalf("no error (%d bytes out, %+v)", len(out), st)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("have %v, want %v", err, tc.want)
			}
			if tc.want == nil && !errors.As(err, &fe) {
				t.Errorf("have %T %v, want *FormatError", err, err)
			}
			if errors.As(err, &fe) && fe.Off < 0 {
				t.Errorf("negative offset in %v", err)
			}
		})
	}
}

func TestBadBlob(t *testing.T) {
	gz := readInput(t, gzipPath)
	blob := testBlob()
	blob[runtime.BlobOffVersion] = 99
	if _, _, err := RewriteBytes(gz, Options{Blob: blob}); !errors.Is(err, ErrNoBlob) {
		t.Errorf("bad blob version: %v", err)
	}
}

// TestRewriteFileErrors: no output (and no temporary file) after an error.
func TestRewriteFileErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if _, err := RewriteFile(notELF, out, Options{Blob: testBlob()}); !errors.Is(err, ErrNotELF) {
		t.Errorf("have %v, want ErrNotELF", err)
	}
	if _, err := RewriteFile(filepath.Join(dir, "missing"), out, Options{Blob: testBlob()}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing input: %v", err)
	}
	if _, err := RewriteFile(dir, out, Options{Blob: testBlob()}); err == nil {
		t.Error("directory input accepted")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after failed rewrites, want only the input", len(entries))
	}
	if _, err := os.Stat(gzipPath); err != nil {
		t.Skip("no gzip")
	}
	// Unwritable output directory.
	if _, err := RewriteFile(gzipPath, filepath.Join(dir, "nodir", "out"), Options{Blob: testBlob()}); err == nil {
		t.Error("output in a missing directory accepted")
	}
	// Success keeps the mode and leaves no temporary file.
	st, err := RewriteFile(gzipPath, out, Options{Blob: testBlob()})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	ofi, _ := os.Stat(gzipPath)
	if fi.Mode().Perm() != ofi.Mode().Perm() {
		t.Errorf("mode %v, input %v", fi.Mode(), ofi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("directory holds %d entries, want 2", len(entries))
	}
	if st.Sites == 0 {
		t.Error("no sites")
	}
	// The output is refused as input.
	if _, err := RewriteFile(out, out+"2", Options{Blob: testBlob()}); !errors.Is(err, ErrAlreadyRewritten) {
		t.Errorf("second rewrite: %v", err)
	}
}

func FuzzRewrite(f *testing.F) {
	for _, p := range []string{"testdata/tiny", "testdata/tiny.so"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	blob := testBlob()
	f.Fuzz(func(t *testing.T, b []byte) {
		out, st, err := RewriteBytes(b, Options{Blob: blob, Tool: Tool(1 + len(b)%4)})
		if err != nil {
			return
		}
		if st == nil || len(out) < len(b) {
			t.Fatalf("success with %d bytes out of %d", len(out), len(b))
		}
		if !bytes.Equal(out[:4], b[:4]) {
			t.Fatal("magic changed")
		}
	})
}
