package faults

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy between one process and the API server that injects
// faults into the bytes it forwards. TLS passes through it untouched: the
// process's kubeconfig names the proxy's address, which is on the same
// loopback IP as the API server's certificate.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu        sync.Mutex
	cond      *sync.Cond
	latency   time.Duration
	halfOpen  bool
	partition bool
	conns     map[net.Conn]struct{}
	closed    bool
	accepted  int
}

// NewProxy listens on listen (e.g. "127.0.0.1:0") and forwards each
// connection to upstream.
func NewProxy(listen, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: listen: %w", upstream, err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// SetLatency delays every chunk forwarded, either way, by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetHalfOpen holds (on) or releases every byte forwarded, either way; the
// connections stay open, new ones are accepted and hang too.
func (p *Proxy) SetHalfOpen(on bool) {
	p.mu.Lock()
	p.halfOpen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetPartition cuts every connection and refuses new ones (on), or lets
// them through again.
func (p *Proxy) SetPartition(on bool) {
	p.mu.Lock()
	p.partition = on
	p.mu.Unlock()
	if on {
		p.Drop()
	}
}

// Drop closes every connection open now.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.cond.Broadcast()
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Drop()
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		p.accepted++
		refuse := p.partition || p.closed
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		go p.handle(c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.partition {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
	p.cond.Broadcast()
}

func (p *Proxy) handle(down net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = down.Close()
		return
	}
	if !p.track(down, up) {
		_ = down.Close()
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, down); done <- struct{}{} }()
	go func() { p.pipe(down, up); done <- struct{}{} }()
	<-done
	p.untrack(down, up) // one side ended: end both
	<-done
}

// pipe copies from src to dst, each chunk after the latency and only while
// the proxy is not half-open.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold(dst) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// hold waits out the latency and any half-open spell; false when the
// connection was dropped meanwhile.
func (p *Proxy) hold(c net.Conn) bool {
	p.mu.Lock()
	d := p.latency
	p.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.halfOpen {
		if _, ok := p.conns[c]; !ok {
			return false
		}
		p.cond.Wait()
	}
	_, ok := p.conns[c]
	return ok
}
