//go:build cgo && duckdb_arrow

package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/duckdb/duckdb-go/v2"
)

const arrowSupported = true

// loadArrow reads an Arrow IPC stream of the export's table (trace
// export -f arrow) from r into the table rows, through DuckDB's Arrow
// interface: no Parquet in between.
func loadArrow(ctx context.Context, conn *sql.Conn, r io.Reader) error {
	rd, err := ipc.NewReader(r)
	if err != nil {
		return err
	}
	defer rd.Release()
	return conn.Raw(func(dc any) error {
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
		if _, err := ex.ExecContext(ctx, "CREATE TABLE rows AS SELECT * FROM stint_arrow_in", nil); err != nil {
			return err
		}
		_, err = ex.ExecContext(ctx, "DROP VIEW stint_arrow_in", nil)
		return err
	})
}
