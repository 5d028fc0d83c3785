//go:build cgo && duckdb_arrow

package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/duckdb/duckdb-go/v2"
)

const arrowSupported = true

// loadArrow reads an Arrow IPC stream of the export's table (trace
// export -f arrow) from r into a table, through DuckDB's Arrow
// interface: no Parquet in between. It returns the statements that make
// the view rows of it: none when the stream's names are strings (the
// table is rows), else (trace export --name-table) a view that names its
// rows from the table of names at names, read once the stream has ended.
func loadArrow(ctx context.Context, conn *sql.Conn, r io.Reader, names string) ([]string, error) {
	rd, err := ipc.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer rd.Release()
	table, views := "rows", []string(nil)
	if ids := nameIDs(rd.Schema()); ids != nil {
		table = "stint_rows"
		views = idViews(rd.Schema(), ids, table, names)
	}
	return views, conn.Raw(func(dc any) error {
		ar, err := duckdb.NewArrowFromConn(dc.(driver.Conn))
		if err != nil {
			return err
		}
		release, err := ar.RegisterView(rd, "stint_arrow_in")
		if err != nil {
			return err
		}
		defer release()
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			return errors.New("the DuckDB connection cannot execute statements")
		}
		if _, err := ex.ExecContext(ctx, "CREATE TABLE "+table+" AS SELECT * FROM stint_arrow_in", nil); err != nil {
			return err
		}
		_, err = ex.ExecContext(ctx, "DROP VIEW stint_arrow_in", nil)
		return err
	})
}

// nameIDs returns the name columns of s that hold int32 indices into a
// table of names (export.IDSchema), nil when they hold strings.
func nameIDs(s *arrow.Schema) map[string]bool {
	ids := map[string]bool{}
	for _, n := range []string{"kind_name", "src_func", "dst_func"} {
		if i := s.FieldIndices(n); len(i) == 1 && s.Field(i[0]).Type.ID() == arrow.INT32 {
			ids[n] = true
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// idViews are the statements that make rows, with s's columns in order,
// from table, whose columns ids are indices into the names at names: the
// join with a table of a few thousand names costs a query far less than
// a string per row costs the load (16.6 M rows: 2.6 s against 6.0).
func idViews(s *arrow.Schema, ids map[string]bool, table, names string) []string {
	var cols, joins []string
	for _, f := range s.Fields() {
		q := `"` + strings.ReplaceAll(f.Name, `"`, `""`) + `"`
		if !ids[f.Name] {
			cols = append(cols, "r."+q)
			continue
		}
		n := fmt.Sprintf("n%d", len(joins))
		cols = append(cols, n+".name AS "+q)
		joins = append(joins, fmt.Sprintf("LEFT JOIN stint_names %s ON %s.id = r.%s", n, n, q))
	}
	return []string{
		"CREATE TABLE stint_names AS SELECT * FROM read_parquet(" + lit(names) + ")",
		"CREATE VIEW rows AS SELECT " + strings.Join(cols, ", ") + " FROM " + table + " r " + strings.Join(joins, " "),
	}
}
