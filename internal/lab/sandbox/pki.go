package sandbox

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the sandbox's throw-away public key infrastructure: one CA that
// signs the apiserver's serving certificate and every client certificate,
// a front-proxy CA for the aggregation layer's request-header
// authentication, and the service-account signing key pair.
//
// Everything is generated on each start, so nothing secret is ever committed
// or shared between sandboxes.
type pki struct {
	dir string

	CACert, CAKey                             string
	FrontProxyCACert                          string
	FrontProxyClientCert, FrontProxyClientKey string
	ServingCert, ServingKey                   string
	ServiceAccountKey                         string // private, signs tokens
	ServiceAccountPub                         string // public, verifies tokens
	clients                                   map[string]clientCert
}

type clientCert struct{ Cert, Key string }

// identity is one client of the apiserver: its certificate's CN is the user
// name and its O entries are the groups, as the apiserver's x509
// authenticator reads them.
type identity struct {
	file   string
	user   string
	groups []string
}

var sandboxIdentities = []identity{
	{file: "admin", user: "rebound-admin", groups: []string{"system:masters"}},
	{file: "controller-manager", user: "system:kube-controller-manager"},
	{file: "scheduler", user: "system:kube-scheduler"},
	// kwok impersonates every kubelet; the Node authorizer would confine a
	// real kubelet to its own node, so kwok gets cluster-admin instead.
	{file: "kwok", user: "kwok", groups: []string{"system:masters"}},
	// rebound's own identity has no rights until a test or a person binds
	// deploy/rbac's roles to the user "rebound": that is how the e2e tests
	// prove the manifests grant enough, and no more.
	{file: "rebound", user: ReboundUser},
}

// ReboundUser is the user name of the sandbox's rebound.kubeconfig.
const ReboundUser = "rebound"

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newPKI(dir string, now time.Time) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir, clients: map[string]clientCert{}}
	notAfter := now.Add(365 * 24 * time.Hour)

	ca, err := newCA("rebound-sandbox-ca", now, notAfter)
	if err != nil {
		return nil, err
	}
	if p.CACert, p.CAKey, err = p.write("ca", ca); err != nil {
		return nil, err
	}
	fpca, err := newCA("rebound-sandbox-front-proxy-ca", now, notAfter)
	if err != nil {
		return nil, err
	}
	if p.FrontProxyCACert, _, err = p.write("front-proxy-ca", fpca); err != nil {
		return nil, err
	}
	fpClient, err := newLeaf(fpca, x509.Certificate{
		Subject:     pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now, notAfter)
	if err != nil {
		return nil, err
	}
	if p.FrontProxyClientCert, p.FrontProxyClientKey, err = p.write("front-proxy-client", fpClient); err != nil {
		return nil, err
	}

	serving, err := newLeaf(ca, x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}, now, notAfter)
	if err != nil {
		return nil, err
	}
	if p.ServingCert, p.ServingKey, err = p.write("apiserver", serving); err != nil {
		return nil, err
	}

	for _, id := range sandboxIdentities {
		kp, err := newLeaf(ca, x509.Certificate{
			Subject:     pkix.Name{CommonName: id.user, Organization: id.groups},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, now, notAfter)
		if err != nil {
			return nil, err
		}
		c, k, err := p.write(id.file, kp)
		if err != nil {
			return nil, err
		}
		p.clients[id.file] = clientCert{Cert: c, Key: k}
	}

	// Service-account tokens are signed with RSA, the algorithm every
	// Kubernetes component accepts without extra flags.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	p.ServiceAccountKey = filepath.Join(dir, "sa.key")
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	der, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.ServiceAccountKey, "PRIVATE KEY", der); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.ServiceAccountPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) client(file string) clientCert { return p.clients[file] }

func (p *pki) write(name string, kp keyPair) (certPath, keyPath string, err error) {
	certPath = filepath.Join(p.dir, name+".crt")
	keyPath = filepath.Join(p.dir, name+".key")
	if err := writePEM(certPath, "CERTIFICATE", kp.cert.Raw); err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return "", "", err
	}
	if err := writePEM(keyPath, "PRIVATE KEY", der); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func newCA(cn string, notBefore, notAfter time.Time) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return keyPair{}, fmt.Errorf("create CA %q: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{cert: cert, key: key}, nil
}

func newLeaf(ca keyPair, tmpl x509.Certificate, notBefore, notAfter time.Time) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = notBefore.Add(-time.Hour)
	tmpl.NotAfter = notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{cert: cert, key: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
