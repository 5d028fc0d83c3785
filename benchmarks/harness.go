// Package benchmarks holds stint's end-to-end benchmark harness: it
// rewrites real programs of this machine, runs them natively, rewritten
// (default and --every) and under the dynamic instrumenter a user would
// otherwise reach for (callgrind's branch profile), in the same run, and
// reports medians and ratios. It is not run by CI: `make bench`.
package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config says where the stint commands are and where to work.
type Config struct {
	Rewrite string // path of the rewrite command
	// Other is another build's rewrite command, measured beside Rewrite
	// in the same rounds (a before/after comparison); "" = none.
	Other   string
	WorkDir string // scratch directory (inputs, rewritten binaries, traces)
	Runs    int    // timed runs per variant (median reported)
	Log     io.Writer
}

// Timing is the result of running one variant several times.
type Timing struct {
	Variant string          `json:"variant"`
	Seconds []float64       `json:"seconds"`
	Median  float64         `json:"median"`
	Ratio   float64         `json:"ratio_to_native"`
	Note    string          `json:"note,omitempty"`
	Extra   json.RawMessage `json:"extra,omitempty"`
}

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Cmd is one command line to time, with its environment additions.
type Cmd struct {
	Argv  []string
	Env   []string
	Stdin string // file to feed on stdin ("" = none)
	Out   string // file to write stdout to ("" = discard)
	// Pin runs the command on the CPU [PinCPU] names (the program
	// measured, not the tools around it).
	Pin bool
}

// PinCPU is the CPU that measured programs run on (through taskset), or
// -1 to let the scheduler choose. The two vCPUs of the VM these numbers
// come from often differ in speed by up to 1.75x for minutes at a time
// (sqlite3 workload: 0.42-0.45 s on one, 0.72-0.78 s on the other, in
// the same minute), so a native run and a traced run that land on
// different CPUs give a ratio that says nothing about stint. Pinned,
// every thread of the program shares that CPU, the runtime's period
// thread included: its work is paid by the program, never hidden on an
// idle core.
var PinCPU = -1

// pinned returns argv run through taskset on cpu (argv itself when cpu
// is negative).
func pinned(argv []string, cpu int) []string {
	if cpu < 0 {
		return argv
	}
	return append([]string{"taskset", "--cpu-list", strconv.Itoa(cpu)}, argv...)
}

// otherCPU is a CPU other than PinCPU for a measured program's client
// (redis-benchmark, wrk), or -1 when nothing is pinned or there is no
// other CPU.
func otherCPU() int {
	if PinCPU < 0 || runtime.NumCPU() < 2 {
		return -1
	}
	if PinCPU == 0 {
		return 1
	}
	return 0
}

// hostDesc names the machine for a report: host name, CPUs, where the
// measured programs ran, and how fast it ran then (speedProbe).
func hostDesc() string {
	host, _ := os.Hostname()
	s := fmt.Sprintf("%s %d cores", host, runtime.NumCPU())
	if PinCPU >= 0 {
		s += fmt.Sprintf(", measured programs pinned to CPU %d", PinCPU)
		if o := otherCPU(); o >= 0 {
			s += fmt.Sprintf(" (their clients to CPU %d)", o)
		}
	}
	return s + "; " + speedProbe()
}

// CheckPin says whether pinning to PinCPU can work here.
func CheckPin() error {
	if PinCPU < 0 {
		return nil
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("--cpu %d needs taskset (util-linux): %w", PinCPU, err)
	}
	if PinCPU >= runtime.NumCPU() {
		return fmt.Errorf("--cpu %d: this machine has CPUs 0-%d", PinCPU, runtime.NumCPU()-1)
	}
	return nil
}

// RunOnce runs c and returns its wall time.
func RunOnce(ctx context.Context, c Cmd) (time.Duration, error) {
	argv := c.Argv
	if c.Pin {
		argv = pinned(argv, PinCPU)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if c.Stdin != "" {
		f, err := os.Open(c.Stdin)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	if c.Out != "" {
		f, err := os.Create(c.Out)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		cmd.Stdout = f
	}
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %w: %s", strings.Join(c.Argv, " "), err, lastLine(stderr.String()))
	}
	return d, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Time runs each variant cfg.Runs times, interleaved (variant order rotates
// every round) so that drift of a noisy machine hits all variants alike,
// and returns timings in variant order with ratios to the first variant.
func Time(ctx context.Context, cfg Config, names []string, cmds []Cmd, runs []int) ([]Timing, error) {
	res := make([]Timing, len(cmds))
	for i := range cmds {
		res[i].Variant = names[i]
	}
	maxRuns := 0
	for _, r := range runs {
		maxRuns = max(maxRuns, r)
	}
	for round := 0; round < maxRuns; round++ {
		for k := range cmds {
			i := (k + round) % len(cmds)
			if round >= runs[i] {
				continue
			}
			d, err := RunOnce(ctx, cmds[i])
			if err != nil {
				return nil, err
			}
			res[i].Seconds = append(res[i].Seconds, d.Seconds())
			if cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "  %-28s run %d: %.3fs\n", names[i], round+1, d.Seconds())
			}
		}
	}
	for i := range res {
		res[i].Median = Median(res[i].Seconds)
		if res[0].Median > 0 {
			res[i].Ratio = res[i].Median / res[0].Median
		}
	}
	return res, nil
}

// TextInput writes a deterministic, text-like file of n bytes (Zipf-
// distributed words) that compresses about as well as English prose.
func TextInput(path string, n int64) error {
	if st, err := os.Stat(path); err == nil && st.Size() == n {
		return nil
	}
	r := rand.New(rand.NewSource(1))
	words := make([]string, 5000)
	for i := range words {
		l := 2 + r.Intn(9)
		b := make([]byte, l)
		for j := range b {
			b[j] = "etaoinshrdlucmfwypvbgkjqxz"[min(25, int(r.ExpFloat64()*5))]
		}
		words[i] = string(b)
	}
	z := rand.NewZipf(r, 1.1, 1, uint64(len(words)-1))
	var buf bytes.Buffer
	for int64(buf.Len()) < n {
		buf.WriteString(words[z.Uint64()])
		if r.Intn(12) == 0 {
			buf.WriteString(".\n")
		} else {
			buf.WriteByte(' ')
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes()[:n], 0o644)
}
