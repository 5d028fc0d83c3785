package redlog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// appender appends rounds times: each round one entry of its own and one
// shared by every appender, in module A, and one of its own in module B.
func appender(path string, who, rounds int) error {
	for r := range rounds {
		own := Entry{A: uint64(who)<<32 | uint64(r), B: 1, DstMod: 0, Kind: 1}
		shared := Entry{A: uint64(r), B: 2, Kind: 2}
		_, err := Append(path, Exact, map[string][]Entry{idA: {own, shared}, idB: {own}})
		if err != nil {
			return fmt.Errorf("appender %d round %d: %w", who, r, err)
		}
	}
	return nil
}

// checkAppenders checks that a log written by appenders 0..n-1 holds all
// their entries, each once, and nothing else.
func checkAppenders(t *testing.T, path string, n, rounds int) {
	t.Helper()
	l, probs, err := ReadFile(path)
	if err != nil || len(probs) != 0 {
		t.Fatalf("ReadFile: %v %v", err, probs)
	}
	if want := 2*n*rounds + rounds; l.Distinct() != want || l.Entries != want {
		t.Errorf("%d distinct, %d stored entries; want %d each", l.Distinct(), l.Entries, want)
	}
	for who := range n {
		for r := range rounds {
			own := Entry{A: uint64(who)<<32 | uint64(r), B: 1, Kind: 1}
			if !l.Has(idA, own) || !l.Has(idB, own) {
				t.Fatalf("lost appender %d round %d", who, r)
			}
		}
	}
	for r := range rounds {
		if !l.Has(idA, Entry{A: uint64(r), B: 2, Kind: 2}) {
			t.Fatalf("lost shared entry %d", r)
		}
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	const n, rounds = 8, 25
	path := filepath.Join(t.TempDir(), "g.log")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for who := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- appender(path, who, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkAppenders(t, path, n, rounds)
}

const helperEnv = "STINT_REDLOG_APPENDER" // "path,who,rounds"

// TestHelperAppender is the child of TestConcurrentProcesses.
func TestHelperAppender(t *testing.T) {
	v := os.Getenv(helperEnv)
	if v == "" {
		t.Skip("helper process for TestConcurrentProcesses")
	}
	var path string
	var who, rounds int
	if _, err := fmt.Sscanf(v, "%s %d %d", &path, &who, &rounds); err != nil {
		t.Fatal(err)
	}
	if err := appender(path, who, rounds); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentProcesses(t *testing.T) {
	const n, rounds = 4, 30
	path := filepath.Join(t.TempDir(), "p.log")
	var cmds []*exec.Cmd
	for who := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+path+" "+strconv.Itoa(who)+" "+strconv.Itoa(rounds))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("appender process %d: %v", i, err)
		}
	}
	checkAppenders(t, path, n, rounds)
}
