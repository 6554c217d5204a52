package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/manifest"
)

// sims plays the worker sidecars of the pods that run no real worker
// process, for pools too large for one process per pod: each pod's
// "kubelet" reads the pod's share annotation after a volume lag of its own
// (volumeLag), the "worker" runs the share's jobs (kept in memory: what
// runs), drops them when its share is gone, and reports the version it
// applied on its pod as the workers' ServiceAccount. A pod being deleted
// drops its jobs before the finalizer that holds its object is removed, as
// a kubelet stops the containers first. The played workers hold no Lease:
// the controller judges them by their pods alone.
type sims struct {
	t      testing.TB
	ns     string
	admin  kubernetes.Interface
	worker kubernetes.Interface
	store  cache.Store
	skip   func(pod string) bool

	mu      sync.Mutex
	running map[string][]string // pod name -> the jobs it runs
	started map[types.UID]bool
}

func startSims(ctx context.Context, t testing.TB, p *pool, cfg *rest.Config, store cache.Store, skip func(string) bool) *sims {
	wc := rest.CopyConfig(cfg)
	wc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + p.ns + ":" + manifest.WorkerName}
	s := &sims{t: t, ns: p.ns, admin: p.kube, worker: kubernetes.NewForConfigOrDie(wc), store: store, skip: skip,
		running: map[string][]string{}, started: map[types.UID]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			s.startNew(ctx, &wg)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// startNew starts a played worker for every scheduled pod that has none.
func (s *sims) startNew(ctx context.Context, wg *sync.WaitGroup) {
	for _, o := range s.store.List() {
		pod := o.(*corev1.Pod)
		if s.skip(pod.Name) || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
			continue
		}
		s.mu.Lock()
		seen := s.started[pod.UID]
		s.started[pod.UID] = true
		s.mu.Unlock()
		if !seen {
			wg.Add(1)
			go func() { defer wg.Done(); s.play(ctx, pod.Name, pod.UID) }()
		}
	}
}

// play is one pod's kubelet and worker sidecar, until the pod goes.
func (s *sims) play(ctx context.Context, name string, uid types.UID) {
	lag := volumeLag(name) + 100*time.Millisecond
	last, applied, reported := "", int64(-1), int64(-1)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(lag):
		}
		o, ok, _ := s.store.GetByKey(s.ns + "/" + name)
		pod, _ := o.(*corev1.Pod)
		if !ok || pod.UID != uid || pod.DeletionTimestamp != nil {
			s.set(name, nil)
			if ok && pod.UID == uid {
				s.release(ctx, name, uid)
			}
			return
		}
		if text := pod.Annotations[config.ShareAnnotation]; text != last {
			last = text
			if cfg, err := config.Parse(text); err == nil {
				if w, ok := cfg.Workloads[name]; ok {
					s.set(name, w.Jobs)
					applied = w.Version
				} else {
					s.set(name, nil)
				}
			}
		}
		if applied >= 0 && applied != reported && s.report(ctx, name, applied) == nil {
			reported = applied
		}
	}
}

func (s *sims) set(pod string, jobs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(jobs) == 0 {
		delete(s.running, pod)
		return
	}
	s.running[pod] = jobs
}

// runs is what the played workers run now.
func (s *sims) runs() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.running))
	for k, v := range s.running {
		out[k] = v
	}
	return out
}

func (s *sims) report(ctx context.Context, pod string, version int64) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, swarmv1.AppliedVersionAnnotation, strconv.FormatInt(version, 10))
	_, err := s.worker.CoreV1().Pods(s.ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// release removes the running finalizer: the pod may go.
func (s *sims) release(ctx context.Context, name string, uid types.UID) {
	patch := fmt.Sprintf(`{"metadata":{"finalizers":null,"uid":%q}}`, uid)
	if _, err := s.admin.CoreV1().Pods(s.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
		s.t.Logf("release pod %s: %v", name, err)
	}
}
