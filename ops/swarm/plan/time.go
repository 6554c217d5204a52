package plan

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func timePtr(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
