package eds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// override is one node's container resources for an ExtendedDaemonSet and
// their hash ("" when the node has none).
type override struct {
	containers map[string]corev1.ResourceRequirements
	hash       string
	setting    string // the setting that applies on the node ("" if none)
}

// overrides computes every eligible node's overrides: the oldest
// ExtendedDaemonsetSetting of e that selects the node, then the node's
// resources.<group>/<namespace>.<eds>.<container> annotations (ours, or
// DataDog's), which win. A setting that loses to an older one on some node
// is marked Error, with an Event, and applies nowhere (as DataDog's: a
// setting in error is not half applied).
func (c *Controller) overrides(ctx context.Context, r *round) map[string]override {
	settings := c.settingsOf(r.e)
	conflicts := settingConflicts(r.nodes, settings, func(s *v1.ExtendedDaemonsetSetting) bool { return c.undecodable.get(s.UID) == nil })
	out := make(map[string]override, len(r.nodes))
	for _, n := range r.nodes {
		o := override{containers: map[string]corev1.ResourceRequirements{}}
		for _, s := range settings {
			if _, bad := conflicts[s]; bad || c.undecodable.get(s.UID) != nil || !selects(s, n) {
				continue
			}
			for _, ct := range s.Spec.Containers {
				o.containers[ct.Name] = ct.Resources
			}
			o.setting = s.Name
			break // one setting per node (there is no other: conflicts)
		}
		for _, ct := range r.e.Spec.Template.Spec.Containers {
			suffix := r.e.Namespace + "." + r.e.Name + "." + ct.Name
			for _, key := range []string{v1.DataDogNodeResourcesPrefix + suffix, v1.NodeResourcesPrefix + suffix} {
				// trust: eds.node.resources
				raw, ok := n.Annotations[key]
				if !ok {
					continue
				}
				var res corev1.ResourceRequirements
				if err := json.Unmarshal([]byte(raw), &res); err != nil {
					c.recorder.Eventf(r.e, corev1.EventTypeWarning, EventSettingInvalid, "node %s annotation %s is not a JSON ResourceRequirements (ignored): %v", n.Name, key, err)
					continue
				}
				o.containers[ct.Name] = res
			}
		}
		if len(o.containers) > 0 { // the setting's name is not hashed: an upgrade replaces no pod for the labels it adds
			raw, _ := json.Marshal(o.containers) // map keys marshal sorted
			sum := sha256.Sum256(raw)
			o.hash = hex.EncodeToString(sum[:])[:10]
		}
		out[n.Name] = o
	}
	c.markSettings(ctx, settings, conflicts)
	return out
}

// selects says whether setting s selects node n.
func selects(s *v1.ExtendedDaemonsetSetting, n *corev1.Node) bool {
	sel, err := metav1.LabelSelectorAsSelector(&s.Spec.NodeSelector)
	return err == nil && sel.Matches(labels.Set(n.Labels))
}

// settingConflicts are the settings (of settings, oldest first, those
// readable) that select a node an older one selects too, with why.
func settingConflicts(nodes []*corev1.Node, settings []*v1.ExtendedDaemonsetSetting, readable func(*v1.ExtendedDaemonsetSetting) bool) map[*v1.ExtendedDaemonsetSetting]string {
	conflicts := map[*v1.ExtendedDaemonsetSetting]string{}
	for _, n := range nodes {
		var first *v1.ExtendedDaemonsetSetting
		for _, s := range settings {
			if !readable(s) || !selects(s, n) {
				continue
			}
			if first == nil {
				first = s
				continue
			}
			if _, seen := conflicts[s]; !seen {
				conflicts[s] = fmt.Sprintf("node %s is also selected by the older setting %s; this one applies nowhere until the node selectors are disjoint", n.Name, first.Name)
			}
		}
	}
	return conflicts
}

// settingsOf are the settings that reference e, oldest first.
func (c *Controller) settingsOf(e *v1.ExtendedDaemonSet) []*v1.ExtendedDaemonsetSetting {
	all, err := c.settings.ExtendedDaemonsetSettings(e.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*v1.ExtendedDaemonsetSetting
	for _, s := range all {
		if s.Spec.Reference != nil && s.Spec.Reference.Name == e.Name && s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationTimestamp.Equal(&out[j].CreationTimestamp) {
			return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// markSettings writes each setting's status when it changed.
func (c *Controller) markSettings(ctx context.Context, settings []*v1.ExtendedDaemonsetSetting, conflicts map[*v1.ExtendedDaemonsetSetting]string) {
	for _, s := range settings {
		want := v1.ExtendedDaemonsetSettingStatus{Status: v1.SettingStatusValid}
		if msg, bad := conflicts[s]; bad {
			want = v1.ExtendedDaemonsetSettingStatus{Status: v1.SettingStatusError, Error: msg}
		}
		if err := c.undecodable.get(s.UID); err != nil {
			want = v1.ExtendedDaemonsetSettingStatus{Status: v1.SettingStatusError,
				Error: fmt.Sprintf("the controller cannot read this setting (%v): it applies nowhere until it is fixed", err)}
		}
		if s.Status == want {
			continue
		}
		patch, err := statusPatch(want) // not decoded back: an unreadable setting gets its status too
		if err == nil {
			err = c.patchStatus(ctx, "extendeddaemonsetsettings", s.Namespace, s.Name, patch)
		}
		if err != nil {
			c.log.Warn("update setting status", "setting", s.Namespace+"/"+s.Name, "err", err)
			continue
		}
		if want.Status == v1.SettingStatusError {
			c.recorder.Event(s, corev1.EventTypeWarning, EventSettingInvalid, want.Error)
		}
	}
}
