// Package brapitest emulates Bottlerocket's host API on a unix socket, for
// tests, answering as the real API does: the update states Idle,
// Available, Staged and Ready with the status document's fields
// (available_updates, chosen_update, active_partition, staging_partition,
// most_recent_command with exit_status and stderr); the update lock (423);
// /updates/status answering 404 after a boot until the first
// refresh-updates; commands that fail with their stderr; a staging
// partition that holds another version than the chosen one; a boot that
// falls back to the active partition; a reboot that resets the connection
// as the host goes down; and a garbage mode that answers what no client
// can read.
//
// Commands run as on the host: the POST is accepted at once and the
// command runs after it (a moment to start, then its run time, Timing),
// holding the update lock: meanwhile every other action and every
// GET /updates/status answers 423, and a status read before the command
// took the lock still shows the command before it.
package brapitest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is one emulated host.
type Server struct {
	mu        sync.Mutex
	version   string // running (the active partition)
	offered   string // what refresh finds ("" = none)
	chosen    string // the chosen update, once a refresh found it
	staged    string // the staging partition's image ("" = none)
	state     string
	refreshed bool // a refresh ran since the boot (else GET /updates/status is 404)
	last      command
	fails     map[string]string // cmd type -> stderr of its next run
	fallBacks int               // the next this many boots fall back
	resetConn bool              // the reboot resets the connection
	locked    int               // the next this many action calls answer 423
	garbage   bool
	reboots   int
	onReboot  func()
	srv       *http.Server
	Locked423 int // planted 423s (Lock) answered so far
	// A command accepted runs after spawn, holding the lock for run;
	// pending says one is accepted and not done, running that it holds
	// the lock.
	spawn, run       time.Duration
	pending, running bool
	busy423          int // 423s answered because a command ran
}

type command struct {
	Type, Status, Stderr string
	Exit                 int
	At                   time.Time
}

// New serves the API on socket, running version, with offered found by
// the next refresh. onReboot, when set, is called (in its own goroutine)
// when a reboot is asked for; the emulated host boots the activated version
// at once. It starts as a host that has run a refresh since its boot.
func New(socket, version, offered string, onReboot func()) (*Server, error) {
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	s := &Server{version: version, offered: offered, state: "Idle", refreshed: true, onReboot: onReboot, fails: map[string]string{},
		last: command{Type: "refresh", Status: "Success", At: time.Now()}, spawn: 10 * time.Millisecond, run: 40 * time.Millisecond}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /os", s.os)
	mux.HandleFunc("GET /updates/status", s.status)
	mux.HandleFunc("POST /actions/refresh-updates", s.action("refresh", s.refresh))
	mux.HandleFunc("POST /actions/prepare-update", s.action("prepare", s.prepare))
	mux.HandleFunc("POST /actions/activate-update", s.action("activate", s.activate))
	mux.HandleFunc("POST /actions/deactivate-update", s.action("deactivate", s.deactivate))
	mux.HandleFunc("POST /actions/reboot", s.rebootHandler)
	s.srv = &http.Server{Handler: mux}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// Timing sets how long an accepted command takes to start (status reads
// meanwhile show the command before it) and then to run (holding the
// update lock: 423 to actions and status reads). Both 0: it is done
// before its POST is answered, as the emulator once was.
func (s *Server) Timing(spawn, run time.Duration) {
	s.mu.Lock()
	s.spawn, s.run = spawn, run
	s.mu.Unlock()
}

// Busy423 is how many 423s were answered because a command held the lock.
func (s *Server) Busy423() int { s.mu.Lock(); defer s.mu.Unlock(); return s.busy423 }

// Idle reports whether no command is accepted and not yet done.
func (s *Server) Idle() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.pending }

// Lock makes the next n action calls answer 423.
func (s *Server) Lock(n int) { s.mu.Lock(); s.locked = n; s.mu.Unlock() }

// Garbage makes every answer unreadable (or readable again).
func (s *Server) Garbage(on bool) { s.mu.Lock(); s.garbage = on; s.mu.Unlock() }

// FailNext makes the next run of command cmd (refresh, prepare, activate,
// deactivate) fail with stderr, as the host's update command would: the
// POST is accepted, the status then says Failed.
func (s *Server) FailNext(cmd, stderr string) { s.mu.Lock(); s.fails[cmd] = stderr; s.mu.Unlock() }

// FallBack makes the next n boots fall back to the active partition: the
// host comes back running the version it ran.
func (s *Server) FallBack(n int) { s.mu.Lock(); s.fallBacks = n; s.mu.Unlock() }

// ResetOnReboot makes the reboot call answer nothing: the connection is
// closed as the host goes down.
func (s *Server) ResetOnReboot(on bool) { s.mu.Lock(); s.resetConn = on; s.mu.Unlock() }

// StageOther puts version v on the staging partition (Staged), as an
// earlier prepare of another update left it.
func (s *Server) StageOther(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.staged, s.state, s.chosen = v, "Staged", s.offered
}

// Boot makes the host as just booted: GET /updates/status answers 404
// until a refresh-updates.
func (s *Server) Boot() { s.mu.Lock(); s.refreshed = false; s.mu.Unlock() }

// Version is the version running; Reboots how many reboots were asked for.
func (s *Server) Version() string { s.mu.Lock(); defer s.mu.Unlock(); return s.version }
func (s *Server) Reboots() int    { s.mu.Lock(); defer s.mu.Unlock(); return s.reboots }

