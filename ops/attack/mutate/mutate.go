// Package mutate generates attacks: it walks an object's Go type by
// reflection and makes, for every field, the mutations an attacker holding
// a component's token would try (set a field left empty, change one set,
// add to a list or map, clear what is there), then submits each with that
// token to a real API server and sorts the answers: refused (RBAC or an
// admission policy: Forbidden), invalid (the API's own validation), no
// effect (admitted, but the stored object is the one the unmutated write
// gives: a field dropped or defaulted), allowed by design (admitted, and
// the path is one of the object's holes: what legitimately differs between
// two writes of the component), or allowed and wrong (admitted, and not a
// hole: the confinement has a gap).
//
// It knows no component: a test gives it the object, the holes and how to
// submit (a dry-run create, update or patch with the component's client),
// so the update operator and swarm can use it as the k3os operator does.
package mutate

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Mutation is one change of an object: its path (JSON field names,
// `[i]` for an element, `[key]` for a map entry), what was done, and the
// mutated copy.
type Mutation struct {
	Path, What string
	Object     any
}

// Options steer the walk.
type Options struct {
	// Skip leaves a path (and everything below it) alone: server-written
	// fields, status.
	Skip func(path string) bool
	// KeyPrefixes are map keys to add besides a foreign one
	// ("mutated.example.com/k"): each prefix + "mutated" (the prefixes a
	// policy treats apart).
	KeyPrefixes []string
	// MaxDepth bounds the walk (default 14).
	MaxDepth int
}

// DefaultSkip skips what a client cannot set or the server ignores on a
// write: type meta, status, and the metadata the server writes.
func DefaultSkip(path string) bool {
	switch path {
	case "apiVersion", "kind", "status", "metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp", "metadata.managedFields",
		"metadata.selfLink", "metadata.generation", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds":
		return true
	}
	return false
}

// Generate returns every mutation of obj (a pointer to a Kubernetes
// object), in a stable order.
func Generate(obj any, o Options) []Mutation {
	if o.Skip == nil {
		o.Skip = DefaultSkip
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 14
	}
	count := &walker{o: o, target: -1}
	count.walk(reflect.ValueOf(obj).Elem(), "", 0)
	out := make([]Mutation, 0, count.n)
	for i := range count.n {
		cp := reflect.New(reflect.TypeOf(obj).Elem())
		deepCopyInto(obj, cp.Interface())
		w := &walker{o: o, target: i}
		w.walk(cp.Elem(), "", 0)
		if w.applied {
			out = append(out, Mutation{Path: w.path, What: w.what, Object: cp.Interface()})
		}
	}
	return out
}

// deepCopyInto copies src into dst (both pointers to the same type) with
// the type's DeepCopyInto when it has one, else by reflection.
func deepCopyInto(src, dst any) {
	if m := reflect.ValueOf(src).MethodByName("DeepCopyInto"); m.IsValid() {
		m.Call([]reflect.Value{reflect.ValueOf(dst)})
		return
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src).Elem())
}

// walker counts the mutation points in walk order and applies the one
// numbered target.
type walker struct {
	o          Options
	target, n  int
	applied    bool
	path, what string
}

// point is one mutation: apply runs when it is the target.
func (w *walker) point(path, what string, apply func()) {
	if w.n == w.target {
		apply()
		w.applied, w.path, w.what = true, path, what
	}
	w.n++
}

var (
	timeType     = reflect.TypeOf(metav1.Time{})
	microType    = reflect.TypeOf(metav1.MicroTime{})
	quantityType = reflect.TypeOf(resource.Quantity{})
	intstrType   = reflect.TypeOf(intstr.IntOrString{})
	durationType = reflect.TypeOf(metav1.Duration{})
)

// sampleTime is the time the mutations write.
var sampleTime = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)

func (w *walker) walk(v reflect.Value, path string, depth int) {
	if depth > w.o.MaxDepth || (path != "" && w.o.Skip(path)) {
		return
	}
	switch v.Kind() {
	case reflect.Ptr:
		if v.IsNil() {
			// A field left empty: set it (to each value its walk makes).
			tmp := reflect.New(v.Type().Elem())
			before := w.applied
			w.fill(tmp.Elem(), path, depth)
			if !before && w.applied {
				v.Set(tmp)
			}
			return
		}
		w.point(path, "clear", func() { v.Set(reflect.Zero(v.Type())) })
		w.walk(v.Elem(), path, depth+1)
	case reflect.Struct:
		w.walkStruct(v, path, depth)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes
		}
		if v.Len() > 0 {
			w.point(path, "clear", func() { v.Set(reflect.Zero(v.Type())) })
		}
		for i := range v.Len() {
			w.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
		w.point(path+"[+]", "add", func() {
			e := reflect.New(v.Type().Elem()).Elem()
			sample(e)
			v.Set(reflect.Append(v, e))
		})
	case reflect.Map:
		w.walkMap(v, path, depth)
	default:
		w.scalar(v, path)
	}
}

