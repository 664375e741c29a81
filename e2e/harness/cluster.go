package harness

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
)

// Cluster is N members started with a static --initial-cluster
// (m1=…,m2=…,…), each a Server with its own ports, data dir and log in
// Dir/<name>.*, all with the same extra flags.
type Cluster struct {
	Members []*Server
}

// NewCluster allocates n members of bin in dir; it starts nothing.
func NewCluster(bin, dir string, n int, flags []string) (*Cluster, error) {
	return NewClusterScheme(bin, dir, n, flags, "http")
}

// NewClusterScheme is NewCluster with peer URLs of scheme ("https" for
// peer TLS; the flags then name the certificates).
func NewClusterScheme(bin, dir string, n int, flags []string, peerScheme string) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	for i := 1; i <= n; i++ {
		s, err := NewServer(ServerConfig{Bin: bin, Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir), Flags: flags, PeerScheme: peerScheme})
		if err != nil {
			return nil, err
		}
		c.Members = append(c.Members, s)
		initial = append(initial, s.Name()+"="+s.PeerURL)
	}
	for _, s := range c.Members {
		s.cfg.InitialCluster = strings.Join(initial, ",")
	}
	return c, nil
}

// Start starts every member at once (none is ready before a quorum
// runs) and waits until each is ready.
func (c *Cluster) Start() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Members))
	for i, s := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Start(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", s.Name(), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops every running member.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Members {
		if err := s.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// ClientURLs are the members' client URLs, in member order.
func (c *Cluster) ClientURLs() []string {
	out := make([]string, len(c.Members))
	for i, s := range c.Members {
		out[i] = s.ClientURL
	}
	return out
}

// Member returns the member named name, or nil.
func (c *Cluster) Member(name string) *Server {
	for _, s := range c.Members {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// InitialCluster is the --initial-cluster the members start with.
func (c *Cluster) InitialCluster() string {
	var parts []string
	for _, s := range c.Members {
		parts = append(parts, s.Name()+"="+s.PeerURL)
	}
	return strings.Join(parts, ",")
}

// WithInitialCluster sets s's --initial-cluster (before its first start)
// and returns s: a member started with another cluster's view.
func WithInitialCluster(s *Server, initial string) *Server {
	s.cfg.InitialCluster = initial
	return s
}
