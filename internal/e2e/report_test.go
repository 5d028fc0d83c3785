package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/report"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// TestReportMostCalled: report auto on a complete call trace (--tool call
// --every) of the recurse fixture has a "Most called functions" section
// in which down, which the program calls 5,001 times, has 5,001 calls;
// and no section that says it has nothing to show.
func TestReportMostCalled(t *testing.T) {
	doc := autoReport(t, fixtures.Variant{Opt: fixtures.O0}, rewrite.Options{Tool: rewrite.ToolCall, Every: true})
	var calls *report.Section
	for i, s := range doc.Sections {
		switch s.ID {
		case "calls":
			calls = &doc.Sections[i]
		case "budget", "qos", "overshoot":
			t.Errorf("section %q shown without data", s.ID)
		}
	}
	if calls == nil {
		t.Fatal("no section of the most called functions")
	}
	tab, ok := calls.Blocks[0].(*report.Table)
	if !ok {
		t.Fatalf("first block %T", calls.Blocks[0])
	}
	found := false
	for _, row := range tab.Rows {
		if row[0].Text == "down" {
			found = true
			if row[2].Text != "5001" {
				t.Errorf("down: %s calls, want 5001", row[2].Text)
			}
		}
	}
	if !found {
		t.Errorf("down is not among the most called: %v", tab.Rows)
	}
}

// TestReportSelfTimes: report auto on a call trace whose calls and
// returns carry their own times (--every --rows) shows where the time
// goes, with down, which runs 5,001 times, among the functions; on a
// compact one the section is left out, saying why.
func TestReportSelfTimes(t *testing.T) {
	doc := autoReport(t, fixtures.Variant{Opt: fixtures.O0}, rewrite.Options{Tool: rewrite.ToolCall, Every: true, Rows: true})
	self := sectionOf(doc, "self-time")
	if self == nil {
		t.Fatal("no self-time section for a row trace")
	}
	found := false
	for _, row := range self.Blocks[0].(*report.Table).Rows {
		if row[0].Text == "down" {
			found = row[4].Text == "5001"
		}
	}
	if !found {
		t.Errorf("down with 5001 calls is not among the functions by self time: %v", self.Blocks[0].(*report.Table).Rows)
	}
	doc = autoReport(t, fixtures.Variant{Opt: fixtures.O0}, rewrite.Options{Tool: rewrite.ToolCall, Every: true})
	if sectionOf(doc, "self-time") != nil {
		t.Error("self times for a compact trace")
	}
	if ns := sectionOf(doc, "not-shown"); ns == nil || !strings.Contains(ns.Blocks[0].(*report.Note).Text, "self times") {
		t.Errorf("the not-shown section does not say why self times are missing: %+v", ns)
	}
}

// TestReportSyscalls: report auto on a syscall trace (--tool syscall
// --every) of a static fixture names the calls: the one printf's write,
// and exit_group, with the timeline figure.
func TestReportSyscalls(t *testing.T) {
	doc := autoReport(t, fixtures.Variant{Opt: fixtures.O2, Static: true}, rewrite.Options{Tool: rewrite.ToolSyscall, Every: true})
	sys := sectionOf(doc, "syscalls")
	if sys == nil || len(sys.Blocks) != 2 {
		t.Fatalf("syscalls section: %+v", sys)
	}
	if _, ok := sys.Blocks[1].(*report.Figure); !ok {
		t.Errorf("second block %T, want the timeline figure", sys.Blocks[1])
	}
	rows := map[string]string{}
	for _, row := range sys.Blocks[0].(*report.Table).Rows {
		rows[row[0].Text] = row[2].Text
	}
	if rows["write"] != "1" || rows["exit_group"] != "1" {
		t.Errorf("write %q, exit_group %q rows, want 1 each (all: %v)", rows["write"], rows["exit_group"], rows)
	}
}

// autoReport runs the recurse fixture built as v, rewritten with opts,
// once, and returns report auto's document of its trace.
func autoReport(t *testing.T, v fixtures.Variant, opts rewrite.Options) *report.Document {
	t.Helper()
	bin := fixtures.Build(t, "recurse", v)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, opts)
	traces := filepath.Join(dir, "traces")
	if _, _, code, err := fixtures.Run(out, nil, traceEnv(traces)); err != nil || code != 0 {
		t.Fatalf("run: exit %d, %v", code, err)
	}
	files, _ := filepath.Glob(filepath.Join(traces, "*.arrow"))
	if len(files) != 1 {
		t.Fatalf("%d trace files", len(files))
	}
	doc, err := report.Auto(context.Background(), files, report.AutoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestReportCounts: report auto on a block-count trace (--tool block
// --counts) of the recurse fixture names down's blocks with their exact
// counts (5,001 calls) and their source lines, with the lines' text.
func TestReportCounts(t *testing.T) {
	doc := autoReport(t, fixtures.Variant{Opt: fixtures.O0}, rewrite.Options{Tool: rewrite.ToolBlock, Counts: true})
	sec := sectionOf(doc, "counts")
	if sec == nil || len(sec.Blocks) != 3 {
		t.Fatalf("counts section: %+v", sec)
	}
	if _, ok := sec.Blocks[2].(*report.Figure); !ok {
		t.Errorf("third block %T, want the figure of blocks by executions", sec.Blocks[2])
	}
	entry := false
	for _, row := range sec.Blocks[1].(*report.Table).Rows {
		if row[0].Text == "down+0x0" {
			entry = true
			if row[3].Text != "5001" {
				t.Errorf("down's entry block ran %s times, want 5001", row[3].Text)
			}
			if !strings.Contains(row[2].Text, "recurse.c:11: {") {
				t.Errorf("down's entry block: source %q, want recurse.c:11 and its text", row[2].Text)
			}
		}
	}
	if !entry {
		t.Errorf("down's entry block is not among the hottest: %v", sec.Blocks[1].(*report.Table).Rows)
	}
}

// TestReportProbedCoverage: without a full run, report auto measures a
// branch trace's coverage against the rewritten file's probe table: the
// recurse fixture's down and ack run every outcome they have, so each
// covers all its probes, and main is among the functions listed.
func TestReportProbedCoverage(t *testing.T) {
	doc := autoReport(t, fixtures.Variant{Opt: fixtures.O0}, rewrite.Options{})
	sec := sectionOf(doc, "functions")
	if sec == nil || sec.Title != "Coverage by function" {
		t.Fatalf("no coverage-by-function section: %+v", sec)
	}
	rows := map[string][]report.Cell{}
	for _, row := range sec.Blocks[0].(*report.Table).Rows {
		rows[row[0].Text] = row
	}
	for _, fn := range []string{"down", "ack"} {
		row, ok := rows[fn]
		if !ok {
			t.Errorf("%s not listed: %v", fn, rows)
			continue
		}
		if row[2].Text != row[3].Text || row[3].Text == "0" {
			t.Errorf("%s: %s of %s probed outcomes covered, want all", fn, row[2].Text, row[3].Text)
		}
	}
	if _, ok := rows["main"]; !ok {
		t.Errorf("main not listed")
	}
}

// sectionOf returns the section of doc with the given id, or nil.
func sectionOf(doc *report.Document, id string) *report.Section {
	for i := range doc.Sections {
		if doc.Sections[i].ID == id {
			return &doc.Sections[i]
		}
	}
	return nil
}
