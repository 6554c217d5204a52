package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// executorJob is a Job whose pod the node executor runs: script is run by sh
// with the node's /k3os/system mounted.
func executorJob(name, script string, deadline *int64) *batchv1.Job {
	backoff := int32(0)
	hp := corev1.HostPathDirectoryOrCreate
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, ActiveDeadlineSeconds: deadline, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ExecutorLabelKey: ExecutorLabelValue}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Volumes: []corev1.Volume{{Name: "system", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/k3os/system", Type: &hp}}}},
				Containers: []corev1.Container{{Name: "upgrade", Image: "slipway", Command: []string{"/bin/sh", "-c", script},
					Env:          []corev1.EnvVar{{Name: "SYSTEM_DIR", Value: "/k3os/system"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "system", MountPath: "/k3os/system"}}}}}}}}
}

// jobFinished waits until the Job has a Complete or Failed condition and returns it.
func jobFinished(t *testing.T, cs *kubernetes.Clientset, name string) *batchv1.Job {
	t.Helper()
	return until(t, cs.BatchV1().RESTClient(), "jobs", "default", name, &batchv1.Job{}, func(o runtime.Object) bool {
		for _, c := range o.(*batchv1.Job).Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}).(*batchv1.Job)
}

func hasCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func jobPod(t *testing.T, cs *kubernetes.Clientset, job string) corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of job %s: %v (%d found)", job, err, len(pods.Items))
	}
	return pods.Items[0]
}

func TestExecutorJobSucceedsOnExitZero(t *testing.T) {
	cs := clientset(t)
	j := executorJob("exit-zero", `echo "$NODE_NAME" > "$SYSTEM_DIR/ran-on" && test -d /k3os/system`, nil)
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := jobFinished(t, cs, "exit-zero")
	if !hasCondition(got, batchv1.JobComplete) || got.Status.Succeeded != 1 {
		t.Fatalf("job status %+v, want Complete with 1 succeeded", got.Status)
	}
	pod := jobPod(t, cs, "exit-zero")
	b, err := os.ReadFile(filepath.Join(cluster.NodesRoot, pod.Spec.NodeName, "k3os", "system", "ran-on"))
	if err != nil || strings.TrimSpace(string(b)) != pod.Spec.NodeName {
		t.Fatalf("the pod did not write into its node's directory: %q, %v", b, err)
	}
}

func TestExecutorJobFailsOnExitOne(t *testing.T) {
	cs := clientset(t)
	j := executorJob("exit-one", `echo broken >&2; exit 1`, nil)
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := jobFinished(t, cs, "exit-one")
	if !hasCondition(got, batchv1.JobFailed) || got.Status.Failed != 1 {
		t.Fatalf("job status %+v, want Failed with 1 failed pod", got.Status)
	}
	pod := jobPod(t, cs, "exit-one")
	st := pod.Status.ContainerStatuses
	if pod.Status.Phase != corev1.PodFailed || len(st) != 1 || st[0].State.Terminated == nil ||
		st[0].State.Terminated.ExitCode != 1 || !strings.Contains(st[0].State.Terminated.Message, "broken") {
		t.Fatalf("pod status %+v, want Failed, exit code 1 and the output in the message", pod.Status)
	}
}

