package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/stream"
)

// portTally counts TCP segments per port (source and destination both), so
// that a run whose port map matched nothing can name the ports the traffic
// was on. A server port carries every segment of every connection to it,
// so it tops the count; client ports spread over the ephemeral range.
type portTally [65536]uint32

func (p *portTally) add(seg *capture.Segment) {
	if c := &p[seg.Src.Port()]; *c < ^uint32(0) {
		*c++
	}
	if seg.Dst.Port() != seg.Src.Port() {
		if c := &p[seg.Dst.Port()]; *c < ^uint32(0) {
			*c++
		}
	}
}

// busiest returns up to n ports by falling segment count.
func (p *portTally) busiest(n int) []uint16 {
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

// noMatchHint explains an empty result: no TCP at all, or TCP on no port
// of the port map (naming the busiest ports seen and how to map one).
func noMatchHint(tot fileTotals, st stream.Stats) string {
	switch {
	case tot.Packets == 0:
		return ""
	case tot.Segments == 0:
		return "no TCP packet in the input (nothing to decode)"
	case st.Segments > 0 || tot.ports == nil:
		return ""
	}
	var seen []string
	for _, port := range tot.ports.busiest(3) {
		seen = append(seen, fmt.Sprintf("%d (%d segments)", port, tot.ports[port]))
	}
	top := tot.ports.busiest(1)[0]
	example := fmt.Sprintf("PROTO=%d (PROTO: redis, memcache or tair)", top)
	if pr := stream.DefaultPorts().Lookup(top); pr != decode.ProtoUnknown {
		example = fmt.Sprintf("%s=%d", pr, top)
	}
	return fmt.Sprintf("no packet matched the port map; busiest TCP ports seen: %s; map one with --port %s",
		strings.Join(seen, ", "), example)
}
