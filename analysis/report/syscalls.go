package report

import (
	"fmt"
	"sort"

	"github.com/stint-project/stint/formats"
	"gonum.org/v1/plot/plotter"
)

// syscalls is the section of a syscall trace: the calls by name and,
// for the first runs, how many were made over time.
func (a *auto) syscalls() (Section, error) {
	s := Section{ID: "syscalls", Title: "System calls"}
	byNum := map[uint64]int64{}
	var total int64
	every := false
	for _, r := range a.runs {
		every = every || r.Info.Tool == "syscall" && r.Info.Flag("every")
		for n, c := range r.Syscalls {
			byNum[n] += c
			total += c
		}
	}
	if total == 0 {
		s.Blocks = []Block{&Note{Text: "No system call events in these traces."}}
		s.nothing = "system calls (no syscall events: rewrite --tool syscall)"
		return s, nil
	}
	s.Intro = fmt.Sprintf("The %d system call rows of these runs, by call.", total)
	if !every {
		s.Intro += " Without --every each distinct (site, call) is recorded once, so a count is how many places made that call, not how often it was made."
	}
	nums := make([]uint64, 0, len(byNum))
	for n := range byNum {
		nums = append(nums, n)
	}
	sort.Slice(nums, func(i, j int) bool {
		if byNum[nums[i]] != byNum[nums[j]] {
			return byNum[nums[i]] > byNum[nums[j]]
		}
		return nums[i] < nums[j]
	})
	t := &Table{Title: "By call", Columns: []Column{{Name: "call"}, {Name: "number", Numeric: true}, {Name: "rows", Numeric: true}, {Name: "share", Numeric: true}}}
	for _, n := range nums {
		t.Rows = append(t.Rows, []Cell{Text(formats.SyscallName(n)), Textf("%d", n), Textf("%d", byNum[n]), Bar(float64(byNum[n]) / float64(total))})
	}
	s.Blocks = []Block{t}
	f, err := syscallTimeline(a.runs, a.opts.RunFigures)
	if err != nil {
		return s, err
	}
	if f != nil {
		s.Blocks = append(s.Blocks, f)
	}
	return s, nil
}

// syscallTimeline draws, for at most max runs, system call rows per
// second over the run's time; nil when no run has any.
func syscallTimeline(runs []*RunData, max int) (*Figure, error) {
	var ss []series
	for _, r := range runs {
		h := r.SyscallTime
		if len(h.Counts) == 0 || len(ss) == max {
			continue
		}
		base := timeBase(r)
		buckets := make([]uint64, 0, len(h.Counts))
		for b := range h.Counts {
			buckets = append(buckets, b)
		}
		sort.Slice(buckets, func(i, j int) bool { return buckets[i] < buckets[j] })
		pts := make(plotter.XYs, 0, len(buckets))
		perSec := 1e9 / float64(h.Width)
		for _, b := range buckets {
			pts = append(pts, plotter.XY{X: secondsSince(b*h.Width, base), Y: float64(h.Counts[b]) * perSec})
		}
		ss = append(ss, series{name: r.Label(), pts: pts, points: len(pts) < 30})
	}
	if len(ss) == 0 {
		return nil, nil
	}
	return lineFigure("fig-syscalls", "System calls over time",
		"System call rows per second in each time bucket of the run (buckets of 1 ms, wider for long runs); empty buckets are left out.",
		"time since start (s)", "rows per second", ss, nil)
}
