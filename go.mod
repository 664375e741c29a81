module github.com/strata-db/strata

go 1.26.8

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/google/btree v1.1.3
	github.com/klauspost/compress v1.20.3
	github.com/prometheus/client_golang v1.25.0
	go.etcd.io/etcd/api/v3 v3.7.3
	go.etcd.io/raft/v3 v3.7.0
	golang.org/x/crypto v0.58.0
	golang.org/x/sys v0.49.0
	gonum.org/v1/plot v0.17.0
	google.golang.org/protobuf v1.36.12
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	golang.org/x/image v0.30.0 // indirect
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.29.0
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.etcd.io/bbolt v1.4.3
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/net v0.61.0
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2
	sigs.k8s.io/yaml v1.6.0
)
