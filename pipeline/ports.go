package pipeline

import (
	"sort"

	"github.com/hotsniff/hotsniff/capture"
)

// PortTally counts TCP segments per port (source and destination both), so
// that a run whose port map matched nothing can name the ports the traffic
// was on. A server port carries every segment of every connection to it,
// so it tops the count; client ports spread over the ephemeral range.
type PortTally [65536]uint32

// Add counts seg's ports.
func (p *PortTally) Add(seg *capture.Segment) {
	if c := &p[seg.Src.Port()]; *c < ^uint32(0) {
		*c++
	}
	if seg.Dst.Port() != seg.Src.Port() {
		if c := &p[seg.Dst.Port()]; *c < ^uint32(0) {
			*c++
		}
	}
}

// Busiest returns up to n ports by falling segment count.
func (p *PortTally) Busiest(n int) []uint16 {
	var ports []uint16
	for port, c := range p {
		if c > 0 {
			ports = append(ports, uint16(port))
		}
	}
	sort.SliceStable(ports, func(i, j int) bool { return p[ports[i]] > p[ports[j]] })
	if len(ports) > n {
		ports = ports[:n]
	}
	return ports
}
