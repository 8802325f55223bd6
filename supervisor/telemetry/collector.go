package telemetry

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the latest Readings as gauges at scrape time, so a scrape
// costs no poll and never waits on a driver.
type collector struct {
	t *Telemetry

	provider                                 *prometheus.Desc
	util, memUsed, memTotal, power, temp, sm *prometheus.Desc
	roleCPU, roleRSS, roleThreads, rolePIDs  *prometheus.Desc
	roleGPUMem                               *prometheus.Desc
}

// Collector returns a prometheus.Collector over Latest(); register it once on
// the process's registry (the gateway's /metrics).
func (t *Telemetry) Collector() prometheus.Collector {
	gpu := []string{"gpu", "uuid", "name"}
	role := []string{"role"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("tsd_"+name, help, labels, nil)
	}
	return &collector{
		t:           t,
		provider:    d("gpu_provider_info", "Where GPU readings come from (value 1); simulated=true for fake GPUs.", []string{"provider", "simulated"}),
		util:        d("gpu_utilization_percent", "GPU utilisation over the driver's last sample period.", gpu),
		memUsed:     d("gpu_memory_used_bytes", "GPU memory in use.", gpu),
		memTotal:    d("gpu_memory_total_bytes", "GPU memory in total.", gpu),
		power:       d("gpu_power_watts", "GPU power draw.", gpu),
		temp:        d("gpu_temperature_celsius", "GPU core temperature.", gpu),
		sm:          d("gpu_sm_clock_hertz", "GPU SM clock.", gpu),
		roleCPU:     d("role_cpu_percent", "CPU of the role's whole process tree (100 = one core).", role),
		roleRSS:     d("role_rss_bytes", "Resident memory of the role's whole process tree.", role),
		roleThreads: d("role_threads", "Threads in the role's process tree.", role),
		rolePIDs:    d("role_processes", "Processes in the role's process tree.", role),
		roleGPUMem:  d("role_gpu_memory_bytes", "GPU memory held by processes of the role's tree.", role),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.provider, c.util, c.memUsed, c.memTotal, c.power, c.temp, c.sm, c.roleCPU, c.roleRSS, c.roleThreads, c.rolePIDs, c.roleGPUMem} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.t.Latest()
	g := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(c.provider, g, 1, r.Panel.Provider, strconv.FormatBool(r.Panel.Simulated))
	for _, s := range r.GPUs {
		l := []string{strconv.Itoa(s.Index), s.UUID, s.Name}
		ch <- prometheus.MustNewConstMetric(c.util, g, float64(s.UtilPct), l...)
		ch <- prometheus.MustNewConstMetric(c.memUsed, g, float64(s.MemUsedB), l...)
		ch <- prometheus.MustNewConstMetric(c.memTotal, g, float64(s.MemTotalB), l...)
		ch <- prometheus.MustNewConstMetric(c.power, g, s.PowerW, l...)
		ch <- prometheus.MustNewConstMetric(c.temp, g, float64(s.TempC), l...)
		ch <- prometheus.MustNewConstMetric(c.sm, g, float64(s.SMClockMHz)*1e6, l...)
	}
	for role, p := range r.Procs {
		ch <- prometheus.MustNewConstMetric(c.roleCPU, g, p.CPUPercent, role)
		ch <- prometheus.MustNewConstMetric(c.roleRSS, g, float64(p.RSSBytes), role)
		ch <- prometheus.MustNewConstMetric(c.roleThreads, g, float64(p.Threads), role)
		ch <- prometheus.MustNewConstMetric(c.rolePIDs, g, float64(len(p.PIDs)), role)
	}
	for role, b := range r.RoleGPUMem {
		ch <- prometheus.MustNewConstMetric(c.roleGPUMem, g, float64(b), role)
	}
}
