package export

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/stint-project/stint/formats"
)

// namesMode is how the export's records carry names.
type namesMode uint8

const (
	namesStrings namesMode = iota // strings (Parquet)
	namesDict                     // dictionary arrays of the exporter's nameDict
	namesIDs                      // int32 indices into the nameDict, handed over at the end
)

// schema is the schema of the records whose names are m.
func (m namesMode) schema() *arrow.Schema {
	switch m {
	case namesDict:
		return ArrowSchema()
	case namesIDs:
		return IDSchema()
	}
	return ParquetSchema()
}

// nameDictType is the type of the dictionary-encoded name columns
// (ArrowSchema).
var nameDictType = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}

// nameBuilders build the three name columns of the export's records
// (kind_name, src_func, dst_func): strings, or int32 indices into the
// exporter's nameDict.
type nameBuilders struct {
	mem  memory.Allocator
	mode namesMode
	strs [3]*array.StringBuilder
	idxs [3][]int32 // appended to a slice: a builder's Append per row cost 12% of an export
}

func newNameBuilders(mem memory.Allocator, mode namesMode) *nameBuilders {
	nb := &nameBuilders{mem: mem, mode: mode}
	if mode == namesStrings {
		for i := range nb.strs {
			nb.strs[i] = array.NewStringBuilder(mem)
		}
	}
	return nb
}

func (nb *nameBuilders) release() {
	if nb.mode == namesStrings {
		for _, b := range nb.strs {
			b.Release()
		}
	}
}

// row appends the names of a row: its kind's, and for an event the
// functions at its source and (but for a syscall) its destination.
func (nb *nameBuilders) row(e *exporter, k uint8, sm uint16, src uint64, dm uint16, dst uint64) {
	ek, ev := eventKind(k)
	if ev {
		e.stats.Events++
	} else {
		e.stats.Records++
	}
	if nb.mode != namesStrings {
		var sf, df int32 // the empty name
		if ev {
			sf = e.funcIndex(sm, src)
			if ek != formats.KindSyscall {
				df = e.funcIndex(dm, dst)
			}
		}
		nb.idxs[0] = append(nb.idxs[0], e.dict.kindIndex(k))
		nb.idxs[1] = append(nb.idxs[1], sf)
		nb.idxs[2] = append(nb.idxs[2], df)
		return
	}
	sf, df := "", ""
	if ev {
		sf = e.funcName(sm, src)
		if ek != formats.KindSyscall {
			df = e.funcName(dm, dst)
		}
	}
	nb.strs[0].Append(formats.Kind(k).String())
	nb.strs[1].Append(sf)
	nb.strs[2].Append(df)
}

// arrays returns the three columns built since the last call (the
// builders start over), with values the dictionary's strings.
func (nb *nameBuilders) arrays(values []string) []arrow.Array {
	out := make([]arrow.Array, 3)
	if nb.mode == namesStrings {
		for i := range out {
			out[i] = nb.strs[i].NewArray()
		}
		return out
	}
	var idx [3]arrow.Array
	for i := range 3 {
		b := array.NewInt32Builder(nb.mem)
		b.AppendValues(nb.idxs[i], nil)
		idx[i] = b.NewArray()
		b.Release()
		nb.idxs[i] = nb.idxs[i][:0]
	}
	if nb.mode == namesIDs {
		return append(out[:0], idx[:]...)
	}
	vb := array.NewStringBuilder(nb.mem)
	defer vb.Release()
	vb.AppendValues(values, nil)
	dict := vb.NewArray()
	defer dict.Release()
	for i := range 3 {
		out[i] = array.NewDictionaryArray(nameDictType, idx[i], dict)
		idx[i].Release()
	}
	return out
}
