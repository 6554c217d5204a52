package config

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// ShowOptions of Show.
type ShowOptions struct {
	Sources Sources
	// JSON prints JSON instead of YAML.
	JSON bool
	Out  io.Writer
}

// Show prints the merged cloud-config, after checking its slipway section.
func Show(o ShowOptions) error {
	doc, files, err := Load(o.Sources)
	if err != nil {
		return err
	}
	if _, err := ParseSection(doc); err != nil {
		return fmt.Errorf("invalid cloud-config (read %s): %w", strings.Join(files, ", "), err)
	}
	var body []byte
	if o.JSON {
		body, err = json.MarshalIndent(doc, "", "  ")
		body = append(body, '\n')
	} else {
		body, err = yaml.Marshal(doc)
	}
	if err != nil {
		return fmt.Errorf("render the merged config: %w", err)
	}
	_, err = o.Out.Write(body)
	return err
}
