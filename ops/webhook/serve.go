package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// SelfSigned makes a CA and a serving certificate it signs for hosts (DNS
// names or IP addresses), valid for ten years: the webhook's, made at
// each start and never written to disk; the CA goes into the webhook
// configuration (PatchCABundle). It returns the CA in PEM and the pair.
func SelfSigned(hosts []string) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, fmt.Errorf("generate the webhook's CA key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "slipway admission webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, fmt.Errorf("sign the webhook's CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, fmt.Errorf("generate the webhook's key: %w", err)
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "slipway admission webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, fmt.Errorf("sign the webhook's certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, cert, err
	}
	cert, err = tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, cert, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), cert, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// PatchCABundle writes caPEM as the CA bundle of every webhook of the
// ValidatingWebhookConfiguration name (a JSON patch, so that only the
// bundles change; the manifest grants update on that one object only).
func PatchCABundle(ctx context.Context, cfg *rest.Config, name string, caPEM []byte) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("build the HTTP client: %w", err)
	}
	url := cfg.Host + "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/" + name
	var current struct {
		Webhooks []json.RawMessage `json:"webhooks"`
	}
	if err := do(ctx, client, http.MethodGet, url, "", nil, &current); err != nil {
		return fmt.Errorf("read the webhook configuration %s: %w", name, err)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := make([]op, len(current.Webhooks))
	for i := range current.Webhooks {
		ops[i] = op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: caPEM}
	}
	if len(ops) == 0 {
		return fmt.Errorf("the webhook configuration %s has no webhooks", name)
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := do(ctx, client, http.MethodPatch, url, "application/json-patch+json", body, nil); err != nil {
		return fmt.Errorf("write the CA bundle into the webhook configuration %s: %w", name, err)
	}
	return nil
}

func do(ctx context.Context, client *http.Client, method, url, contentType string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// Serve serves h over TLS with cert on l until ctx ends, then stops:
// gracefully within five seconds, else by closing the connections.
func Serve(ctx context.Context, l net.Listener, cert tls.Certificate, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("serve the admission webhook: %w", err)
	case <-ctx.Done():
		// The API server keeps its HTTP/2 connections open: a graceful
		// shutdown waits for the answers in flight, then the rest is closed.
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if srv.Shutdown(shut) != nil {
			err = srv.Close()
		}
		if e := <-done; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
		return err
	}
}
