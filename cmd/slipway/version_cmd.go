package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/version"
)

func versionString() string { return version.Get().String() }

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print slipway's version, commit and build date",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
		Action: func(c *cli.Context) error {
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(version.Get())
			}
			_, err := fmt.Fprintf(c.App.Writer, "slipway %s\n", versionString())
			return err
		},
	}
}
