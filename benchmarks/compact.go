package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
)

// compactVariants: a compact complete trace, the same with every probe
// calling the runtime (--no-opt ppi: what inlining buys), without
// fragment linking (--no-opt link), without predicted indirect jmps
// (--no-opt pred), and the row per event it replaces.
var compactVariants = []benchVariant{
	{"compact", "stint --every (compact)", "--every"},
	{"noppi", "stint --every --no-opt=ppi", "--every --no-opt ppi"},
	{"nolink", "stint --every --no-opt=link", "--every --no-opt link"},
	{"nopred", "stint --every --no-opt=pred", "--every --no-opt pred"},
	{"rows", "stint --every --rows (previous engine)", "--every --rows"},
}

// compact measures complete branch traces (issue 40): gzip -c on 4 MiB
// and the sqlite3 workload on 5,000 rows with each of compactVariants,
// natively and under callgrind --collect-jumps=yes, in one invocation
// (profile); then what each trace takes on disk per event, how fast the
// compact ones decode, and redis-server's throughput with --every.
func (s *Suite) compact(ctx context.Context, rep *Report) error {
	if err := s.profile(ctx, rep, "complete branch trace", compactVariants, callgrindJumps); err != nil {
		return err
	}
	for _, name := range []string{"gzip", "sqlite"} {
		if err := s.compactSizes(rep, name, "compact", "branch"); err != nil {
			return err
		}
	}
	if err := s.compactSizes(rep, "sqlite", "nopred", "branch (--no-opt pred)"); err != nil {
		return err
	}
	return s.redisPairs(ctx, rep, "complete branch trace", compactVariants[:1])
}

// compactSizes notes, for workload name, the bytes per event on disk of
// its compact (variant compact) and, for variant "compact", row
// (variant rows) traces (all timed runs), and how fast the compact ones
// decode (events per second of one thread's decoding, in batches); what names the
// traces in the notes.
func (s *Suite) compactSizes(rep *Report, name, compact, what string) error {
	dir := filepath.Join(s.Config.WorkDir, "traces")
	traces, _ := filepath.Glob(filepath.Join(dir, name+"-"+compact, "*.arrow"))
	var bytes, events int64
	var decode time.Duration
	for _, tr := range traces {
		fi, err := os.Stat(tr + formats.PathsSuffix)
		if err != nil {
			continue
		}
		d, err := paths.Open(tr, paths.Options{})
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		t0 := time.Now()
		n, err := decodeAll(d)
		if err != nil {
			return fmt.Errorf("decode %s: %w", tr, err)
		}
		decode += time.Since(t0)
		bytes += onDisk(fi)
		events += n
	}
	if events > 0 {
		rep.Notes[name+" compact "+what+" trace"] = fmt.Sprintf("%.3f bytes per event (%d events, %d bytes of paths files in %d runs); decoded at %.1f M events/s",
			float64(bytes)/float64(events), events, bytes, len(traces), float64(events)/decode.Seconds()/1e6)
	}
	if compact != "compact" {
		return nil // the row traces are noted once
	}
	rows, _ := filepath.Glob(filepath.Join(dir, name+"-rows", "*.arrow"))
	var rbytes, revents int64
	for _, tr := range rows {
		r, err := formats.Open(tr)
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		for r.Next() {
			revents += r.Record().NumRows()
		}
		r.Release()
		if fi, err := os.Stat(tr); err == nil {
			rbytes += onDisk(fi)
		}
	}
	if revents > 0 {
		rep.Notes[name+" "+what+" row trace"] = fmt.Sprintf("%.1f bytes per row (%d rows, %d bytes in %d runs)",
			float64(rbytes)/float64(revents), revents, rbytes, len(rows))
	}
	return nil
}

// decodeAll decodes d's events in batches, as trace and merge read
// them (paths.Stream), and counts them.
func decodeAll(d *paths.Decoder) (int64, error) {
	s := d.Stream()
	n := int64(0)
	for evs := s.Next(4096); evs != nil; evs = s.Next(4096) {
		n += int64(len(evs))
	}
	return n, s.Err()
}

// onDisk is what a file takes on disk: its allocated blocks. A paths
// file a rewritten library wrote keeps the chunks it grew by but never
// handed out (the runtime truncates it at the executable's exit only):
// holes, counted by its size but not on disk.
func onDisk(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
