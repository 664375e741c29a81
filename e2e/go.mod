module github.com/strata-db/strata/e2e

go 1.26.8
