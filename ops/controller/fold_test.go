package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestForgetNode(t *testing.T) {
	a := &Controller{viewWrites: map[string]viewsWritten{"gone": {rv: "7"}, "late": {rv: "8"}, "stays": {rv: "9"}},
		claims: map[string]time.Time{"gone": time.Now(), "late": time.Now(), "stays": time.Now()}}
	a.forgetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}})
	a.forgetNode(cache.DeletedFinalStateUnknown{Key: "late", Obj: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late"}}}) // a delete the watch missed
	a.forgetNode("not a node")
	for _, n := range []string{"gone", "late"} {
		if _, ok := a.viewWrites[n]; ok {
			t.Errorf("the view write of deleted node %s is still remembered", n)
		}
		if _, ok := a.claims[n]; ok {
			t.Errorf("the claim time of deleted node %s is still remembered", n)
		}
	}
	if _, ok := a.viewWrites["stays"]; !ok {
		t.Error("the view write of a node not deleted was dropped")
	}
	if _, ok := a.claims["stays"]; !ok {
		t.Error("the claim time of a node not deleted was dropped")
	}
}
