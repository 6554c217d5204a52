package crds

import (
	"encoding/json"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func updateChannelCRD(t *testing.T) *apiextv1.CustomResourceDefinition {
	return opsCRD(t, "updatechannels.ops.slipway.dev")
}

// opsCRD is the embedded ops.slipway.dev CRD of that name.
func opsCRD(t *testing.T, name string) *apiextv1.CustomResourceDefinition {
	t.Helper()
	objs, err := OfGroup("ops.slipway.dev") // other groups have CRDs of their own
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("no embedded CRD %s (have %v)", name, names)
	return nil
}

// The per-node NodeUpdate: namespaced, spec and status apart (the status
// subresource is what lets RBAC give the agent its status only), its map
// lists keyed by channel UID, and printer columns for kubectl get.
func TestNodeUpdateShape(t *testing.T) {
	crd := opsCRD(t, "nodeupdates.ops.slipway.dev")
	n := crd.Spec.Names
	if n.Kind != "NodeUpdate" || n.Plural != "nodeupdates" || crd.Spec.Scope != apiextv1.NamespaceScoped {
		t.Errorf("names %+v scope %s", n, crd.Spec.Scope)
	}
	if len(n.Categories) != 0 {
		t.Errorf("categories = %v: one object per node would flood kubectl get all", n.Categories)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Fatal("status subresource is off")
	}
	root := v.Schema.OpenAPIV3Schema
	for _, path := range []string{"spec.channels", "status.reports"} {
		p := prop(t, root, path)
		if p.XListType == nil || *p.XListType != "map" || strings.Join(p.XListMapKeys, ",") != "uid" || p.MaxItems == nil {
			t.Errorf("%s: list type %v keys %v max %v, want a bounded map keyed by uid", path, p.XListType, p.XListMapKeys, p.MaxItems)
		}
	}
	var defaulted []string
	var walk func(path string, p apiextv1.JSONSchemaProps)
	walk = func(path string, p apiextv1.JSONSchemaProps) {
		if p.Default != nil {
			defaulted = append(defaulted, path)
		}
		for k, c := range p.Properties {
			walk(path+"."+k, c)
		}
		if p.Items != nil && p.Items.Schema != nil {
			walk(path+"[]", *p.Items.Schema)
		}
	}
	walk("spec.channels", prop(t, root, "spec.channels"))
	if len(defaulted) > 0 {
		t.Errorf("defaults under spec.channels (the object must read back as the controller wrote it): %v", defaulted)
	}
	var order []string
	for _, c := range v.AdditionalPrinterColumns {
		order = append(order, c.Name+"="+c.JSONPath)
	}
	want := "Node=.metadata.name,Channel=.spec.channels[0].name,Slot=.spec.channels[0].slot.version," +
		"Phase=.status.reports[0].phase,Version=.spec.channels[0].resolved.version,Running=.status.booted.rootfs,Staged=.status.staged.rootfs," +
		"Age=.metadata.creationTimestamp"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("columns = %s\nwant      %s", got, want)
	}
}

