module github.com/strata-db/strata

go 1.26.8

require (
	github.com/cespare/xxhash/v2 v2.3.0
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.49.0
)
