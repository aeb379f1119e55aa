package server

// What the package's external tests reach inside.
var (
	CatalogOf   = catalogOf
	SyncCatalog = syncCatalog
)
