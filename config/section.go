package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// SectionKey is the cloud-config key slipway owns; every other top-level key
// belongs to k3os and is left alone.
const SectionKey = "slipway"

// Section is the `slipway:` section of a cloud-config.
type Section struct {
	// Operator enables the UpdateChannel operator and sets its default channel.
	Operator Operator `json:"operator"`
	// Labels are put on this node when k3s registers it.
	Labels map[string]string `json:"labels,omitempty"`
}

// Operator deploys `slipway ops agent` and the default UpdateChannel.
type Operator struct {
	// Enabled writes the operator's manifest for k3s to deploy; false removes it.
	Enabled bool `json:"enabled"`
	// Namespace of the agent and the channel (default slipway-system).
	Namespace string `json:"namespace,omitempty"`
	// Image of the agent (default: this build of slipway).
	Image string `json:"image,omitempty"`
	// URL of the release channel (default github-releases://rancher/k3os).
	URL string `json:"url,omitempty"`
	// Version to run; "latest" follows the channel; empty leaves the channel paused.
	Version string `json:"version,omitempty"`
	// Concurrency is how many nodes upgrade at once (default 1).
	Concurrency *int `json:"concurrency,omitempty"`
	// Window restricts when upgrades start.
	Window *opsv1.Window `json:"window,omitempty"`
	// NodeSelector limits the channel to nodes with these labels.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// KeyError names the bad key of an invalid config with its full path
// (slipway.operator.concurrency) and says what is wrong.
type KeyError struct {
	Path string
	Msg  string
}

func (e *KeyError) Error() string { return e.Path + ": " + e.Msg }

// ParseSection extracts and validates the slipway section of a merged
// cloud-config. A config without one yields the zero Section (operator off).
func ParseSection(doc map[string]any) (Section, error) {
	var s Section
	raw, ok := doc[SectionKey]
	if !ok || raw == nil {
		return s, nil
	}
	if err := checkKeys(SectionKey, raw, reflect.TypeOf(s)); err != nil {
		return s, err
	}
	body, err := json.Marshal(raw)
	if err != nil {
		return s, fmt.Errorf("%s: %w", SectionKey, err)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return s, &KeyError{Path: SectionKey + "." + te.Field, Msg: fmt.Sprintf("want %s, got %s", kindName(te.Type), te.Value)}
		}
		return s, fmt.Errorf("%s: %w", SectionKey, err)
	}
	return s, s.Validate()
}

// checkKeys rejects keys that t (a struct, through pointers, maps and
// slices) does not declare, naming each by its path. All are reported,
// sorted, so one run shows every typo.
func checkKeys(path string, v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var errs []error
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			if v == nil {
				return nil
			}
			return &KeyError{Path: path, Msg: fmt.Sprintf("want a mapping, got %s", jsonKind(v))}
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				errs = append(errs, &KeyError{Path: path + "." + k, Msg: "unknown key (known: " + strings.Join(sortedKeys(fields), ", ") + ")"})
				continue
			}
			errs = append(errs, checkKeys(path+"."+k, m[k], f))
		}
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for _, k := range sortedKeys(m) {
				errs = append(errs, checkKeys(path+"."+k, m[k], t.Elem()))
			}
		}
	case reflect.Slice:
		if l, ok := v.([]any); ok {
			for i, e := range l {
				errs = append(errs, checkKeys(fmt.Sprintf("%s[%d]", path, i), e, t.Elem()))
			}
		}
	}
	return errors.Join(errs...)
}

// jsonFields maps the JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int64, int:
		return "a number"
	case []any:
		return "a list"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	default:
		return t.String()
	}
}
