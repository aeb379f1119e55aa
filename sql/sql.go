// Package sql embeds notifyd's own schema migrations (goose format) and the
// current definition of every SQL function notifyd installs. River's
// migrations are applied beside them by stores.Migrate through rivermigrate.
package sql

import (
	"embed"
	"io/fs"
)

//go:embed migrations/*.sql
var migrations embed.FS

//go:embed functions/*.sql
var functions embed.FS

// MigrationsDir returns the migrations as a file system whose root holds the
// NNNNN_name.sql files, applied in version order.
func MigrationsDir() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}

// FunctionsDir returns the current definitions of notifyd's SQL functions as
// a file system whose root holds one <name>.sql file per function name: the
// CREATE OR REPLACE statement (every overload of the name). They are
// repeatable migrations: stores.Migrate runs, after the versioned migrations,
// every file whose text the database has not run yet. A change to a function
// changes its file only; versioned migrations change tables. Migrations up to
// 00030 restated functions as they went (history, left as it was).
func FunctionsDir() fs.FS {
	sub, err := fs.Sub(functions, "functions")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}
