package config

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/window"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
)

// Validate checks the values of the section; each error names its key.
func (s Section) Validate() error {
	var errs []error
	add := func(path, msg string) { errs = append(errs, &KeyError{Path: SectionKey + "." + path, Msg: msg}) }
	o := s.Operator
	if o.URL != "" {
		if err := channel.ValidateURL(o.URL); err != nil {
			add("operator.url", err.Error())
		}
	}
	if o.Concurrency != nil && *o.Concurrency < 1 {
		add("operator.concurrency", fmt.Sprintf("must be at least 1, got %d", *o.Concurrency))
	}
	if o.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(o.Namespace) {
			add("operator.namespace", m)
		}
	}
	if o.Version != "" && o.Version != opsv1.VersionLatest {
		if err := layout.ValidVersion(o.Version); err != nil {
			add("operator.version", err.Error())
		}
	}
	if w := o.Window; w != nil {
		if _, err := window.Parse(w.Days, w.Start, w.End, w.TimeZone); err != nil {
			add("operator.window", err.Error())
		}
	}
	errs = append(errs, labelErrors("operator.nodeSelector", o.NodeSelector)...)
	errs = append(errs, labelErrors("labels", s.Labels)...)
	return errors.Join(errs...)
}

func labelErrors(path string, labels map[string]string) []error {
	var errs []error
	for _, k := range sortedKeys(labels) {
		p := SectionKey + "." + path + "." + k
		for _, m := range validation.IsQualifiedName(k) {
			errs = append(errs, &KeyError{Path: p, Msg: "invalid label name: " + m})
		}
		for _, m := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, &KeyError{Path: p, Msg: "invalid label value: " + m})
		}
	}
	return errs
}
