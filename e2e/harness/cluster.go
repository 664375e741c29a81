package harness

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-db/strata/membership"
)

// Cluster is N members started with a static --initial-cluster
// (m1=…,m2=…,…), each a Server with its own ports, data dir and log in
// Dir/<name>.*, all with the same extra flags.
type Cluster struct {
	Members []*Server
	// Net is the network of proxies in front of the members' peer ports
	// (NewClusterWithProxies); nil when peers connect directly.
	Net *Network
}

// NewCluster allocates n members of bin in dir; it starts nothing.
func NewCluster(bin, dir string, n int, flags []string) (*Cluster, error) {
	return NewClusterScheme(bin, dir, n, flags, "http")
}

// NewClusterBins is NewCluster with one binary per member (len(bins)
// members): a mixed cluster of etcd and Strata members.
func NewClusterBins(bins []string, dir string, flags []string) (*Cluster, error) {
	c, err := NewClusterScheme(bins[0], dir, len(bins), flags, "http")
	if err != nil {
		return nil, err
	}
	for i, s := range c.Members {
		s.cfg.Bin = bins[i]
	}
	return c, nil
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
		initial = append(initial, s.Name()+"="+s.AdvertisePeerURL)
	}
	for _, s := range c.Members {
		s.cfg.InitialCluster = strings.Join(initial, ",")
	}
	return c, nil
}

// NewClusterWithProxies is NewCluster with a fault-injecting proxy in
// front of each member's peer port (see Network): each member listens on
// its PeerURL and advertises its proxy's URL, in
// --initial-advertise-peer-urls and in --initial-cluster, so every peer
// connection to it goes through the proxy. Member ids are derived from
// those URLs and ClusterToken as etcd derives them. The network's random
// choices come from seed. Close stops the members and the proxies.
func NewClusterWithProxies(bin, dir string, n int, flags []string, seed uint64) (*Cluster, error) {
	c := &Cluster{Net: NewNetwork(seed)}
	var initial []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("m%d", i)
		ports, err := FreePorts(1)
		if err != nil {
			c.Net.Close()
			return nil, err
		}
		proxyURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		s, err := NewServer(ServerConfig{Bin: bin, Name: name, Dir: dir, Flags: flags, AdvertisePeerURL: proxyURL})
		if err != nil {
			c.Net.Close()
			return nil, err
		}
		u, err := url.Parse(s.PeerURL)
		if err != nil {
			c.Net.Close()
			return nil, err
		}
		pu, _ := url.Parse(proxyURL)
		id := membership.MemberID([]url.URL{*pu}, ClusterToken)
		if _, err := c.Net.AddProxy(name, id, pu.Host, u.Host); err != nil {
			c.Net.Close()
			return nil, err
		}
		c.Members = append(c.Members, s)
		initial = append(initial, name+"="+proxyURL)
	}
	for _, s := range c.Members {
		s.cfg.InitialCluster = strings.Join(initial, ",")
	}
	return c, nil
}

// Close stops every member, then the proxies, if any.
func (c *Cluster) Close() error {
	err := c.Stop()
	if c.Net != nil {
		err = errors.Join(err, c.Net.Close())
	}
	return err
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
		parts = append(parts, s.Name()+"="+s.AdvertisePeerURL)
	}
	return strings.Join(parts, ",")
}

// WithInitialCluster sets s's --initial-cluster (before its first start)
// and returns s: a member started with another cluster's view.
func WithInitialCluster(s *Server, initial string) *Server {
	s.cfg.InitialCluster = initial
	return s
}
