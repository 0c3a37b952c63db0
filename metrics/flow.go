package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive"
)

// Flow-control metric names without the namespace prefix.
const (
	nameFlowRate      = "flow_rate"
	nameFlowSlowStart = "flow_slow_start"
	nameFlowGate      = "flow_gate_closed_seconds"
	nameFlowWaited    = "flow_waited_seconds_total"
	nameFlowLimited   = "flow_limited_seconds_total"
	nameFlowCalls     = "flow_calls_total"
)

type flowDescs struct {
	rate, slowStart, gate, waited, limited, calls *prometheus.Desc
}

func newFlowDescs(ns string) flowDescs {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, []string{"dependency"}, nil)
	}
	return flowDescs{
		rate:      d(nameFlowRate, "Calls per second a dependency's stages start at in this process (0 while in slow start, whose window paces them)."),
		slowStart: d(nameFlowSlowStart, "1 while a dependency of unknown limit is still ramping up to its first push back, else 0."),
		gate:      d(nameFlowGate, "Seconds until a dependency's gate opens (a Retry-After for the whole stage); 0 when open."),
		waited:    d(nameFlowWaited, "Time this process's calls waited on a dependency's pace and gate, summed over calls."),
		limited:   d(nameFlowLimited, "Time a dependency pushed back every call with no success (the stage was rate limited as a whole)."),
		calls:     d(nameFlowCalls, "Calls this process started through a dependency's pace; flow_waited_seconds_total over it is the mean wait before a call."),
	}
}

// TrackFlows exports the flow control of a started client's dependencies, read on
// scrape: redrive_flow_rate, redrive_flow_slow_start, redrive_flow_gate_closed_seconds,
// redrive_flow_waited_seconds_total, redrive_flow_calls_total and
// redrive_flow_limited_seconds_total, labelled by dependency. Pass client.FlowStates; nil stops tracking.
func (m *Metrics) TrackFlows(states func() []redrive.FlowState) {
	m.budgetMu.Lock()
	m.flows = states
	m.budgetMu.Unlock()
}

func (m *Metrics) describeFlows(ch chan<- *prometheus.Desc) {
	ch <- m.flowDescs.rate
	ch <- m.flowDescs.slowStart
	ch <- m.flowDescs.gate
	ch <- m.flowDescs.waited
	ch <- m.flowDescs.limited
	ch <- m.flowDescs.calls
}

func (m *Metrics) collectFlows(ch chan<- prometheus.Metric) {
	m.budgetMu.Lock()
	states := m.flows
	m.budgetMu.Unlock()
	if states == nil {
		return
	}
	now := m.opts.Now()
	for _, f := range states() {
		rate, slow := f.Rate, 0.0
		if math.IsInf(rate, 1) {
			rate = 0
		}
		if f.SlowStart {
			slow = 1
		}
		gate := 0.0
		if !f.GateClosedUntil.IsZero() {
			gate = max(f.GateClosedUntil.Sub(now), 0).Seconds()
		}
		d := f.Dependency
		ch <- prometheus.MustNewConstMetric(m.flowDescs.rate, prometheus.GaugeValue, rate, d)
		ch <- prometheus.MustNewConstMetric(m.flowDescs.slowStart, prometheus.GaugeValue, slow, d)
		ch <- prometheus.MustNewConstMetric(m.flowDescs.gate, prometheus.GaugeValue, gate, d)
		ch <- prometheus.MustNewConstMetric(m.flowDescs.waited, prometheus.CounterValue, seconds(f.Waited), d)
		ch <- prometheus.MustNewConstMetric(m.flowDescs.limited, prometheus.CounterValue, seconds(f.Limited), d)
		ch <- prometheus.MustNewConstMetric(m.flowDescs.calls, prometheus.CounterValue, float64(f.Calls), d)
	}
}

func seconds(d time.Duration) float64 { return d.Seconds() }
