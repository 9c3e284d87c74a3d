package main

import (
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/metrics"
)

// absorbedMetrics maps the detector's absorbed-demand counters to metrics.
func absorbedMetrics(st detect.Stats) metrics.Absorbed {
	return metrics.Absorbed{
		Reports: st.AbsorbedReports,
		Hits:    st.AbsorbedHits,
		Rejected: map[string]uint64{
			"malformed": st.AbsorbedMalformed,
			"unpaired":  st.AbsorbedUnpaired,
			"not_hot":   st.AbsorbedNotHot,
			"capped":    st.AbsorbedCapped,
			"held":      st.AbsorbedHeld,
		},
	}
}
