package export

import (
	"context"
	"encoding/csv"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stint-project/stint/formats"
)

// CSVHeader is the header row of csv output.
var CSVHeader = []string{"run", "kind", "tid", "time", "src", "src_func", "src_line", "dst", "dst_func", "dst_line", "value"}

// writeCSV writes one row per trace row, in order: the run index, the
// kind's name, tid, time, then src and dst as module+0xoffset (0xaddr
// for an address in no module) with the function and file:line there,
// and value. A record row (period, run end) has its kind's name and its
// src, dst and value as decimal numbers; a syscall's dst is empty.
func (e *exporter) writeCSV(ctx context.Context, w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	row := make([]string, len(CSVHeader))
	var werr error
	err := e.each(ctx, func(b *Batch, i int) {
		if werr != nil {
			return
		}
		k := formats.Kind(b.Kind[i])
		row[0] = strconv.Itoa(int(b.run(i)))
		row[1] = k.String()
		row[2] = strconv.FormatUint(uint64(b.TID[i]), 10)
		row[3] = strconv.FormatUint(b.Time[i], 10)
		row[10] = strconv.FormatUint(b.Value[i], 10)
		ek, ok := eventKind(b.Kind[i])
		if !ok {
			e.stats.Records++
			row[4], row[5], row[6] = strconv.FormatUint(b.Src[i], 10), "", ""
			row[7], row[8], row[9] = strconv.FormatUint(b.Dst[i], 10), "", ""
		} else {
			e.stats.Events++
			row[4], row[5], row[6] = e.where(b.SrcModule[i], b.Src[i])
			if ek == formats.KindSyscall {
				row[7], row[8], row[9] = "", "", ""
			} else {
				row[7], row[8], row[9] = e.where(b.DstModule[i], b.Dst[i])
			}
		}
		werr = cw.Write(row)
	})
	if werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// where returns module+0xoffset, the function and file:line of an
// address ("" for what is unknown), remembered per distinct address.
func (e *exporter) where(mod uint16, a uint64) (place, fn, line string) {
	if e.module(mod) == nil {
		e.stats.NoModule++
		return e.place(mod, a), "", ""
	}
	k := addr{mod, a}
	if w, ok := e.wheres[k]; ok {
		return w[0], w[1], w[2]
	}
	place = e.place(mod, a)
	s := e.symbols(mod)
	fn = e.funcName(mod, a)
	if file, l := s.Line(a); file != "" {
		line = file + ":" + strconv.Itoa(l)
	}
	if e.wheres == nil {
		e.wheres = map[addr][3]string{}
	}
	e.wheres[k] = [3]string{place, fn, line}
	return place, fn, line
}

// ParquetSchema returns the schema of parquet output: the trace's
// columns (kind, tid, time, src_module, src, dst_module, dst, value, as
// in a trace file), the run index, and the names of the functions at src
// and dst ("" when unknown) and the kind's name.
func ParquetSchema() *arrow.Schema {
	fs := append([]arrow.Field(nil), formats.Schema().Fields()...)
	fs = append(fs,
		arrow.Field{Name: "run", Type: arrow.PrimitiveTypes.Uint16},
		arrow.Field{Name: "kind_name", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "src_func", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "dst_func", Type: arrow.BinaryTypes.String},
	)
	md := arrow.NewMetadata([]string{"stint.export"}, []string{"trace"})
	return arrow.NewSchema(fs, &md)
}

// nopCloser hides the destination's Close from the parquet writer,
// which closes its sink.
type nopCloser struct{ w io.Writer }

func (n nopCloser) Write(p []byte) (int, error) { return n.w.Write(p) }

// writeParquet writes the rows as Parquet (snappy, dictionary-encoded
// names and small columns), one row group per million rows.
func (e *exporter) writeParquet(ctx context.Context, w io.Writer) error {
	// No dictionary for the columns of millions of values (time,
	// addresses, values): it costs a hash lookup per row and is dropped
	// for plain encoding once it grows. No statistics for the names:
	// two string compares per row that prune nothing.
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(true),
		parquet.WithDictionaryFor("time", false), parquet.WithDictionaryFor("src", false), parquet.WithDictionaryFor("dst", false),
		parquet.WithDictionaryFor("value", false),
		parquet.WithStatsFor("kind_name", false), parquet.WithStatsFor("src_func", false), parquet.WithStatsFor("dst_func", false))
	fw, err := pqarrow.NewFileWriter(ParquetSchema(), nopCloser{w}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	err = e.records(ctx, 1<<20, namesStrings, fw.Write)
	if cerr := fw.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeArrow writes the rows as an Arrow IPC stream, a record batch per
// 64 Ki rows: the Parquet export's table with the names
// dictionary-encoded (one dictionary, growing, sent as deltas), or with
// Options.NameTable set, as indices into the table of names it is then
// given (IDSchema).
func (e *exporter) writeArrow(ctx context.Context, w io.Writer) error {
	mode := namesDict
	if e.opts.NameTable != nil {
		mode = namesIDs
	}
	iw := ipc.NewWriter(w, ipc.WithSchema(mode.schema()), ipc.WithDictionaryDeltas(true))
	err := e.records(ctx, 1<<16, mode, iw.Write)
	if cerr := iw.Close(); err == nil {
		err = cerr
	}
	if err == nil && mode == namesIDs {
		e.dict.index("") // index 0, with no row at all
		err = e.opts.NameTable(e.dict.values)
	}
	return err
}

// ArrowSchema is ParquetSchema with kind_name, src_func and dst_func
// dictionary-encoded (int32 indices into strings).
func ArrowSchema() *arrow.Schema {
	return namesAs(nameDictType)
}

// IDSchema is ParquetSchema with kind_name, src_func and dst_func int32
// indices into a table of names (NamesSchema): what an engine that
// stores the rows keeps as a number, not a string, per row.
func IDSchema() *arrow.Schema { return namesAs(arrow.PrimitiveTypes.Int32) }

// namesAs is ParquetSchema with the name columns of type t.
func namesAs(t arrow.DataType) *arrow.Schema {
	ps := ParquetSchema()
	fs := ps.Fields()
	for i := formats.NumCols + 1; i < len(fs); i++ {
		fs[i].Type = t
	}
	md := ps.Metadata()
	return arrow.NewSchema(fs, &md)
}

// numSchema is ParquetSchema's columns up to run: what records builds
// with a record builder (the names it builds itself).
func numSchema() *arrow.Schema {
	return arrow.NewSchema(ParquetSchema().Fields()[:formats.NumCols+1], nil)
}

// records builds the rows into records of about n rows each, their
// names as mode says (ParquetSchema, ArrowSchema or IDSchema), and hands
// each to write, which must not keep it.
func (e *exporter) records(ctx context.Context, n int, mode namesMode, write func(arrow.RecordBatch) error) error {
	mem := memory.DefaultAllocator
	bld := array.NewRecordBuilder(mem, numSchema())
	defer bld.Release()
	f := bld.Fields()
	names := newNameBuilders(mem, mode)
	defer names.release()
	schema := mode.schema()
	var werr error
	flush := func() {
		if werr != nil || f[0].Len() == 0 {
			return
		}
		num := bld.NewRecordBatch()
		defer num.Release()
		cols := append(num.Columns(), names.arrays(e.dict.values)...)
		rec := array.NewRecordBatch(schema, cols, num.NumRows())
		for _, c := range cols[formats.NumCols+1:] {
			c.Release()
		}
		werr = write(rec)
		rec.Release()
	}
	err := e.eachBatch(ctx, func(b *Batch) {
		// the trace's columns in bulk; the names row by row
		f[formats.ColKind].(*array.Uint8Builder).AppendValues(b.Kind, nil)
		f[formats.ColTID].(*array.Uint32Builder).AppendValues(b.TID, nil)
		f[formats.ColTime].(*array.Uint64Builder).AppendValues(b.Time, nil)
		f[formats.ColSrcModule].(*array.Uint16Builder).AppendValues(b.SrcModule, nil)
		f[formats.ColSrc].(*array.Uint64Builder).AppendValues(b.Src, nil)
		f[formats.ColDstModule].(*array.Uint16Builder).AppendValues(b.DstModule, nil)
		f[formats.ColDst].(*array.Uint64Builder).AppendValues(b.Dst, nil)
		f[formats.ColValue].(*array.Uint64Builder).AppendValues(b.Value, nil)
		runs := f[formats.NumCols].(*array.Uint16Builder)
		if b.Run != nil {
			runs.AppendValues(b.Run, nil)
		} else {
			runs.AppendValues(make([]uint16, b.Len()), nil)
		}
		for i, k := range b.Kind {
			names.row(e, k, b.SrcModule[i], b.Src[i], b.DstModule[i], b.Dst[i])
		}
		if f[0].Len() >= n {
			flush()
		}
	})
	flush()
	if err == nil {
		err = werr
	}
	return err
}
