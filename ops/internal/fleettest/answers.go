package fleettest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatusAnswer is the answer a stalled or busy API server gives req, in
// place of the real one: code with its Status (504 and reason Timeout as
// a handler timeout answers, 429 and TooManyRequests as a busy server
// does, no Retry-After: client-go does not ask again by itself).
func StatusAnswer(req *http.Request, code int, reason metav1.StatusReason, message string) *http.Response {
	body, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: message, Reason: reason, Code: int32(code)})
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(string(body))), Request: req}
}

// TimeoutAnswer is StatusAnswer as a handler timeout gives it (504).
func TimeoutAnswer(req *http.Request) *http.Response {
	return StatusAnswer(req, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "Timeout: request did not complete within the allotted timeout")
}

// BusyAnswer is StatusAnswer as a busy API server gives it (429).
func BusyAnswer(req *http.Request) *http.Response {
	return StatusAnswer(req, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "too many requests, please try again later")
}
