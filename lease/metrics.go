package lease

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the lessor's instruments under etcd 3.7's names and with
// etcd's meaning; the server registers Collectors(). A nil *Metrics
// records nothing.
type Metrics struct {
	// Granted counts applied grants and Revoked applied revokes, on every
	// member; Renewed counts keep-alives the primary renewed.
	Granted, Revoked, Renewed prometheus.Counter
	// TTL observes the TTL each grant got (after the minimum TTL).
	TTL prometheus.Histogram
}

// NewMetrics builds unregistered instruments with etcd's names, help
// texts and buckets.
func NewMetrics() *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "lease", Name: name, Help: help})
	}
	return &Metrics{
		Granted: c("granted_total", "The total number of granted leases."),
		Revoked: c("revoked_total", "The total number of revoked leases."),
		Renewed: c("renewed_total", "The number of renewed leases seen by the leader."),
		TTL: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd_debugging", Subsystem: "lease",
			Name: "ttl_total", Help: "Bucketed histogram of lease TTLs.", Buckets: prometheus.ExponentialBuckets(1, 2, 24)}),
	}
}

// Collectors returns the instruments for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Granted, m.Revoked, m.Renewed, m.TTL}
}

func (m *Metrics) granted(ttl int64) {
	if m != nil {
		m.TTL.Observe(float64(ttl))
		m.Granted.Inc()
	}
}

func (m *Metrics) revoked() {
	if m != nil {
		m.Revoked.Inc()
	}
}

func (m *Metrics) renewed() {
	if m != nil {
		m.Renewed.Inc()
	}
}
