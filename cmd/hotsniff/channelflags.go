package main

import (
	"github.com/spf13/pflag"

	"github.com/hotsniff/hotsniff/publish"
)

// channelFlags tune how a daemon or a replay publishes on the channel.
type channelFlags struct {
	format string
	budget float64
}

// register adds the flags; budget is the default message budget (replay
// publishes as fast as it reads unless told otherwise).
func (c *channelFlags) register(fs *pflag.FlagSet, budget float64) {
	fs.StringVar(&c.format, "channel-format", publish.FormatV1, "channel messages: v1 (one event each, read by every subscriber) or v2 (batches of events; needs subscribers that read batches)")
	fs.Float64Var(&c.budget, "channel-budget", budget, "most channel messages this node sends per second (0: no cap); beyond it refreshes are shed and other events wait, batched")
}

// apply checks the flags and sets them in o.
func (c *channelFlags) apply(o *publish.Options) error {
	f, err := publish.ParseFormat(c.format)
	if err != nil {
		return usagef("--channel-format: %v", err)
	}
	if c.budget < 0 {
		return usagef("--channel-budget %g: must be 0 (no cap) or positive", c.budget)
	}
	o.Format, o.Budget = f, c.budget
	return nil
}
