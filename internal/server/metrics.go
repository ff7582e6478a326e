package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vesselhost/vessel/internal/api"
)

// GET /1.0/metrics serves the containers' live usage in Prometheus' text
// format. Every scrape reads the cgroups of the running containers through
// the core (the same numbers `vessel info NAME` shows); nothing is cached.
// Metric names start with vessel_, use base units (seconds, bytes), and
// only counters end in _total. Labels: instance, and device for I/O (the
// kernel's device name, e.g. loop3 or vda).

var (
	descInstances = prometheus.NewDesc("vessel_instances",
		"Instances on this host, by status (running, stopped, ...).", []string{"status"}, nil)
	descCPU = prometheus.NewDesc("vessel_instance_cpu_seconds_total",
		"CPU time used by the instance's processes.", []string{"instance"}, nil)
	descMemory = prometheus.NewDesc("vessel_instance_memory_bytes",
		"Memory used by the instance, page cache included.", []string{"instance"}, nil)
	descMemoryLimit = prometheus.NewDesc("vessel_instance_memory_limit_bytes",
		"The instance's memory limit (limits.memory); absent when unlimited.", []string{"instance"}, nil)
	descProcesses = prometheus.NewDesc("vessel_instance_processes",
		"Tasks (processes and threads) in the instance.", []string{"instance"}, nil)
	descOOMKills = prometheus.NewDesc("vessel_instance_oom_kills_total",
		"Processes the kernel's OOM killer killed in the instance.", []string{"instance"}, nil)
	descReadBytes = prometheus.NewDesc("vessel_instance_io_read_bytes_total",
		"Bytes the instance read from a block device.", []string{"instance", "device"}, nil)
	descWriteBytes = prometheus.NewDesc("vessel_instance_io_write_bytes_total",
		"Bytes the instance wrote to a block device.", []string{"instance", "device"}, nil)
	descReadOps = prometheus.NewDesc("vessel_instance_io_read_operations_total",
		"Read operations the instance issued to a block device.", []string{"instance", "device"}, nil)
	descWriteOps = prometheus.NewDesc("vessel_instance_io_write_operations_total",
		"Write operations the instance issued to a block device.", []string{"instance", "device"}, nil)
)

// scrapeTimeout bounds one scrape's work.
const scrapeTimeout = 10 * time.Second

// collector is a prometheus.Collector over the core's instances.
type collector struct {
	core Core
	log  *slog.Logger
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInstances, descCPU, descMemory, descMemoryLimit, descProcesses,
		descOOMKills, descReadBytes, descWriteBytes, descReadOps, descWriteOps} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	insts, err := c.core.ListInstances(ctx)
	if err != nil {
		c.log.Warn("metrics: list instances", "err", err)
		return
	}
	byStatus := map[string]int{api.StatusRunning: 0, api.StatusStopped: 0}
	for _, i := range insts {
		byStatus[i.Status]++
		if i.Status != api.StatusRunning {
			continue
		}
		full, err := c.core.GetInstance(ctx, i.Name)
		if err != nil || full.State == nil {
			continue // stopped meanwhile
		}
		c.instance(ch, i.Name, full.State)
	}
	for status, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(descInstances, prometheus.GaugeValue, float64(n), strings.ToLower(status))
	}
}

func (c *collector) instance(ch chan<- prometheus.Metric, name string, s *api.InstanceState) {
	ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, float64(s.CPUUsageNS)/1e9, name)
	ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(s.MemoryUsage), name)
	if s.MemoryLimit > 0 {
		ch <- prometheus.MustNewConstMetric(descMemoryLimit, prometheus.GaugeValue, float64(s.MemoryLimit), name)
	}
	ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(s.Processes), name)
	ch <- prometheus.MustNewConstMetric(descOOMKills, prometheus.CounterValue, float64(s.OOMKills), name)
	for _, io := range s.IO {
		dev := io.Name
		if dev == "" {
			dev = io.Device
		}
		ch <- prometheus.MustNewConstMetric(descReadBytes, prometheus.CounterValue, float64(io.ReadBytes), name, dev)
		ch <- prometheus.MustNewConstMetric(descWriteBytes, prometheus.CounterValue, float64(io.WriteBytes), name, dev)
		ch <- prometheus.MustNewConstMetric(descReadOps, prometheus.CounterValue, float64(io.ReadOps), name, dev)
		ch <- prometheus.MustNewConstMetric(descWriteOps, prometheus.CounterValue, float64(io.WriteOps), name, dev)
	}
}

// newMetricsHandler returns the handler of GET /1.0/metrics.
func newMetricsHandler(core Core, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{core: core, log: log})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// metrics serves GET /1.0/metrics.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	s.metricsHandler.ServeHTTP(w, r)
	return nil
}
