package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// placeholder until detection lands.
func newReplayCmd() *cobra.Command {
	return &cobra.Command{Use: "replay", RunE: func(*cobra.Command, []string) error { return errors.New("replay: not implemented yet") }}
}