// Staged is the staging partition's image version.
func (s *Server) Staged() string { s.mu.Lock(); defer s.mu.Unlock(); return s.staged }

// Offer sets what the next refresh finds.
func (s *Server) Offer(v string) { s.mu.Lock(); s.offered = v; s.mu.Unlock() }

// State is the update_state.
func (s *Server) State() string { s.mu.Lock(); defer s.mu.Unlock(); return s.state }

func (s *Server) os(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(w, map[string]any{"version_id": s.version, "pretty_name": "Bottlerocket OS " + s.version, "variant_id": "aws-k8s-1.31", "arch": "x86_64"})
}

func image(v string) map[string]string {
	return map[string]string{"version": v, "arch": "x86_64", "variant": "aws-k8s-1.31"}
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running { // the status is read under the update lock a command holds
		s.busy423++
		http.Error(w, "Unable to obtain update lock: update lock held by a running command", http.StatusLocked)
		return
	}
	if !s.refreshed { // the status lives in /run: a new boot has none until a command
		http.Error(w, "Update status is uninitialized, refresh updates to initialize the status", http.StatusNotFound)
		return
	}
	avail := []string{}
	if s.offered != "" {
		avail = append(avail, s.offered)
	}
	st := map[string]any{"update_state": s.state, "available_updates": avail, "chosen_update": nil,
		"active_partition":  map[string]any{"image": image(s.version), "next_to_boot": s.state != "Ready"},
		"staging_partition": nil,
		"most_recent_command": map[string]any{"cmd_type": s.last.Type, "cmd_status": s.last.Status, "exit_status": s.last.Exit,
			"stderr": s.last.Stderr, "timestamp": s.last.At.UTC().Format(time.RFC3339Nano)}}
	if s.state != "Idle" && s.chosen != "" {
		st["chosen_update"] = image(s.chosen)
	}
	if s.staged != "" {
		st["staging_partition"] = map[string]any{"image": image(s.staged), "next_to_boot": s.state == "Ready"}
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

// action wraps a command with the lock, the garbage mode and the planted
// failures: a command not allowed in the state is refused (409) and not
// recorded; an allowed one is accepted (204), runs after the answer
// (Timing) and is recorded as it ended.
func (s *Server) action(cmd string, do func() (int, string, func())) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.locked > 0 {
			s.locked--
			s.Locked423++
			http.Error(w, "Update lock held", http.StatusLocked)
			return
		}
		if s.pending {
			s.busy423++
			http.Error(w, "Update lock held by a running command", http.StatusLocked)
			return
		}
		if s.garbage {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		var apply func()
		status, stderr, exit := "Success", "", 0
		if e, ok := s.fails[cmd]; ok {
			delete(s.fails, cmd)
			status, stderr, exit = "Failed", e, 1
		} else {
			code, msg, effect := do()
			if code != http.StatusNoContent {
				http.Error(w, msg, code)
				return
			}
			apply = effect
		}
		end := func() {
			if apply != nil {
				apply()
			}
			s.refreshed = true
			s.last = command{Type: cmd, Status: status, Exit: exit, Stderr: stderr, At: time.Now()}
		}
		if s.spawn <= 0 && s.run <= 0 {
			end()
		} else {
			s.pending = true
			spawn, run := s.spawn, s.run
			go func() {
				time.Sleep(spawn)
				s.mu.Lock()
				s.running = true
				s.mu.Unlock()
				time.Sleep(run)
				s.mu.Lock()
				end()
				s.pending, s.running = false, false
				s.mu.Unlock()
			}()
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// refresh, prepare, activate and deactivate check that the command is
// allowed now and return its effect, applied when it ends.
func (s *Server) refresh() (int, string, func()) {
	return http.StatusNoContent, "", func() {
		if s.offered != "" && s.offered != s.version {
			s.chosen = s.offered
			if s.state == "Idle" {
				s.state = "Available"
			}
		}
	}
}

func (s *Server) prepare() (int, string, func()) {
	if s.state != "Available" && s.state != "Staged" {
		return http.StatusConflict, "no update available to prepare (state " + s.state + ")", nil
	}
	return http.StatusNoContent, "", func() { s.staged, s.state = s.chosen, "Staged" }
}

func (s *Server) activate() (int, string, func()) {
	if s.state != "Staged" {
		return http.StatusConflict, "no staged update to activate (state " + s.state + ")", nil
	}
	return http.StatusNoContent, "", func() { s.state = "Ready" }
}

func (s *Server) deactivate() (int, string, func()) {
	if s.state != "Ready" {
		return http.StatusConflict, "no activated update to deactivate (state " + s.state + ")", nil
	}
	return http.StatusNoContent, "", func() { s.state = "Staged" }
}

// rebootHandler reboots the host: it boots the activated partition (or
// falls back), and the new boot's status is uninitialized.
func (s *Server) rebootHandler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.locked > 0 || s.pending {
		if s.pending {
			s.busy423++
		} else {
			s.locked--
			s.Locked423++
		}
		s.mu.Unlock()
		http.Error(w, "Update lock held", http.StatusLocked)
		return
	}
	s.reboots++
	switch {
	case s.state == "Ready" && s.fallBacks > 0:
		s.fallBacks-- // the new partition did not come up: the old one boots again
	case s.state == "Ready":
		s.version, s.staged = s.staged, s.version
	}
	s.state, s.chosen, s.refreshed = "Idle", "", false
	reset := s.resetConn
	s.mu.Unlock()
	if s.onReboot != nil {
		go s.onReboot()
	}
	if reset {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close() // the host went down before it answered
				return
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
