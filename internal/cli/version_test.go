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

	"github.com/spf13/pflag"
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

// TestMainHelper is not a test: the tests below run the test binary
// again with STINT_CLI_HELPER set and the command's arguments after
// "--", and this runs Main there, as command "demo" with subcommands
// "sub" and "other" (flags --foo and --bar).
func TestMainHelper(t *testing.T) {
	mode := os.Getenv("STINT_CLI_HELPER")
	if mode == "" {
		return
	}
	args := []string{}
	for i, a := range os.Args {
		if a == "--" {
			args = os.Args[i+1:]
			break
		}
	}
	os.Args = append([]string{"demo"}, args...)
	Main("demo", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		switch mode {
		case "wait":
			os.Stdout.WriteString("ready\n")
			<-ctx.Done()
			return ctx.Err()
		case "sub":
			Subcommands(args, "sub", "other")
			fs := pflag.NewFlagSet("sub", pflag.ContinueOnError)
			fs.Bool("foo", false, "")
			fs.Bool("bar", false, "")
			return ParseFlags(fs, "demo", args[1:])
		}
		return errors.New("ran")
	})
}

// helper runs the helper in mode with args; stdout, stderr, exit code.
func helper(t *testing.T, mode string, args ...string) (string, string, int) {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestMainHelper$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "STINT_CLI_HELPER="+mode)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestMainExitStatus: --version prints the version and exits 0 without
// running the command; SIGINT stops a run with status 130, SIGTERM 143.
func TestMainExitStatus(t *testing.T) {
	if out, _, code := helper(t, "run", "--version"); code != 0 || !strings.HasPrefix(out, "demo (stint) ") {
		t.Errorf("--version: exit %d, stdout %q", code, out)
	}
	if _, stderr, code := helper(t, "run"); code != 1 || !strings.Contains(stderr, "demo: ran") {
		t.Errorf("plain error: exit %d, stderr %q", code, stderr)
	}
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainHelper$", "--")
		cmd.Env = append(os.Environ(), "STINT_CLI_HELPER=wait")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("helper did not start: %q %v", buf, err)
		}
		time.Sleep(10 * time.Millisecond)
		cmd.Process.Signal(sig)
		io.Copy(io.Discard, out)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != want || !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("%v: exit %d, want %d; stderr %q", sig, code, want, stderr.String())
		}
	}
}
