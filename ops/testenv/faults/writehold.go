package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/webhook"
)

// SlowWrites is served by a WriteHold: a validating admission webhook
// that the harness serves itself and registers with the API server for
// one writer's writes to some resources (a ValidatingWebhookConfiguration
// whose matchConditions name the writer's user). It allows every request;
// while a hold is on it answers each only after the hold's delay, or at
// the hold's end, whichever comes first. A validating webhook runs before
// the API server stores the object, so the write lands that much later,
// and a reader meanwhile (a GET, a watch) sees the object as it was: what
// a writer whose requests are slow, for that writer and those resources
// alone, does to its readers. Nothing in the product knows of it: the API
// server calls it as it would any site's webhook. failurePolicy Ignore
// and the API server's longest timeout (30 s): a webhook gone or late
// lets the write through, so the hold delays and never refuses.

// MaxHold bounds a SlowWrites fault's hold of one write: it must end
// before the API server gives up on the webhook (timeoutSeconds 30).
const MaxHold = 25 * time.Second

// holdTimeout is the webhook's timeoutSeconds: the API server's most.
const holdTimeout = 30

// WriteScope is what a WriteHold holds: one user's writes to some
// resources.
type WriteScope struct {
	// User is the writer's username as the API server authenticates it
	// (a ServiceAccount's: system:serviceaccount:<namespace>:<name>).
	User string
	// Rules are the operations and resources held (a subresource such as
	// status is held only when named).
	Rules []admissionregv1.RuleWithOperations
}

// HeldWrite is one request a hold delayed.
type HeldWrite struct {
	// At is when the API server asked; For how long it was held.
	At  time.Time
	For time.Duration
	// Operation (CREATE, UPDATE, DELETE), Resource (with its
	// subresource), Namespace and Name say what was written.
	Operation, Resource, Namespace, Name string
}

func (w HeldWrite) String() string {
	obj := w.Name
	if w.Namespace != "" {
		obj = w.Namespace + "/" + w.Name
	}
	return fmt.Sprintf("%s %s %s held %s", w.Operation, w.Resource, obj, w.For.Round(time.Millisecond))
}

// WriteHold is the webhook of one scope, registered with one API server
// from StartWriteHold to Close.
type WriteHold struct {
	name   string
	client kubernetes.Interface
	log    func(string)
	stop   context.CancelFunc
	served chan error

	mu sync.Mutex
	// release is closed when the hold in force ends (nil: none); delay
	// is each write's hold meanwhile.
	release chan struct{}
	// end closes release, once, whoever ends the hold (its heal or Close).
	end     func()
	delay   time.Duration
	held    []HeldWrite
	waiting int
}

// StartWriteHold serves the webhook of scope on a port of 127.0.0.1 (a
// self-signed certificate, made now) and registers it with the API server
// of client as the ValidatingWebhookConfiguration slipway-chaos-hold-<name>.
// log, when set, receives a line per write held. No hold is on until Hold.
func StartWriteHold(ctx context.Context, client kubernetes.Interface, name string, scope WriteScope, log func(string)) (*WriteHold, error) {
	if scope.User == "" || len(scope.Rules) == 0 {
		return nil, fmt.Errorf("write hold %s: a scope needs a user and rules", name)
	}
	caPEM, cert, err := webhook.SelfSigned([]string{"127.0.0.1"})
	if err != nil {
		return nil, fmt.Errorf("write hold %s: %w", name, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("write hold %s: %w", name, err)
	}
	sctx, stop := context.WithCancel(context.Background())
	w := &WriteHold{name: name, client: client, log: log, stop: stop, served: make(chan error, 1)}
	go func() { w.served <- webhook.Serve(sctx, l, cert, w) }()
	url := "https://" + l.Addr().String() + "/hold"
	fail, side := admissionregv1.Ignore, admissionregv1.SideEffectClassNone
	timeout := int32(holdTimeout)
	cfg := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.configName()},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:                    name + ".hold.chaos.slipway.dev",
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   scope.Rules,
			FailurePolicy:           &fail,
			SideEffects:             &side,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregv1.MatchCondition{{Name: "writer",
				Expression: "request.userInfo.username == " + strconv.Quote(scope.User)}},
		}}}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		stop()
		<-w.served
		return nil, fmt.Errorf("write hold %s: register the webhook: %w", name, err)
	}
	return w, nil
}

func (w *WriteHold) configName() string { return "slipway-chaos-hold-" + w.name }

// Hold holds every write of the scope for delay (at most MaxHold) from now
// until heal, which lets the writes held go at once.
func (w *WriteHold) Hold(delay time.Duration) (heal func(), err error) {
	if delay <= 0 || delay > MaxHold {
		return nil, fmt.Errorf("write hold %s: a hold of %s: want more than 0 and at most %s", w.name, delay, MaxHold)
	}
	release := make(chan struct{})
	end := sync.OnceFunc(func() { close(release) })
	w.mu.Lock()
	w.release, w.end, w.delay = release, end, delay
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.release == release {
			w.release, w.end = nil, nil
		}
		w.mu.Unlock()
		end()
	}, nil
}

// endHold ends the hold in force, if any (its heal may still be called:
// it then does nothing).
func (w *WriteHold) endHold() {
	w.mu.Lock()
	end := w.end
	w.release, w.end = nil, nil
	w.mu.Unlock()
	if end != nil {
		end()
	}
}

// Held are the writes held so far, in the order their holds ended.
func (w *WriteHold) Held() []HeldWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]HeldWrite(nil), w.held...)
}

// Waiting is how many writes the webhook holds now.
func (w *WriteHold) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// Close ends any hold, removes the webhook's registration (a moment at
// most: the API server may be going too) and stops serving it.
func (w *WriteHold) Close(ctx context.Context) error {
	w.endHold()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := w.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(dctx, w.configName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	w.stop()
	return errors.Join(err, <-w.served)
}

// ServeHTTP answers one AdmissionReview: allowed, after the hold in force.
func (w *WriteHold) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "want an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	req := review.Request
	w.mu.Lock()
	release, delay := w.release, w.delay
	if release != nil {
		w.waiting++
	}
	w.mu.Unlock()
	if release != nil {
		start := time.Now()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-release:
		case <-r.Context().Done():
		}
		t.Stop()
		res := req.Resource.Resource
		if req.SubResource != "" {
			res += "/" + req.SubResource
		}
		h := HeldWrite{At: start, For: time.Since(start), Operation: string(req.Operation), Resource: res, Namespace: req.Namespace, Name: req.Name}
		w.mu.Lock()
		w.waiting--
		w.held = append(w.held, h)
		w.mu.Unlock()
		if w.log != nil {
			w.log(fmt.Sprintf("write hold %s: %s (asked %s)", w.name, h, start.UTC().Format("15:04:05.000")))
		}
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(out)
}