func TestExecutorKillsPodPastJobDeadline(t *testing.T) {
	cs := clientset(t)
	deadline := int64(2)
	j := executorJob("too-slow", `echo $$ > "$SYSTEM_DIR/too-slow.pid"; exec sleep 600`, &deadline)
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := jobFinished(t, cs, "too-slow")
	if !hasCondition(got, batchv1.JobFailed) {
		t.Fatalf("job status %+v, want Failed (DeadlineExceeded)", got.Status)
	}
	var pidFile string
	for _, n := range cluster.Nodes {
		if p := filepath.Join(cluster.NodesRoot, n, "k3os", "system", "too-slow.pid"); fileExists(p) {
			pidFile = p
		}
	}
	if pidFile == "" {
		t.Fatal("the job's process never ran")
	}
	b, _ := os.ReadFile(pidFile)
	proc := "/proc/" + strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for fileExists(proc) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond) // nothing to watch: a process's end
	}
	if fileExists(proc) {
		t.Fatalf("process %s of the deleted pod is still running", proc)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestExecutorRunsSlipwayWithNodePaths runs a pod shaped like the agent's
// upgrade Job: argv[0] "slipway" resolves to the executor's path, and the
// hostPath mount paths in its arguments point into the node's directory.
func TestExecutorRunsSlipwayWithNodePaths(t *testing.T) {
	cs := clientset(t)
	j := executorJob("slipway-args", "", nil)
	hp := corev1.HostPathDirectoryOrCreate
	spec := &j.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/k3os", Type: &hp}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "run", MountPath: "/run/k3os"})
	c.Command = []string{"/usr/local/bin/slipway"}
	c.Args = []string{"ops", "upgrade", "--system-dir", "/k3os/system", "--lock-file", "/run/k3os/upgrade.lock"}
	spec.NodeName = cluster.Nodes[0]
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := jobFinished(t, cs, "slipway-args"); !hasCondition(got, batchv1.JobComplete) {
		t.Fatalf("job status %+v, want Complete", got.Status)
	}
	dir := cluster.NodeDir(cluster.Nodes[0])
	b, err := os.ReadFile(filepath.Join(dir, "slipway-args"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("ops upgrade --system-dir %s/k3os/system --lock-file %s/run/k3os/upgrade.lock\n", dir, dir)
	if string(b) != want {
		t.Errorf("slipway ran with %q, want %q", b, want)
	}
}

// TestJobControllerRetriesExecutedPods: the first pod fails, the Job
// controller (backoffLimit 1) makes a second one, which succeeds.
func TestJobControllerRetriesExecutedPods(t *testing.T) {
	cs := clientset(t)
	// The counter lives outside any node's directory: the retry may run on another node.
	counter := filepath.Join(cluster.NodesRoot, "retry-attempts")
	j := executorJob("retry", `echo x >> `+counter+`; test "$(wc -l < `+counter+`)" -ge 2`, nil)
	one := int32(1)
	j.Spec.BackoffLimit = &one
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := jobFinished(t, cs, "retry")
	if !hasCondition(got, batchv1.JobComplete) || got.Status.Failed != 1 || got.Status.Succeeded != 1 {
		t.Fatalf("job status %+v, want Complete after 1 failed and 1 succeeded pod", got.Status)
	}
}

// TestExecutorStopsDeletedPodGracefully deletes a running executed pod: its
// process gets SIGTERM and its grace period (it takes a second to finish),
// and only then is the pod gone.
func TestExecutorStopsDeletedPodGracefully(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	tmpl := executorJob("graceful", `trap 'sleep 1; echo term > "$SYSTEM_DIR/got-term"; exit 0' TERM; while :; do sleep 0.1; done`, nil).Spec.Template
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "graceful", Namespace: "default", Labels: tmpl.Labels}, Spec: tmpl.Spec}
	pod.Spec.NodeName = cluster.Nodes[1]
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, cs.CoreV1().RESTClient(), "pods", "default", "graceful", &corev1.Pod{}, func(o runtime.Object) bool {
		return o.(*corev1.Pod).Status.Phase == corev1.PodRunning
	})
	grace := int64(20)
	if err := cs.CoreV1().Pods("default").Delete(ctx, "graceful", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", "default", fields.OneTermEqualSelector("metadata.name", "graceful"))
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, func(store cache.Store) (bool, error) {
		return len(store.List()) == 0, nil
	}, func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
	if err != nil {
		t.Fatalf("pod not deleted: %v", err)
	}
	if !fileExists(filepath.Join(cluster.NodeDir(cluster.Nodes[1]), "k3os", "system", "got-term")) {
		t.Error("the process was not given SIGTERM before the pod was deleted")
	}
}

// executorPod is a bare pod run by the executor on the first node.
func executorPod(name, script string) *corev1.Pod {
	tmpl := executorJob(name, script, nil).Spec.Template
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: tmpl.Labels}, Spec: tmpl.Spec}
	pod.Spec.NodeName = cluster.Nodes[0]
	return pod
}

func podDone(o runtime.Object) bool {
	p := o.(*corev1.Pod).Status.Phase
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

func TestExecutorRestartsOnFailure(t *testing.T) {
	cs := clientset(t)
	pod := executorPod("on-failure", `echo x >> "$SYSTEM_DIR/on-failure-runs"; test "$(wc -l < "$SYSTEM_DIR/on-failure-runs")" -ge 2`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := until(t, cs.CoreV1().RESTClient(), "pods", "default", "on-failure", &corev1.Pod{}, podDone).(*corev1.Pod)
	st := got.Status.ContainerStatuses
	if got.Status.Phase != corev1.PodSucceeded || len(st) != 1 || st[0].RestartCount != 1 ||
		st[0].LastTerminationState.Terminated == nil || st[0].LastTerminationState.Terminated.ExitCode != 1 {
		t.Fatalf("pod status %+v, want Succeeded after one restart of a run that exited 1", got.Status)
	}
}

func TestExecutorEnforcesPodDeadline(t *testing.T) {
	cs := clientset(t)
	pod := executorPod("pod-deadline", `exec sleep 600`)
	one := int64(1)
	pod.Spec.ActiveDeadlineSeconds = &one
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := until(t, cs.CoreV1().RESTClient(), "pods", "default", "pod-deadline", &corev1.Pod{}, podDone).(*corev1.Pod)
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("pod phase %s reason %q, want Failed DeadlineExceeded", got.Status.Phase, got.Status.Reason)
	}
}
