package scale

import "testing"

func TestRequestsSince(t *testing.T) {
	before, err := parseRequests([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="nodes",verb="PATCH"} 10
apiserver_request_total{code="200",resource="leases",verb="PUT"} 5
apiserver_request_total{code="200",resource="nodes",verb="WATCH"} 2
apiserver_request_total{code="200",resource="leases",verb="GET"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRequests([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="nodes",verb="PATCH"} 14
apiserver_request_total{code="429",resource="nodes",verb="PATCH"} 1
apiserver_request_total{code="200",resource="leases",verb="PUT"} 25
apiserver_request_total{code="201",resource="jobs",verb="POST"} 3
apiserver_request_total{code="200",resource="nodes",verb="WATCH"} 3
apiserver_request_total{code="200",resource="leases",verb="GET"} 4
apiserver_request_total{code="200",resource="nodes",verb="LIST"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	w, r, wNL, rNL := after.since(before)
	if w != 28 || wNL != 8 || r != 5 || rNL != 2 {
		t.Errorf("writes %v (no Leases %v), reads %v (no Leases %v); want 28 (8), 5 (2)", w, wNL, r, rNL)
	}
}
