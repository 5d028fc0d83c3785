// Package report turns stint traces into one self-contained HTML page:
// inline CSS, figures drawn with gonum/plot as inline SVG, nothing
// fetched, so the file can be mailed, archived or opened offline. The
// only script is a flame graph's own (zoom and search), inline; a
// notebook's markdown never brings one in.
//
// [Auto] builds a report of budgeted runs (optionally against a full,
// unbudgeted run): headline numbers, coverage over runs (cumulative, as
// in DIME*'s Figure 6), budget granted and used per period, the QoS
// metric against its threshold, an overshoot histogram, run times and
// slowdowns, and the least covered functions (from analysis/cov).
//
// [RenderNotebook] renders a markdown notebook whose fenced code blocks
// with the info string "stint …" are cells: commands that run in-process
// (see [DefaultCells]; new ones plug in as a [CellCommand]) and are
// replaced by their tables and figures.
//
// Both return a [Document] (sections of [Block]s: [Figure], [Table],
// [Note], [Stats], [Pre], [Heading], [Paragraph]); [Document.WriteHTML]
// writes the page.
//
// # Data
//
// [Loader] reads trace files and merged traces (analysis/merge) in one
// streaming pass each, keeping per run its budget periods
// (formats.Period), its run-end record, its time span, its rows per kind
// and its distinct events. A run's time is the run-end record's run time;
// a trace without one (killed, _exit, older runtimes) falls back to the
// span from the run's start to its last row, and the report says so.
//
// # Hostile input
//
// Traces are validated by packages formats and merge; a damaged trace is
// an error naming the file, and a trace cut inside a batch is shown up to
// its last complete batch with a warning. All text from traces and
// notebooks is HTML-escaped by html/template; the notebook's raw HTML is
// dropped (goldmark's safe mode). gonum/plot panics on some degenerate
// inputs: drawing a figure recovers and returns an error (the one
// recover, at that trust boundary). Memory grows with the number of
// distinct events and periods, not with the number of rows.
package report
