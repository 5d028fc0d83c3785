package main

import (
	"context"
	"fmt"
	"io"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
)

// pathEvents calls fn with the events of trace's compact complete trace
// (its paths file), if it has one, until fn returns false; it returns
// what decoding met.
func pathEvents(ctx context.Context, trace string, fn func(formats.Event) bool) (*paths.Stats, error) {
	if !paths.HasPaths(trace) {
		return nil, nil
	}
	d, err := paths.Open(trace, paths.Options{})
	if err != nil {
		return nil, fmt.Errorf("compact trace: %w", err)
	}
	s := d.Stream()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		evs := s.Next(4096)
		if evs == nil {
			st := s.Stats()
			if err := s.Err(); err != nil {
				return &st, fmt.Errorf("compact trace %s%s: %w", trace, formats.PathsSuffix, err)
			}
			return &st, nil
		}
		for _, e := range evs {
			if !fn(e) {
				st := s.Stats()
				return &st, nil
			}
		}
	}
}

// printPathStats says how big a compact trace is and what it could not
// show.
func printPathStats(w io.Writer, st *paths.Stats, events int) {
	if st == nil {
		return
	}
	per := 0.0
	if events > 0 {
		per = float64(st.Bytes) / float64(events)
	}
	fmt.Fprintf(w, "  compact    %d threads, %d chunks, %d bytes of packets (%.3f per event)", st.Threads, st.Chunks, st.Bytes, per)
	if st.Lost > 0 || st.Unprobed > 0 {
		fmt.Fprintf(w, "; %d gaps (lost), %d unprobed branches reached (%d places found again at a PSB, %d packets skipped)",
			st.Lost, st.Unprobed, st.Resynced, st.Skipped)
	}
	if st.Torn > 0 {
		fmt.Fprintf(w, "; %d chunks end in a packet a kill cut short (left out)", st.Torn)
	}
	fmt.Fprintln(w)
}