func TestNamesAndShape(t *testing.T) {
	crd := updateChannelCRD(t)
	if crd.Name != "updatechannels.ops.slipway.dev" || crd.Spec.Group != "ops.slipway.dev" {
		t.Errorf("name %q group %q", crd.Name, crd.Spec.Group)
	}
	if crd.Spec.Scope != apiextv1.NamespaceScoped {
		t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
	}
	n := crd.Spec.Names
	if n.Kind != "UpdateChannel" || n.Plural != "updatechannels" || n.ListKind != "UpdateChannelList" {
		t.Errorf("names = %+v", n)
	}
	if strings.Join(n.ShortNames, ",") != "upchan,upchans" || strings.Join(n.Categories, ",") != "all" {
		t.Errorf("short names %v categories %v", n.ShortNames, n.Categories)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("versions = %d", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1" || !v.Served || !v.Storage {
		t.Errorf("version %s served %v storage %v", v.Name, v.Served, v.Storage)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("status subresource is off")
	}
}

func TestPrinterColumns(t *testing.T) {
	want := map[string]string{
		"Version":     ".spec.version",
		"Latest":      ".status.latestVersion",
		"Concurrency": ".spec.concurrency",
		"Updating":    ".status.counts.updating",
		"Up-to-date":  ".status.counts.upToDate",
		"Skipped":     ".status.counts.skipped",
		"Staged":      ".status.counts.staged",
		"Rollback":    ".status.analysis.rollback.state",
		"Age":         ".metadata.creationTimestamp",
	}
	cols := updateChannelCRD(t).Spec.Versions[0].AdditionalPrinterColumns
	var order []string
	for _, c := range cols {
		order = append(order, c.Name)
		if want[c.Name] != c.JSONPath {
			t.Errorf("column %s: path %q, want %q", c.Name, c.JSONPath, want[c.Name])
		}
	}
	if got := strings.Join(order, ","); got != "Version,Latest,Concurrency,Updating,Up-to-date,Skipped,Staged,Rollback,Age" {
		t.Errorf("columns = %s", got)
	}
}

// prop walks a dotted path of properties from the root schema.
func prop(t *testing.T, root *apiextv1.JSONSchemaProps, path string) apiextv1.JSONSchemaProps {
	t.Helper()
	p := *root
	for _, k := range strings.Split(path, ".") {
		next, ok := p.Properties[k]
		if !ok {
			t.Fatalf("schema has no %s (at %s)", path, k)
		}
		p = next
	}
	return p
}

func TestDefaultsAndValidation(t *testing.T) {
	root := updateChannelCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema
	defaults := []struct{ path, want string }{
		{"spec.concurrency", `1`},
		{"spec.pollInterval", `"15m"`},
		{"spec.rebootDelay", `"5s"`},
		{"spec.upgradeTimeout", `"15m"`},
		{"spec.nodeReadyTimeout", `"10m"`},
		{"spec.maxFailures", `1`},
		{"spec.drain", `{}`},
		{"spec.drain.enabled", `true`},
		{"spec.drain.timeout", `"10m"`},
		{"spec.drain.ignoreDaemonSets", `true`},
		{"spec.components", `{}`},
		{"spec.components.rootfs", `true`},
		{"spec.components.kernel", `true`},
		{"spec.components.k3s", `false`},
	}
	for _, d := range defaults {
		p := prop(t, root, d.path)
		if p.Default == nil {
			t.Errorf("%s has no default, want %s", d.path, d.want)
			continue
		}
		if string(p.Default.Raw) != d.want {
			t.Errorf("%s default = %s, want %s", d.path, p.Default.Raw, d.want)
		}
	}
	for _, path := range []string{"spec", "spec.url", "spec.version", "status", "status.counts", "spec.window.start"} {
		if p := prop(t, root, path); p.Default != nil {
			t.Errorf("%s has default %s, want none", path, p.Default.Raw)
		}
	}
	for _, path := range []string{"spec.concurrency", "spec.maxFailures"} {
		if p := prop(t, root, path); p.Minimum == nil || *p.Minimum != 1 {
			t.Errorf("%s minimum = %v, want 1", path, p.Minimum)
		}
	}
	if !contains(prop(t, root, "spec").Required, "url") || !contains(root.Required, "spec") {
		t.Error("spec or spec.url is not required")
	}
	if got := prop(t, root, "status.conditions"); got.XListType == nil || *got.XListType != "map" {
		t.Errorf("status.conditions list type = %v, want map", got.XListType)
	}
}

func TestStructural(t *testing.T) {
	root := updateChannelCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema
	raw, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `"$ref"`) {
		t.Error("schema still holds a $ref; a structural schema needs every type inlined")
	}
	walk(root, "", func(path string, p *apiextv1.JSONSchemaProps) {
		if p.Type == "" && !p.XIntOrString && (p.XPreserveUnknownFields == nil || !*p.XPreserveUnknownFields) {
			t.Errorf("%s has no type", path)
		}
		if strings.HasPrefix(path, ".spec") && !strings.HasSuffix(path, "[]") && p.Description == "" {
			t.Errorf("%s has no description", path)
		}
	})
}

func walk(p *apiextv1.JSONSchemaProps, path string, f func(string, *apiextv1.JSONSchemaProps)) {
	f(path, p)
	for k, c := range p.Properties {
		walk(&c, path+"."+k, f)
	}
	if p.Items != nil && p.Items.Schema != nil {
		walk(p.Items.Schema, path+"[]", f)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestParseRejectsOtherKinds(t *testing.T) {
	_, err := parse([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"))
	if err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Fatalf("err = %v, want one naming the ConfigMap", err)
	}
	got, err := parse([]byte("---\n---\n"))
	if err != nil || len(got) != 0 {
		t.Fatalf("empty stream: %v, %d objects", err, len(got))
	}
}
