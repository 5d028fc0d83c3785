package export

import (
	"io"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/stint-project/stint/formats"
)

// RunRow is one run of an export: the value of the events' run column,
// the trace file it came from and its metadata.
type RunRow struct {
	Run  uint16
	File string
	Info formats.Run
}

// ModulesSchema is the schema of the module table beside a Parquet
// export: the id the events' src_module and dst_module hold, the path
// and build-id, the size, whether stint rewrote it.
func ModulesSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "path", Type: arrow.BinaryTypes.String},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "build_id", Type: arrow.BinaryTypes.String},
		{Name: "size", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "rewritten", Type: arrow.FixedWidthTypes.Boolean},
	}, nil)
}

// RunsSchema is the schema of the run table beside a Parquet export.
func RunsSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "run", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "file", Type: arrow.BinaryTypes.String},
		{Name: "binary", Type: arrow.BinaryTypes.String},
		{Name: "build_id", Type: arrow.BinaryTypes.String},
		{Name: "tool", Type: arrow.BinaryTypes.String},
		{Name: "options", Type: arrow.BinaryTypes.String},
		{Name: "pid", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ppid", Type: arrow.PrimitiveTypes.Int64},
		{Name: "start_ns", Type: arrow.PrimitiveTypes.Int64},
		{Name: "mono_start_ns", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "budget_ns", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "period_ns", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "log_policy", Type: arrow.BinaryTypes.String},
	}, nil)
}

// WriteModules writes the module table mods as Parquet.
func WriteModules(w io.Writer, mods []formats.Module) error {
	return writeTable(w, ModulesSchema(), func(f []array.Builder) {
		for _, m := range mods {
			f[0].(*array.Uint16Builder).Append(m.ID)
			f[1].(*array.StringBuilder).Append(m.Path)
			f[2].(*array.StringBuilder).Append(filepath.Base(m.Path))
			f[3].(*array.StringBuilder).Append(m.BuildID)
			f[4].(*array.Uint64Builder).Append(m.Size)
			f[5].(*array.BooleanBuilder).Append(m.Rewritten)
		}
	})
}

// WriteRuns writes the run table runs as Parquet.
func WriteRuns(w io.Writer, runs []RunRow) error {
	return writeTable(w, RunsSchema(), func(f []array.Builder) {
		for _, r := range runs {
			f[0].(*array.Uint16Builder).Append(r.Run)
			f[1].(*array.StringBuilder).Append(r.File)
			f[2].(*array.StringBuilder).Append(r.Info.Binary)
			f[3].(*array.StringBuilder).Append(r.Info.BuildID)
			f[4].(*array.StringBuilder).Append(r.Info.Tool)
			f[5].(*array.StringBuilder).Append(r.Info.Options)
			f[6].(*array.Int64Builder).Append(r.Info.PID)
			f[7].(*array.Int64Builder).Append(r.Info.PPID)
			f[8].(*array.Int64Builder).Append(r.Info.StartNS)
			f[9].(*array.Uint64Builder).Append(r.Info.MonoStartNS)
			f[10].(*array.Uint64Builder).Append(r.Info.BudgetNS)
			f[11].(*array.Uint64Builder).Append(r.Info.PeriodNS)
			f[12].(*array.StringBuilder).Append(r.Info.LogPolicy)
		}
	})
}

// NamesSchema is the schema of the table of names an Arrow export of
// IDSchema refers to: the index its name columns hold, and the name.
func NamesSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int32},
		{Name: "name", Type: arrow.BinaryTypes.String},
	}, nil)
}

// WriteNames writes a table of names (Options.NameTable's) as Parquet,
// name i with id i.
func WriteNames(w io.Writer, names []string) error {
	return writeTable(w, NamesSchema(), func(f []array.Builder) {
		for i, n := range names {
			f[0].(*array.Int32Builder).Append(int32(i))
			f[1].(*array.StringBuilder).Append(n)
		}
	})
}

// writeTable writes one record of schema s, filled by fill, as Parquet.
func writeTable(w io.Writer, s *arrow.Schema, fill func(f []array.Builder)) error {
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy))
	fw, err := pqarrow.NewFileWriter(s, nopCloser{w}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer bld.Release()
	fill(bld.Fields())
	rec := bld.NewRecord()
	err = fw.Write(rec)
	rec.Release()
	if cerr := fw.Close(); err == nil {
		err = cerr
	}
	return err
}
