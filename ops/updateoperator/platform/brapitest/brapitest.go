// Package brapitest emulates Bottlerocket's host API on a unix socket, for
// tests: the update states Idle, Available, Staged and Ready, the update
// lock (423 answers), a reboot that boots the activated version, and a
// garbage mode that answers what no client can read.
package brapitest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Server is one emulated host.
type Server struct {
	mu        sync.Mutex
	version   string // running
	offered   string // what refresh finds ("" = none)
	state     string
	lastCmd   string
	locked    int // the next this many action calls answer 423
	garbage   bool
	reboots   int
	onReboot  func()
	srv       *http.Server
	Locked423 int // 423s answered so far
}

// New serves the API on socket, running version, with offered found by
// the next refresh. onReboot, when set, is called (in its own goroutine)
// when a reboot is asked for; the emulated host boots the activated version
// at once.
func New(socket, version, offered string, onReboot func()) (*Server, error) {
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	s := &Server{version: version, offered: offered, state: "Idle", onReboot: onReboot}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /os", s.os)
	mux.HandleFunc("GET /updates/status", s.status)
	mux.HandleFunc("POST /actions/refresh-updates", s.action("refresh", s.refresh))
	mux.HandleFunc("POST /actions/prepare-update", s.action("prepare", s.prepare))
	mux.HandleFunc("POST /actions/activate-update", s.action("activate", s.activate))
	mux.HandleFunc("POST /actions/deactivate-update", s.action("deactivate", s.deactivate))
	mux.HandleFunc("POST /actions/reboot", s.action("reboot", s.reboot))
	s.srv = &http.Server{Handler: mux}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// Lock makes the next n action calls answer 423.
func (s *Server) Lock(n int) { s.mu.Lock(); s.locked = n; s.mu.Unlock() }

// Garbage makes every answer unreadable (or readable again).
func (s *Server) Garbage(on bool) { s.mu.Lock(); s.garbage = on; s.mu.Unlock() }

// Version is the version running; Reboots how many reboots were asked for.
func (s *Server) Version() string { s.mu.Lock(); defer s.mu.Unlock(); return s.version }
func (s *Server) Reboots() int    { s.mu.Lock(); defer s.mu.Unlock(); return s.reboots }

// Offer sets what the next refresh finds.
func (s *Server) Offer(v string) { s.mu.Lock(); s.offered = v; s.mu.Unlock() }

func (s *Server) os(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(w, map[string]any{"version_id": s.version, "pretty_name": "Bottlerocket OS " + s.version})
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := map[string]any{"update_state": s.state, "most_recent_command": map[string]string{"cmd_type": s.lastCmd, "cmd_status": "Success"}}
	if s.state != "Idle" {
		st["chosen_update"] = map[string]string{"version": s.offered, "arch": "x86_64", "variant": "aws-k8s"}
	}
	s.write(w, st)
}

func (s *Server) write(w http.ResponseWriter, v any) {
	if s.garbage {
		_, _ = w.Write([]byte("<html>not the host API</html>"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// action wraps a state change with the lock and the garbage mode.
func (s *Server) action(cmd string, do func() (int, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.locked > 0 {
			s.locked--
			s.Locked423++
			http.Error(w, "Update lock held", http.StatusLocked)
			return
		}
		if s.garbage {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		code, msg := do()
		if code == http.StatusNoContent {
			s.lastCmd = cmd
		}
		if msg != "" {
			http.Error(w, msg, code)
			return
		}
		w.WriteHeader(code)
	}
}

func (s *Server) refresh() (int, string) {
	if s.state == "Idle" && s.offered != "" && s.offered != s.version {
		s.state = "Available"
	}
	return http.StatusNoContent, ""
}

func (s *Server) prepare() (int, string) {
	if s.state != "Available" {
		return http.StatusConflict, "no update available to prepare (state " + s.state + ")"
	}
	s.state = "Staged"
	return http.StatusNoContent, ""
}

func (s *Server) activate() (int, string) {
	if s.state != "Staged" {
		return http.StatusConflict, "no staged update to activate (state " + s.state + ")"
	}
	s.state = "Ready"
	return http.StatusNoContent, ""
}

func (s *Server) deactivate() (int, string) {
	if s.state != "Ready" {
		return http.StatusConflict, "no activated update to deactivate (state " + s.state + ")"
	}
	s.state = "Staged"
	return http.StatusNoContent, ""
}

// State is the update_state.
func (s *Server) State() string { s.mu.Lock(); defer s.mu.Unlock(); return s.state }

func (s *Server) reboot() (int, string) {
	s.reboots++
	if s.state == "Ready" {
		s.version, s.state = s.offered, "Idle"
	}
	if s.onReboot != nil {
		go s.onReboot()
	}
	return http.StatusNoContent, ""
}
