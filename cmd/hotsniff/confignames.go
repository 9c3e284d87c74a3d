package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/stream"
)

// pflagInvalid matches pflag's message for a value that does not parse.
var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: `)

// flagErrorFunc turns pflag's parse errors, which quote Go's strconv
// ("strconv.ParseFloat: parsing ..."), into one line saying what the flag
// expects.
func flagErrorFunc(cmd *cobra.Command, err error) error {
	if m := pflagInvalid.FindStringSubmatch(err.Error()); m != nil {
		if f := cmd.Flags().Lookup(m[2]); f != nil {
			return usagef("--%s %q: %s", m[2], m[1], config.Expects(f))
		}
	}
	return usageError{err}
}

// tuningSummary is one line of every detector setting, for --config-check.
func tuningSummary(c detect.Config) string {
	or := func(d time.Duration, zero string) string {
		if d == 0 {
			return zero
		}
		return d.String()
	}
	hb := ""
	if c.HotBytes > 0 {
		hb = ", hot-bytes " + strconv.FormatFloat(c.HotBytes, 'g', -1, 64)
	}
	return fmt.Sprintf("detector %s: ttl %s, refresh-every %s, window %s, cold-ratio %g, buckets %d, max-hot %d, invalidate-gap %s, tair-buckets %d, tair-sample-max %d, tair-sigma-n %g, tair-reap-max %d%s",
		c.Detector, or(c.TTL, "60s"), or(c.RefreshEvery, "ttl/2"), or(c.Window, "auto"), c.ColdRatio, c.Buckets, c.MaxHot,
		or(c.InvalidateGap, "10ms"), c.Tair.Buckets, c.Tair.SampleMax, c.Tair.SigmaN, c.Tair.ReapMax, hb)
}

// configSummary is what `run --config-check` prints: a first line of the
// essentials, the detector's tuning, then every setting by section.
func configSummary(c *config.Config, ports *stream.Ports, mode bpf.Mode) string {
	var b strings.Builder
	d := c.Detect.Config
	fmt.Fprintf(&b, "config ok: ports %v, capture %s, hot-qps %g, detector %s, %d rules, %d ignore patterns\n",
		ports.List(), mode, d.HotQPS, d.Detector, len(d.Rules), len(d.Ignore))
	fmt.Fprintln(&b, tuningSummary(d))
	var all []string
	for _, g := range [][]string{captureSettings, streamSettings, detectSettings, publishSettings, httpSettings} {
		all = append(all, g...)
	}
	for _, l := range config.Summary(c, all...) {
		fmt.Fprintln(&b, l)
	}
	if c.File != "" {
		fmt.Fprintf(&b, "file: %s\n", c.File)
	}
	return b.String()
}
