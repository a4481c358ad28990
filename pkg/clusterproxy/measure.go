package clusterproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// measuringWriter records the status code of a response and, for passed
// through requests, counts the bytes sent to the client, including those of
// an upgraded (hijacked) connection in both directions. It keeps the inner
// writer's Flusher, CloseNotifier and Hijacker (watches and upgrades need
// them).
type measuringWriter struct {
	http.ResponseWriter
	status     atomic.Int32
	countBytes bool
	// auditID, if set, is the only Audit-Id the response carries:
	// kube-apiserver answers a passed-through request with its own (the
	// same one: it is sent ours), which the proxy would add to ours.
	auditID string
}

func newMeasuringWriter(w http.ResponseWriter) *measuringWriter {
	return &measuringWriter{ResponseWriter: w}
}

// writer is what handlers write to.
func (m *measuringWriter) writer() http.ResponseWriter {
	return responsewriter.WrapForHTTP1Or2(m)
}

func (m *measuringWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

func (m *measuringWriter) WriteHeader(code int) {
	if m.status.CompareAndSwap(0, int32(code)) {
		m.oneAuditID()
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *measuringWriter) Write(b []byte) (int, error) {
	if m.status.CompareAndSwap(0, http.StatusOK) {
		m.oneAuditID()
	}
	n, err := m.ResponseWriter.Write(b)
	if m.countBytes {
		metrics.ClusterProxyBytes.WithLabelValues("upstream_to_client").Add(float64(n))
	}
	return n, err
}

// Hijack hands out the connection of an upgraded request (exec, attach,
// port-forward, WebSocket watches of passed-through resources), counting
// what flows through it.
func (m *measuringWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := m.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("response writer %T cannot be hijacked", m.ResponseWriter)
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	m.status.CompareAndSwap(0, http.StatusSwitchingProtocols)
	if m.countBytes {
		conn = countingConn{Conn: conn}
	}
	return conn, rw, nil
}

func (m *measuringWriter) oneAuditID() {
	if m.auditID != "" {
		m.Header().Set(auditinternal.HeaderAuditID, m.auditID)
	}
}

func (m *measuringWriter) code() string {
	c := m.status.Load()
	if c == 0 {
		c = http.StatusOK
	}
	return strconv.Itoa(int(c))
}

// countingConn counts an upgraded connection's bytes: reads come from the
// client, writes go to it.
type countingConn struct {
	net.Conn
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	metrics.ClusterProxyBytes.WithLabelValues("client_to_upstream").Add(float64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	metrics.ClusterProxyBytes.WithLabelValues("upstream_to_client").Add(float64(n))
	return n, err
}

// countingBody counts a passed-through request body.
type countingBody struct {
	body interface {
		Read([]byte) (int, error)
		Close() error
	}
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	metrics.ClusterProxyBytes.WithLabelValues("client_to_upstream").Add(float64(n))
	return n, err
}

func (b countingBody) Close() error { return b.body.Close() }