// fill walks a zero value (a field left empty) as a set of "set" points.
func (w *walker) fill(v reflect.Value, path string, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		if special(v.Type()) {
			w.point(path, "set", func() { sample(v) })
			return
		}
		w.walkStruct(v, path, depth+1)
	default:
		w.walk(v, path, depth+1)
	}
}

func special(t reflect.Type) bool {
	return t == timeType || t == microType || t == quantityType || t == intstrType || t == durationType
}

func (w *walker) walkStruct(v reflect.Value, path string, depth int) {
	if special(v.Type()) {
		w.point(path, "change", func() { sample(v) })
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, inline := jsonName(f)
		if name == "-" {
			continue
		}
		p := path
		if !inline {
			p = join(path, name)
		}
		w.walk(v.Field(i), p, depth+1)
	}
}

func (w *walker) walkMap(v reflect.Value, path string, depth int) {
	keys := v.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		p := fmt.Sprintf("%s[%v]", path, k)
		w.point(p, "remove", func() { v.SetMapIndex(k, reflect.Value{}) })
		if v.Type().Elem().Kind() == reflect.String {
			w.point(p, "change", func() { v.SetMapIndex(k, reflect.ValueOf(v.MapIndex(k).String()+"-x").Convert(v.Type().Elem())) })
		}
	}
	if v.Type().Key().Kind() != reflect.String {
		return
	}
	for _, key := range append([]string{"mutated.example.com/k"}, prefixed(w.o.KeyPrefixes)...) {
		w.point(fmt.Sprintf("%s[%s]", path, key), "add", func() {
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			e := reflect.New(v.Type().Elem()).Elem()
			sample(e)
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), e)
		})
	}
	_ = depth
}

func prefixed(prefixes []string) []string {
	out := make([]string, len(prefixes))
	for i, p := range prefixes {
		out[i] = p + "mutated"
	}
	return out
}

func (w *walker) scalar(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			w.point(path, "set", func() { v.SetString("mutated") })
		} else {
			w.point(path, "change", func() { v.SetString(v.String() + "-x") })
		}
	case reflect.Bool:
		w.point(path, map[bool]string{false: "set", true: "change"}[v.Bool()], func() { v.SetBool(!v.Bool()) })
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.point(path, "change", func() { v.SetInt(v.Int() + 1) })
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		w.point(path, "change", func() { v.SetUint(v.Uint() + 1) })
	}
}

// sample sets v to a non-zero value: scalars and the special structs, and
// the scalar fields of a plain struct (one level: a new list element).
func sample(v reflect.Value) {
	switch v.Type() {
	case timeType:
		v.Set(reflect.ValueOf(metav1.NewTime(sampleTime)))
		return
	case microType:
		v.Set(reflect.ValueOf(metav1.NewMicroTime(sampleTime)))
		return
	case quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("1")))
		return
	case intstrType:
		v.Set(reflect.ValueOf(intstr.FromInt32(1)))
		return
	case durationType:
		v.Set(reflect.ValueOf(metav1.Duration{Duration: time.Hour}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("mutated")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				if k := v.Field(i).Kind(); k != reflect.Ptr && k != reflect.Slice && k != reflect.Map && k != reflect.Struct {
					sample(v.Field(i))
				}
			}
		}
	}
}

func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	name, rest, _ := strings.Cut(tag, ",")
	if strings.Contains(rest, "inline") || (name == "" && f.Anonymous) {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Holes are the paths a component legitimately varies: glob patterns where
// `*` stands for any run of characters (`spec.template.spec.containers[0].args[*]`,
// `metadata.annotations[ops.slipway.dev/*]`).
type Holes []string

// Match reports whether path is one of the holes.
func (h Holes) Match(path string) bool {
	for _, p := range h {
		if globRE(p).MatchString(path) {
			return true
		}
	}
	return false
}

var globCache sync.Map // pattern -> *regexp.Regexp

func globRE(p string) *regexp.Regexp {
	if re, ok := globCache.Load(p); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".*") + "$")
	globCache.Store(p, re)
	return re
}
