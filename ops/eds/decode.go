package eds

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kjson "sigs.k8s.io/json"
)

// The objects of eds.slipway.dev are listed and watched as JSON and decoded
// one by one: an object the API server accepted but the controller cannot
// read (a duration past Go's range, a field of the wrong type stored before
// the schema said so) must not fail the whole list, which would stop every
// ExtendedDaemonSet at start and freeze every view while running. Such an
// object is cached with the parts that decode (its metadata, status and the
// spec fields that read), and its decode error is kept by UID for the sync
// to report on that object alone.

// decodeErrors are the decode errors of the cached objects, by UID.
type decodeErrors struct {
	mu    sync.Mutex
	byUID map[types.UID]error
}

func (d *decodeErrors) set(uid types.UID, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byUID == nil {
		d.byUID = map[types.UID]error{}
	}
	if err == nil {
		delete(d.byUID, uid)
		return
	}
	d.byUID[uid] = err
}

// get is the error decoding the object with uid, nil when it decoded.
func (d *decodeErrors) get(uid types.UID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byUID[uid]
}

// decodeObject decodes raw into a new object from newObj. When that fails
// it returns the object with what does decode (metadata; status; each spec
// field that decodes on its own) and records the error under its UID.
func (d *decodeErrors) decodeObject(raw []byte, newObj func() runtime.Object) (runtime.Object, error) {
	obj := newObj()
	full := kjson.UnmarshalCaseSensitivePreserveInts(raw, obj)
	if full == nil {
		if m, ok := obj.(metav1.Object); ok {
			d.set(m.GetUID(), nil)
		}
		return obj, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("decode an object: %w", err)
	}
	obj, where := salvage(fields, newObj)
	if where != "" {
		full = fmt.Errorf("%s: %w", where, full)
	}
	m, ok := obj.(metav1.Object)
	if !ok || m.GetUID() == "" {
		return nil, fmt.Errorf("decode an object without readable metadata: %w", full)
	}
	d.set(m.GetUID(), full)
	return obj, nil
}

// salvage decodes into a new object the members of fields that decode:
// the spec's fields one by one, then the status if it decodes. where
// names the members left out ("spec.strategy").
func salvage(fields map[string]json.RawMessage, newObj func() runtime.Object) (obj runtime.Object, where string) {
	var spec map[string]json.RawMessage
	_ = json.Unmarshal(fields["spec"], &spec)
	keep := map[string]json.RawMessage{}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		keep[k] = fields[k]
	}
	good := map[string]json.RawMessage{}
	var bad []string
	names := make([]string, 0, len(spec))
	for k := range spec {
		names = append(names, k)
	}
	sort.Strings(names)
	try := func(extra map[string]json.RawMessage) bool {
		doc := map[string]json.RawMessage{}
		for k, v := range keep {
			doc[k] = v
		}
		for k, v := range extra {
			doc[k] = v
		}
		raw, _ := json.Marshal(doc)
		return kjson.UnmarshalCaseSensitivePreserveInts(raw, newObj()) == nil
	}
	for _, k := range names {
		trial := map[string]json.RawMessage{k: spec[k]}
		for g, v := range good {
			trial[g] = v
		}
		if s, _ := json.Marshal(trial); try(map[string]json.RawMessage{"spec": s}) {
			good[k] = spec[k]
		} else {
			bad = append(bad, "spec."+k)
		}
	}
	s, _ := json.Marshal(good)
	keep["spec"] = s
	if fields["status"] != nil && try(map[string]json.RawMessage{"status": fields["status"]}) {
		keep["status"] = fields["status"]
	} else if fields["status"] != nil {
		bad = append(bad, "status")
	}
	raw, _ := json.Marshal(keep)
	obj = newObj()
	_ = kjson.UnmarshalCaseSensitivePreserveInts(raw, obj) // every member decoded above
	return obj, strings.Join(bad, ", ")
}

// tolerantListWatch lists and watches resource in namespace ns (all when
// empty) through client, decoding each object on its own (decodeObject).
func (d *decodeErrors) tolerantListWatch(client rest.Interface, resource, ns string, newObj func() runtime.Object) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			raw, err := client.Get().Namespace(ns).Resource(resource).VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Raw()
			if err != nil {
				return nil, err
			}
			var list struct {
				Metadata metav1.ListMeta   `json:"metadata"`
				Items    []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("decode the list of %s: %w", resource, err)
			}
			out := &metav1.List{ListMeta: list.Metadata}
			for _, item := range list.Items {
				obj, err := d.decodeObject(item, newObj)
				if err != nil {
					continue // no UID to report it on; nothing the controller could act on either
				}
				out.Items = append(out.Items, runtime.RawExtension{Object: obj})
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			req := client.Get().Namespace(ns).Resource(resource).VersionedParams(&o, metav1.ParameterCodec)
			if o.TimeoutSeconds != nil {
				req = req.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
			}
			body, err := req.Stream(ctx)
			if err != nil {
				return nil, err
			}
			return watch.NewStreamWatcher(&eventDecoder{body: body, dec: json.NewDecoder(body), errs: d, newObj: newObj},
				apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding")), nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{})
}

// noWatchList says the tolerant list-watch speaks list-then-watch only.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// eventDecoder reads a watch stream's events, decoding each object on its own.
type eventDecoder struct {
	body   io.ReadCloser
	dec    *json.Decoder
	errs   *decodeErrors
	newObj func() runtime.Object
}

func (e *eventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := e.dec.Decode(&ev); err != nil {
		return "", nil, err
	}
	if ev.Type == watch.Error {
		st := &metav1.Status{}
		if err := json.Unmarshal(ev.Object, st); err != nil {
			return "", nil, fmt.Errorf("decode a watch error: %w", err)
		}
		return ev.Type, st, nil
	}
	obj, err := e.errs.decodeObject(ev.Object, e.newObj)
	if err != nil {
		return "", nil, err
	}
	if m, ok := obj.(metav1.Object); ok && ev.Type == watch.Deleted {
		e.errs.set(m.GetUID(), nil)
	}
	return ev.Type, obj, nil
}

func (e *eventDecoder) Close() { _ = e.body.Close() }
