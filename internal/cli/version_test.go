package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWantsVersion(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--version"}, true},
		{[]string{"cat", "--version"}, true},
		{[]string{"-o", "x", "--version", "in"}, true},
		{[]string{"--", "--version"}, false},
		{[]string{"--versions"}, false},
		{[]string{"version"}, false},
	} {
		if have := wantsVersion(c.args); have != c.want {
			t.Errorf("wantsVersion(%q) = %v, want %v", c.args, have, c.want)
		}
	}
}

func TestVersionNamesCommandAndToolchain(t *testing.T) {
	v := Version("trace")
	if !strings.HasPrefix(v, "trace (stint) ") || !strings.Contains(v, "go1.") {
		t.Errorf("Version = %q", v)
	}
}

// TestMainHelper is not a test: TestMainExitStatus runs the test binary
// again with STINT_CLI_HELPER set, and this runs Main there.
func TestMainHelper(t *testing.T) {
	mode := os.Getenv("STINT_CLI_HELPER")
	if mode == "" {
		return
	}
	os.Args = append([]string{"demo"}, strings.Fields(os.Getenv("STINT_CLI_ARGS"))...)
	Main("demo", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if mode == "wait" {
			os.Stdout.WriteString("ready\n")
			<-ctx.Done()
			return ctx.Err()
		}
		return errors.New("ran")
	})
}

// TestMainExitStatus: --version prints the version and exits 0 without
// running the command; SIGINT stops a run with status 130, SIGTERM 143.
func TestMainExitStatus(t *testing.T) {
	run := func(mode, args string, sig syscall.Signal) (string, string, int) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainHelper$")
		cmd.Env = append(os.Environ(), "STINT_CLI_HELPER="+mode, "STINT_CLI_ARGS="+args)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if sig != 0 {
			buf := make([]byte, 6)
			if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
				t.Fatalf("helper did not start: %q %v", buf, err)
			}
			time.Sleep(10 * time.Millisecond)
			cmd.Process.Signal(sig)
		}
		io.Copy(&got, out)
		cmd.Wait()
		return got.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	if out, _, code := run("run", "--version", 0); code != 0 || !strings.HasPrefix(out, "demo (stint) ") {
		t.Errorf("--version: exit %d, stdout %q", code, out)
	}
	if _, stderr, code := run("run", "", 0); code != 1 || !strings.Contains(stderr, "demo: ran") {
		t.Errorf("plain error: exit %d, stderr %q", code, stderr)
	}
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		if _, stderr, code := run("wait", "", sig); code != want || !strings.Contains(stderr, "interrupted") {
			t.Errorf("%v: exit %d, want %d; stderr %q", sig, code, want, stderr)
		}
	}
}
