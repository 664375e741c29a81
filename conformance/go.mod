module github.com/strata-db/strata/conformance

go 1.26.8
