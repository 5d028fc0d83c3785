//go:build cgo && !duckdb_arrow

package main

import (
	"context"
	"database/sql"
	"errors"
	"io"
)

// arrowSupported: DuckDB's Arrow interface needs the build tag
// duckdb_arrow (make build sets it).
const arrowSupported = false

func loadArrow(context.Context, *sql.Conn, io.Reader, string) ([]string, error) {
	return nil, errors.New("built without DuckDB's Arrow interface")
}
