package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// placeholder until the command lands.
func newHotkeysCmd() *cobra.Command {
	return &cobra.Command{Use: "hotkeys", RunE: func(*cobra.Command, []string) error { return errors.New("hotkeys: not implemented yet") }}
}
