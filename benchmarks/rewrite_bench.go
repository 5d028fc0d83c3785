package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// RewriteResult is one binary's rewrite cost and patch coverage.
type RewriteResult struct {
	Binary     string         `json:"binary"`
	SizeBytes  int64          `json:"size_bytes"`
	Seconds    []float64      `json:"seconds"`
	Median     float64        `json:"median_seconds"`
	MaxRSSKB   int64          `json:"max_rss_kb"`
	Sites      int            `json:"sites"`
	Patched    map[string]int `json:"patched"`
	Fallback   int            `json:"fallback"`
	Failed     int            `json:"failed"`
	PatchedPct float64        `json:"patched_pct"`
	Stats      map[string]any `json:"stats"`
}

// RewriteCost rewrites bin (with --tool branch) runs times and reads the
// --stats-json output of the last run.
func RewriteCost(ctx context.Context, cfg Config, bin string, runs int) (*RewriteResult, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return nil, err
	}
	res := &RewriteResult{Binary: bin, SizeBytes: st.Size()}
	out := filepath.Join(cfg.WorkDir, "rw", filepath.Base(bin))
	statsPath := out + ".stats.json"
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	for i := 0; i < runs; i++ {
		cmd := exec.CommandContext(ctx, cfg.Rewrite, "-q", "--stats-json", statsPath, "-o", out, bin)
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("rewrite %s: %w", bin, err)
		}
		res.Seconds = append(res.Seconds, time.Since(start).Seconds())
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.MaxRSSKB = max(res.MaxRSSKB, ru.Maxrss)
		}
	}
	res.Median = Median(res.Seconds)
	b, err := os.ReadFile(statsPath)
	if err != nil {
		return nil, err
	}
	var s struct {
		Sites    int            `json:"sites"`
		Patched  map[string]int `json:"patched"`
		Fallback int            `json:"fallback"`
		Failed   int            `json:"failed"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statsPath, err)
	}
	_ = json.Unmarshal(b, &res.Stats)
	res.Sites, res.Patched, res.Fallback, res.Failed = s.Sites, s.Patched, s.Fallback, s.Failed
	if s.Sites > 0 {
		n := 0
		for _, c := range s.Patched {
			n += c
		}
		res.PatchedPct = 100 * float64(n) / float64(s.Sites)
	}
	return res, nil
}
