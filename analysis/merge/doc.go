// Package merge merges stint trace files into one merged trace, and
// reads trace files and merged traces alike ([Open]).
//
// # Merged trace files
//
// A merged trace is an Apache Arrow IPC stream (like a trace file; see
// package formats) that any Arrow reader opens. Its record batches have
// the columns of a trace file, in the same order, plus a ninth:
//
//	#  column      type    meaning
//	0…7            as in a trace file (kind, tid, time, src_module, src,
//	               dst_module, dst, value)
//	8  run         uint16  index of the run the row came from, in the run list
//
// Rows are grouped by run, in run order: every row of run k comes before
// every row of run k+1, and within a run the rows keep the order of the
// input. Record rows (formats.Kind.IsRecord: periods, the run end,
// refusals) are kept with their run like events.
//
// The module columns hold ids of one module table shared by all runs:
// modules are unified by GNU build-id (by path for a module without one),
// so a library loaded by several runs at different bases has one id.
// formats.NoModule (0xFFFF) keeps its meaning: the address is absolute.
// An event whose module id is not in its run's module table (a runtime
// that died while adding a library) gets NoModule; [Stats] counts these.
//
// # Schema metadata
//
//	stint.version  "1"
//	stint.merged   "1": this is a merged trace
//	stint.modules  JSON lines, the unified module table: formats.Module
//	               objects with base 0 (bases are per run)
//	stint.runs     JSON lines, one [RunInfo] per run, in run order:
//
//	{"run":0,"file":"gzip.4242.81234567890.arrow","info":{…formats.Run…},
//	 "bases":[{"id":0,"base":93824992231424},{"id":3,"base":140737351516160}]}
//
//	run    the value of the run column
//	file   the trace file the run came from (for a run taken from a
//	       merged input, the file that input names)
//	info   the run's metadata (the trace file's stint.run object)
//	bases  the run's modules: unified id and that run's load base
//
// Merging a merged file renumbers its runs after those of the inputs
// before it, and re-unifies its modules.
//
// # Hostile input
//
// [Open] reads plain trace files with package formats (which validates
// every message) and merged files with a message reader that frames
// each message, bounds its metadata (1 MiB) and its body (the rest of
// the file) before arrow-go decodes it, and checks the schema's columns,
// the run column against the run list and each batch's column lengths.
// Arrow-go's decoder recovers its own panics; the extraction of a batch's
// columns is the one other place that recovers, turning a panic into a
// *formats.FormatError. Malformed input never panics.
package merge
