module strata.local/testguard

go 1.26.8
