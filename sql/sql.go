// Package sql embeds notifyd's own schema migrations (goose format). River's
// migrations are applied beside them by stores.Migrate through rivermigrate.
package sql

import (
	"embed"
	"io/fs"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsDir returns the migrations as a file system whose root holds the
// NNNNN_name.sql files, applied in version order.
func MigrationsDir() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}
