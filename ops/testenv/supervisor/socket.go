package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Request is one line of JSON sent to the supervisor's socket.
type Request struct {
	Op    string `json:"op"` // "reboot"
	Node  string `json:"node"`
	Delay string `json:"delay,omitempty"` // Go duration; default 2s
	// Wait asks for the answer only once the node is back (Ready, its new
	// boot ID written, its command started again), or the reboot failed.
	// The requester must then not be the node's own command, which the
	// reboot stops: a Job's pod on a kwok node, say, which survives it.
	Wait bool `json:"wait,omitempty"`
}

// waitLimit bounds how long a waited-for reboot holds its connection.
const waitLimit = 10 * time.Minute

// Response is the supervisor's one-line JSON answer.
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Serve answers requests on a unix socket at path until ctx ends. A reboot
// request is accepted at once and carried out in the background, since the
// requester is usually the node's own command, which the reboot stops;
// one with Wait is answered when the reboot is over.
func (s *Supervisor) Serve(ctx context.Context, path string) error {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", path, err)
		}
		go s.handle(ctx, c)
	}
}

func (s *Supervisor) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var req Request
	resp := Response{OK: true}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	var done <-chan error
	if err == nil {
		done, err = s.accept(ctx, req)
	}
	if err == nil && req.Wait {
		_ = c.SetDeadline(time.Now().Add(waitLimit + 10*time.Second))
		err = <-done
	}
	if err != nil {
		resp = Response{Error: err.Error()}
	}
	_ = json.NewEncoder(c).Encode(resp)
}

// accept checks a request and starts it; done receives the reboot's end.
func (s *Supervisor) accept(ctx context.Context, req Request) (done <-chan error, err error) {
	if req.Op != "reboot" {
		return nil, fmt.Errorf("unknown op %q (want reboot)", req.Op)
	}
	delay := 2 * time.Second
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil {
			return nil, fmt.Errorf("delay: %w", err)
		}
		delay = d
	}
	s.mu.Lock()
	p, ok := s.nodes[req.Node]
	busy := ok && p.rebooting
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("node %q is not supervised", req.Node)
	}
	if busy {
		return nil, fmt.Errorf("node %s is already rebooting", req.Node)
	}
	ended := make(chan error, 1)
	go func() {
		err := s.Reboot(ctx, req.Node, delay)
		if err != nil {
			s.opts.Log.Error("reboot failed", "node", req.Node, "err", err)
			err = fmt.Errorf("reboot of %s: %w", req.Node, err)
		}
		ended <- err
	}()
	return ended, nil
}

// Send sends a request to the supervisor listening on socket path.
func Send(ctx context.Context, path string, req Request) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("reach the supervisor at %s (is the simulated cluster up?): %w", path, err)
	}
	defer c.Close()
	limit := 15 * time.Second
	if req.Wait {
		limit += waitLimit
	}
	_ = c.SetDeadline(time.Now().Add(limit))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return fmt.Errorf("read the supervisor's answer: %w", err)
	}
	if !resp.OK {
		return errors.New(resp.Error)
	}
	return nil
}
