package offline

import (
	"context"
	"fmt"
	"io"

	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/analysis/cov"
	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/report"
)

// Ops are the measured analyses, in the order reported.
var Ops = []string{"cov", "merge", "cct", "report"}

// Result is what one analysis of one file did.
type Result struct {
	Op     string `json:"op"`
	Events int64  `json:"events"` // events streamed (cov reads the file twice: as run and as full run)
	Detail string `json:"detail"` // a check of the result, for people
}

// RunOp runs one analysis on a trace file of events events, in this
// process:
//
//	cov    cov compare FILE FILE (the file as a run and as the full run)
//	merge  trace merge FILE into a discarded stream
//	cct    cct build FILE (no symbols: the module is synthetic)
//	report report auto FILE, its page written to nowhere
func RunOp(ctx context.Context, op, file string, events int64) (Result, error) {
	res := Result{Op: op, Events: events}
	switch op {
	case "cov":
		rep, err := cov.Compare(ctx, []string{file}, file, cov.Options{})
		if err != nil {
			return res, err
		}
		res.Events = 2 * events
		res.Detail = fmt.Sprintf("%d distinct events, coverage %.3f", rep.FullEvents, rep.Coverage)
	case "merge":
		st, err := merge.Merge(ctx, io.Discard, []string{file})
		if err != nil {
			return res, err
		}
		res.Detail = fmt.Sprintf("%d rows", st.Rows)
	case "cct":
		f, err := cct.Build(ctx, []string{file}, cct.Options{})
		if err != nil {
			return res, err
		}
		s := f.Merged.Stats
		res.Detail = fmt.Sprintf("%d contexts, %d edges, %d calls, %d returns (%d unmatched)", s.Nodes, s.Edges, s.Calls, s.Rets, s.Unmatched)
	case "report":
		d, err := report.Auto(ctx, []string{file}, report.AutoOptions{})
		if err != nil {
			return res, err
		}
		if err := d.WriteHTML(io.Discard); err != nil {
			return res, err
		}
		res.Detail = fmt.Sprintf("%d sections", len(d.Sections))
	default:
		return res, fmt.Errorf("unknown op %q (want cov, merge, cct or report)", op)
	}
	return res, nil
}
