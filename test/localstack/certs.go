package localstack

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Names of the certificate files in <dir>/certs. Each <name>.crt has a
// matching <name>.key (PEM, ECDSA P-256).
const (
	// CertClusterCA signs kube-apiserver's and index-apiserver's serving
	// certificates and every client certificate; kube-apiserver trusts it as
	// --client-ca-file, so index-apiserver trusts it too (delegated authn).
	CertClusterCA = "ca"
	// CertFrontProxyCA signs the aggregator's front-proxy-client certificate.
	CertFrontProxyCA     = "front-proxy-ca"
	CertFrontProxyClient = "front-proxy-client"
	CertKubeAPIServer    = "kube-apiserver"
	// CertAdmin is the cluster admin (CN admin, O system:masters).
	CertAdmin = "admin"
	// CertIndexAPIServerClient is index-apiserver's identity towards
	// kube-apiserver: its ServiceAccount, so artifacts/rbac.yaml applies.
	CertIndexAPIServerClient = "index-apiserver-client"
	// CertIndexAPIServer is index-apiserver's serving certificate
	// (index-apiserver.index-apiserver.svc, localhost, 127.0.0.1), signed by
	// the cluster CA, whose PEM is the APIService caBundle.
	CertIndexAPIServer = "index-apiserver"
	// KeyServiceAccount is the service-account signing key (sa.key, sa.pub).
	KeyServiceAccount = "sa"
)

// IndexAPIServerUser and IndexAPIServerGroups are the identity index-apiserver
// uses towards kube-apiserver (the one of its ServiceAccount in a cluster).
const IndexAPIServerUser = "system:serviceaccount:" + Namespace + ":" + ServiceName

var IndexAPIServerGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace}

// ServiceDNSName is the name the aggregator checks index-apiserver's serving
// certificate against.
const ServiceDNSName = ServiceName + "." + Namespace + ".svc"

// CA is a certificate authority that can sign more certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// Certs is the PKI of one stack, kept in <dir>/certs.
type Certs struct {
	Dir          string
	ClusterCA    *CA
	FrontProxyCA *CA
}

// Path returns the path of <name>.crt (ext "crt") or <name>.key (ext "key").
func (c *Certs) Path(name, ext string) string {
	return filepath.Join(c.Dir, name+"."+ext)
}

// ensureCerts loads the PKI from dir, or creates it when it is not complete.
func ensureCerts(dir string) (*Certs, error) {
	c := &Certs{Dir: dir}
	done := filepath.Join(dir, "done")
	complete := true
	for _, f := range []string{done, c.Path(KeyServiceAccount, "key"), c.Path(KeyServiceAccount, "pub")} {
		if _, err := os.Stat(f); err != nil {
			complete = false
		}
	}
	for _, name := range []string{CertKubeAPIServer, CertAdmin, CertIndexAPIServerClient, CertFrontProxyClient, CertIndexAPIServer} {
		if _, err := tls.LoadX509KeyPair(c.Path(name, "crt"), c.Path(name, "key")); err != nil {
			complete = false
		}
	}
	if complete {
		var err1, err2 error
		c.ClusterCA, err1 = loadCA(c.Path(CertClusterCA, "crt"), c.Path(CertClusterCA, "key"))
		c.FrontProxyCA, err2 = loadCA(c.Path(CertFrontProxyCA, "crt"), c.Path(CertFrontProxyCA, "key"))
		if err := errors.Join(err1, err2); err == nil {
			return c, nil
		}
		// Fall through and create a new PKI.
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if c.ClusterCA, err = newCA("local-cluster-ca"); err != nil {
		return nil, err
	}
	if c.FrontProxyCA, err = newCA("local-front-proxy-ca"); err != nil {
		return nil, err
	}
	if err := writePair(c.Path(CertClusterCA, "crt"), c.Path(CertClusterCA, "key"), c.ClusterCA.CertPEM, c.ClusterCA.Key); err != nil {
		return nil, err
	}
	if err := writePair(c.Path(CertFrontProxyCA, "crt"), c.Path(CertFrontProxyCA, "key"), c.FrontProxyCA.CertPEM, c.FrontProxyCA.Key); err != nil {
		return nil, err
	}
	type leaf struct {
		name   string
		ca     *CA
		cn     string
		orgs   []string
		server bool
		dns    []string
	}
	for _, l := range []leaf{
		{name: CertKubeAPIServer, ca: c.ClusterCA, cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}},
		{name: CertAdmin, ca: c.ClusterCA, cn: "admin", orgs: []string{"system:masters"}},
		{name: CertIndexAPIServerClient, ca: c.ClusterCA, cn: IndexAPIServerUser, orgs: IndexAPIServerGroups},
		{name: CertFrontProxyClient, ca: c.FrontProxyCA, cn: "front-proxy-client"},
		{name: CertIndexAPIServer, ca: c.ClusterCA, cn: ServiceDNSName, server: true,
			dns: []string{ServiceDNSName, ServiceName + "." + Namespace, "localhost"}},
	} {
		certPEM, key, err := l.ca.sign(l.cn, l.orgs, l.server, l.dns, 10*365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := writePair(c.Path(l.name, "crt"), c.Path(l.name, "key"), certPEM, key); err != nil {
			return nil, err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writeKey(c.Path(KeyServiceAccount, "key"), saKey); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.Path(KeyServiceAccount, "pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644); err != nil {
		return nil, err
	}
	return c, os.WriteFile(done, nil, 0o644)
}

func newCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func loadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}, nil
}

// sign issues a certificate for cn (organizations orgs). A server certificate
// gets the DNS names dns and the IP 127.0.0.1 as SANs; a client certificate
// gets client-auth usage only.
func (ca *CA) sign(cn string, orgs []string, server bool, dns []string, validity time.Duration) ([]byte, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = dns
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key, nil
}

// ClientCert issues a client certificate for user in groups, valid for a day,
// and returns the certificate and key as PEM.
func (ca *CA) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	certPEM, key, err := ca.sign(user, groups, false, nil, 24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = marshalKey(key)
	return certPEM, keyPEM, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}

func marshalKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writeKey(path string, key crypto.Signer) error {
	b, err := marshalKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func writePair(certFile, keyFile string, certPEM []byte, key crypto.Signer) error {
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return err
	}
	return writeKey(keyFile, key)
}
