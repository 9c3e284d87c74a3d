package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// placeholder until the command lands.
func newDecodeCmd() *cobra.Command {
	return &cobra.Command{Use: "decode", RunE: func(*cobra.Command, []string) error { return errors.New("decode: not implemented yet") }}
}
