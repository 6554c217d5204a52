//go:build ignore

// The stand-in workload of `make demo`'s analysis act (scripts/demo-eds):
// one replica per node of the cluster KUBECONFIG names, serving requests,
// some of which fail. Each scrape of /metrics counts 100 more requests per
// node in standin_requests_total{node, code}; on a node whose pod of the
// ExtendedDaemonSet -eds runs an image ending in -bad, half of them fail
// (code 500): the error rate a bad release causes where it runs. The same
// metric as the stand-in of the analysis tests (ops/analysis/promtest).
//
//	go run scripts/demo-standin.go -listen 127.0.0.1:9091 -namespace demo -eds agent
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9091", "address of /metrics")
	ns := flag.String("namespace", "demo", "namespace of the ExtendedDaemonSet")
	eds := flag.String("eds", "agent", "the ExtendedDaemonSet whose pods decide each node's error rate")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatalf("demo-standin: %v (set KUBECONFIG)", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("demo-standin: %v", err)
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "standin_requests_total",
		Help: "Requests the stand-in workload served, by node and code."}, []string{"node", "code"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(requests)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var mu sync.Mutex
	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		pods, err := kube.CoreV1().Pods(*ns).List(ctx, metav1.ListOptions{LabelSelector: "eds.slipway.dev/name=" + *eds})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		bad := map[string]bool{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, "-bad") {
				bad[p.Spec.NodeName] = true
			}
		}
		mu.Lock()
		for _, n := range nodes.Items {
			failed := 0.0
			if bad[n.Name] {
				failed = 50
			}
			requests.WithLabelValues(n.Name, "500").Add(failed)
			requests.WithLabelValues(n.Name, "200").Add(100 - failed)
		}
		mu.Unlock()
		metrics.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "demo-standin: serving http://%s/metrics\n", *listen)
	log.Fatal(srv.ListenAndServe())
}
