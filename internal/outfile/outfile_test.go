package outfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func write(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// TestRegular: a new path and an existing one get the output whole, with
// the mode given; a failed write leaves the old file and no temporary.
func TestRegular(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	for _, s := range []string{"first", "second"} {
		if err := Write(p, 0o640, write(s)); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(b) != s || fi.Mode().Perm() != 0o640 {
			t.Errorf("%q (mode %v), want %q (0640)", b, fi.Mode().Perm(), s)
		}
	}
	bad := errors.New("bad")
	if err := Write(p, 0o644, func(w io.Writer) error { io.WriteString(w, "half"); return bad }); !errors.Is(err, bad) {
		t.Errorf("a failed write: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "second" {
		t.Errorf("after a failed write: %q, want the old file", b)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("%d files left, want 1: %v", len(left), left)
	}
	if err := Write(dir, 0o644, write("x")); err == nil {
		t.Error("a directory as output: no error")
	}
}

// TestSpecial: a null device stays a device (renamed over, as root, it
// became a regular file: /dev/null did), and a FIFO's reader gets the
// output. The device is a node of /dev/null's numbers made here, so
// that a regression breaks no machine's /dev/null.
func TestSpecial(t *testing.T) {
	null := filepath.Join(t.TempDir(), "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		null = os.DevNull // not root: a rename over it fails, and the copy is tested all the same
	}
	if err := Write(null, 0o644, write("discarded")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("%s after the write: %v, %v (want a character device)", null, fi.Mode(), err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	got := make(chan string)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := Write(fifo, 0o644, write("through the pipe")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Errorf("the FIFO's reader got %q", s)
	}
	if fi, _ := os.Stat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v", fi.Mode())
	}
}
