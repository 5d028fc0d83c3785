package export

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/stint-project/stint/formats"
)

// nameBuilders build the three name columns of the export's records
// (kind_name, src_func, dst_func): strings, or with dict int32 indices
// into the exporter's nameDict.
type nameBuilders struct {
	mem  memory.Allocator
	dict bool
	strs [3]*array.StringBuilder
	idxs [3]*array.Int32Builder
}

func newNameBuilders(mem memory.Allocator, dict bool) *nameBuilders {
	nb := &nameBuilders{mem: mem, dict: dict}
	for i := range 3 {
		if dict {
			nb.idxs[i] = array.NewInt32Builder(mem)
		} else {
			nb.strs[i] = array.NewStringBuilder(mem)
		}
	}
	return nb
}

func (nb *nameBuilders) release() {
	for i := range 3 {
		if nb.dict {
			nb.idxs[i].Release()
		} else {
			nb.strs[i].Release()
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
	if nb.dict {
		var sf, df int32 // the empty name
		if ev {
			sf = e.funcIndex(sm, src)
			if ek != formats.KindSyscall {
				df = e.funcIndex(dm, dst)
			}
		}
		nb.idxs[0].Append(e.dict.kindIndex(k))
		nb.idxs[1].Append(sf)
		nb.idxs[2].Append(df)
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
	if !nb.dict {
		for i := range 3 {
			out[i] = nb.strs[i].NewArray()
		}
		return out
	}
	vb := array.NewStringBuilder(nb.mem)
	defer vb.Release()
	vb.AppendValues(values, nil)
	dict := vb.NewArray()
	defer dict.Release()
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	for i := range 3 {
		idx := nb.idxs[i].NewArray()
		out[i] = array.NewDictionaryArray(dt, idx, dict)
		idx.Release()
	}
	return out
}
