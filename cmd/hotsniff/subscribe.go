package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// placeholder until the command lands.
func newSubscribeCmd() *cobra.Command {
	return &cobra.Command{Use: "subscribe", RunE: func(*cobra.Command, []string) error { return errors.New("subscribe: not implemented yet") }}
}
