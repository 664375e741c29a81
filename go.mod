module github.com/strata-db/strata

go 1.26.8

require (
	github.com/google/btree v1.1.3
	golang.org/x/sys v0.49.0 // indirect
)
