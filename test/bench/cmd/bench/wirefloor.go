package main

// The wire floor: what a full LIST costs a server that encodes nothing and
// runs no handler chain, only writes bytes it already holds through TLS and
// HTTP/2 as k8s.io/apiserver configures them (and gzip at its level 1 for
// clients that accept it). It is the bench itself, re-executed in a process
// of its own so that its CPU is measured apart: the full-LIST phase gives it
// index-apiserver's own answer and asks for it as the other servers are
// asked. Encoding once can bring a LIST down to this floor, not below it.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/features"

	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// wireFloorEnv set in the environment makes the bench serve the wire floor
// instead of running (see startWireFloor).
const wireFloorEnv = "INDEX_BENCH_WIRE_FLOOR"

// wireFloorHello is the line the floor process prints when it listens.
type wireFloorHello struct {
	URL   string `json:"url"`
	CAPEM []byte `json:"caPEM"`
}

// wireFloor is a running floor process.
type wireFloor struct {
	url    string
	pid    int
	client *http.Client
	cmd    *exec.Cmd
	stdin  io.Closer
}

// wireFloorHandler keeps one body per path (PUT) and writes it back (GET) in
// writes the size of index-apiserver's LIST writes (encoded.ListChunk),
// gzip-compressed above k8s.io/apiserver's threshold for clients that accept
// it (negotiated and compressed by k8s.io/apiserver's own functions), as its
// response writer does.
type wireFloorHandler struct {
	mu     sync.Mutex
	bodies map[string]wireFloorBody
}

type wireFloorBody struct {
	contentType string
	b           []byte
}

func (h *wireFloorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPut:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.bodies[r.URL.Path] = wireFloorBody{r.Header.Get("Content-Type"), b}
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		h.mu.Lock()
		body, ok := h.bodies[r.URL.Path]
		h.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", body.contentType)
		out := io.Writer(w)
		if responsewriters.ContentEncodingSupported(r, features.APIResponseCompression) == "gzip" && len(body.b) > gzipThreshold {
			w.Header().Set("Content-Encoding", "gzip")
			gw := gzipWriters.Get().(*gzip.Writer) // k8s.io/apiserver's level
			gw.Reset(w)
			defer func() {
				_ = gw.Close()
				gzipWriters.Put(gw)
			}()
			out = gw
		}
		for b := body.b; len(b) > 0; {
			// index-apiserver's LIST writes, so the floor pays the same
			// hand-offs to the connection.
			n := min(len(b), encoded.ListChunk)
			if _, err := out.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	default:
		http.Error(w, "PUT or GET", http.StatusMethodNotAllowed)
	}
}

// gzipWriters are k8s.io/apiserver's (its compression level).
var gzipWriters = responsewriters.NewGzipWriterPoolOrDie()

// serveWireFloor is the floor process: it listens on loopback, prints its
// wireFloorHello and serves until its stdin closes (the bench ended).
func serveWireFloor() error {
	cert, caPEM, err := selfSignedLoopback()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:   &wireFloorHandler{bodies: map[string]wireFloorBody{}},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	// k8s.io/apiserver's HTTP/2 settings (server/secure_serving.go).
	if err := http2.ConfigureServer(srv, &http2.Server{
		MaxUploadBufferPerStream:     256 << 10,
		MaxReadFrameSize:             256 << 10,
		MaxConcurrentStreams:         100,
		MaxUploadBufferPerConnection: 100 * (256 << 10),
	}); err != nil {
		return err
	}
	hello, _ := json.Marshal(wireFloorHello{URL: "https://" + ln.Addr().String(), CAPEM: caPEM})
	fmt.Println(string(hello))
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(ln, "", ""); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// selfSignedLoopback makes a P-256 serving certificate for 127.0.0.1, the
// key type of the stack's own serving certificates.
func selfSignedLoopback() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "wire-floor"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// startWireFloor starts the floor process (this bench, re-executed) and a
// client of it built like the servers' (httpClient).
func startWireFloor() (*wireFloor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), wireFloorEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &wireFloor{pid: cmd.Process.Pid, cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	var hello wireFloorHello
	if err == nil {
		err = json.Unmarshal(line, &hello)
	}
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("wire floor: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hello.CAPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	f.url, f.client = hello.URL, &http.Client{Transport: tr}
	return f, nil
}

// put gives the floor the body it is to serve at path.
func (f *wireFloor) put(ctx context.Context, path, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, f.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("wire floor PUT %s: %s", path, resp.Status)
	}
	return nil
}

// stop ends the floor process: closing its stdin tells it to.
func (f *wireFloor) stop() {
	_ = f.stdin.Close()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}
