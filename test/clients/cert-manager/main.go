// Command cert-manager-controller runs cert-manager's controllers, the
// packages of the module github.com/cert-manager/cert-manager at the version
// go.mod names, unmodified, in one process, for test/e2e's TestCertManager.
//
// cert-manager's own controller binary (cmd/controller in its repository) is
// a module of its own, github.com/cert-manager/cert-manager/controller-binary,
// that its repository builds with a replace of the main module; the Go module
// proxy serves no such module (neither under that path nor as
// .../cmd/controller). Its controllers, clients, informers, metrics and health
// server all live in the main module, which the proxy serves. This program is
// the thin part in between, written here: it wires those packages the way
// that binary's app.Run does (one controller ContextFactory, each enabled
// controller's constructor from controller.Known(), the shared informer
// factories started after the controllers are built, the metrics and healthz
// servers), with the flags it needs under cert-manager's names and defaults.
// What it leaves out: leader election (--leader-elect must be false), TLS for
// the metrics server, the profiler, the configuration file and the PEM size
// flags (cert-manager's defaults apply).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	dnsutil "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/server"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"

	// Every controller and issuer cert-manager's binary registers (its
	// start.go and its configuration's defaults import these).
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/listenerset"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/acme"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/vault"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/venafi"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/acme"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/vault"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/venafi"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/venafi"
)

// defaultEnabledControllers are the controllers `--controllers=*` enables,
// and clusterScopedControllers those --namespace disables: the lists of
// cert-manager's configuration defaults
// (internal/apis/config/controller/v1alpha1, not importable from here).
var (
	defaultEnabledControllers = []string{
		"issuers", "clusterissuers", "certificates-metrics", "ingress-shim", "orders", "challenges",
		"certificaterequests-issuer-acme", "certificaterequests-approver", "certificaterequests-issuer-ca",
		"certificaterequests-issuer-selfsigned", "certificaterequests-issuer-vault", "certificaterequests-issuer-venafi",
		"certificates-trigger", "certificates-issuing", "certificates-key-manager", "certificates-request-manager",
		"certificates-readiness", "certificates-revision-manager",
	}
	clusterScopedControllers = []string{
		"clusterissuers", "certificatesigningrequests-issuer-acme", "certificatesigningrequests-issuer-ca",
		"certificatesigningrequests-issuer-selfsigned", "certificatesigningrequests-issuer-venafi",
		"certificatesigningrequests-issuer-vault",
	}
)

type options struct {
	ctx                  controller.ContextOptions
	leaderElect          bool
	controllers          []string
	workers              int
	metricsAddress       string
	healthzAddress       string
	healthzLeaderTimeout time.Duration
	featureGates         map[string]bool
	logging              *logsapi.LoggingConfiguration
}

func main() {
	logf.InitLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		logf.Log.Error(err, "error executing command")
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.FlushLogs()
}

// parse reads the flags, with cert-manager's names and defaults.
func parse(args []string) (*options, error) {
	o := &options{
		ctx: controller.ContextOptions{
			KubernetesAPIQPS:   20,
			KubernetesAPIBurst: 50,
			IssuerOptions: controller.IssuerOptions{
				ClusterResourceNamespace:        "kube-system",
				ClusterIssuerAmbientCredentials: true,
			},
			IngressShimOptions: controller.IngressShimOptions{
				DefaultIssuerKind:                 "Issuer",
				DefaultIssuerGroup:                "cert-manager.io",
				DefaultAutoCertificateAnnotations: []string{"kubernetes.io/tls-acme"},
			},
			CertificateOptions: controller.CertificateOptions{
				CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
				CertificateRequestMinimumBackoffDuration: time.Hour,
			},
			SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: 60},
			ACMEOptions: controller.ACMEOptions{
				HTTP01SolverImage:                 "quay.io/jetstack/cert-manager-acmesolver:" + util.AppVersion,
				HTTP01SolverResourceRequestCPU:    resource.MustParse("10m"),
				HTTP01SolverResourceRequestMemory: resource.MustParse("64Mi"),
				HTTP01SolverResourceLimitsCPU:     resource.MustParse("100m"),
				HTTP01SolverResourceLimitsMemory:  resource.MustParse("64Mi"),
				ACMEHTTP01SolverRunAsNonRoot:      true,
				DNS01Nameservers:                  dnsutil.RecursiveNameservers,
				DNS01CheckRetryPeriod:             10 * time.Second,
				DNS01CheckAuthoritative:           true,
			},
		},
		leaderElect:          true,
		controllers:          []string{"*"},
		workers:              5,
		metricsAddress:       "0.0.0.0:9402",
		healthzAddress:       "0.0.0.0:9403",
		healthzLeaderTimeout: 20 * time.Second,
		featureGates:         map[string]bool{},
		logging:              logsapi.NewLoggingConfiguration(),
	}
	fs := pflag.NewFlagSet("cert-manager-controller", pflag.ContinueOnError)
	fs.StringVar(&o.ctx.APIServerHost, "master", "", "apiserver host address to connect to")
	fs.StringVar(&o.ctx.Kubeconfig, "kubeconfig", "", "path to a kubeconfig")
	fs.Float32Var(&o.ctx.KubernetesAPIQPS, "kube-api-qps", o.ctx.KubernetesAPIQPS, "maximum queries per second to the API server")
	fs.IntVar(&o.ctx.KubernetesAPIBurst, "kube-api-burst", o.ctx.KubernetesAPIBurst, "maximum burst of queries to the API server")
	fs.StringVar(&o.ctx.ClusterResourceNamespace, "cluster-resource-namespace", o.ctx.ClusterResourceNamespace, "namespace of the resources of cluster-scoped issuers")
	fs.StringVar(&o.ctx.Namespace, "namespace", "", "if set, the one namespace cert-manager watches (cluster-scoped controllers disabled)")
	fs.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "leader election: this build has none and requires false")
	fs.StringSliceVar(&o.controllers, "controllers", o.controllers, "controllers to enable: '*' (the default ones), 'foo', '-foo'")
	fs.BoolVar(&o.ctx.EnableOwnerRef, "enable-certificate-owner-ref", false, "set the Certificate as the owner of its Secret")
	fs.BoolVar(&o.ctx.IssuerAmbientCredentials, "issuer-ambient-credentials", false, "issuers may use ambient credentials")
	fs.BoolVar(&o.ctx.ClusterIssuerAmbientCredentials, "cluster-issuer-ambient-credentials", o.ctx.ClusterIssuerAmbientCredentials, "cluster issuers may use ambient credentials")
	fs.StringSliceVar(&o.ctx.CopiedAnnotationPrefixes, "copied-annotation-prefixes", o.ctx.CopiedAnnotationPrefixes, "annotations copied from a Certificate to its CertificateRequests")
	fs.DurationVar(&o.ctx.CertificateRequestMinimumBackoffDuration, "certificate-request-minimum-backoff-duration", o.ctx.CertificateRequestMinimumBackoffDuration, "initial backoff of a failed CertificateRequest")
	fs.IntVar(&o.workers, "concurrent-workers", o.workers, "workers of each controller")
	fs.StringVar(&o.metricsAddress, "metrics-listen-address", o.metricsAddress, "address of the metrics server")
	fs.StringVar(&o.healthzAddress, "internal-healthz-listen-address", o.healthzAddress, "address of the healthz server (/livez)")
	fs.Var(cliflag.NewMapStringBool(&o.featureGates), "feature-gates", "feature gates: "+strings.Join(utilfeature.DefaultFeatureGate.KnownFeatures(), ", "))
	logf.AddFlags(o.logging, fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.leaderElect {
		return nil, errors.New("this build of cert-manager's controllers has no leader election: pass --leader-elect=false")
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(o.featureGates); err != nil {
		return nil, err
	}
	if err := logf.ValidateAndApply(o.logging); err != nil {
		return nil, err
	}
	return o, nil
}

// enabled is the set of controllers to run, as cert-manager's
// options.EnabledControllers computes it (the experimental
// CertificateSigningRequest and Gateway API controllers stay off: their
// feature gates and flags are not offered here).
func (o *options) enabled() sets.Set[string] {
	var disabled []string
	on := sets.New[string]()
	for _, c := range o.controllers {
		switch {
		case c == "*":
			on.Insert(defaultEnabledControllers...)
		case strings.HasPrefix(c, "-"):
			disabled = append(disabled, strings.TrimPrefix(c, "-"))
		default:
			on.Insert(c)
		}
	}
	if len(disabled) > 0 && on.Len() == 0 {
		on.Insert(defaultEnabledControllers...)
	}
	if o.ctx.Namespace != "" {
		on.Delete(clusterScopedControllers...)
	}
	return on.Delete(disabled...)
}

func run(rootCtx context.Context, args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	rootCtx, cancel := context.WithCancel(rootCtx)
	defer cancel()
	log := logf.FromContext(rootCtx)
	g, rootCtx := errgroup.WithContext(rootCtx)

	v := util.VersionInfo()
	log.Info("starting cert-manager controller", "version", v.GitVersion, "go_version", v.GoVersion, "platform", v.Platform)

	factory, err := controller.NewContextFactory(rootCtx, o.ctx)
	if err != nil {
		return err
	}
	cctx, err := factory.Build()
	if err != nil {
		return err
	}
	enabled := o.enabled()
	log.Info(fmt.Sprintf("enabled controllers: %s", sets.List(enabled)))

	metricsLn, err := server.Listen(rootCtx, "tcp", o.metricsAddress)
	if err != nil {
		return fmt.Errorf("failed to listen on prometheus address %s: %v", o.metricsAddress, err)
	}
	cctx.Metrics.SetupACMECollector(cctx.SharedInformerFactory.Acme().V1().Challenges().Lister())
	cctx.Metrics.SetupCertificateCollector(cctx.SharedInformerFactory.Certmanager().V1().Certificates().Lister())
	cctx.Metrics.SetupIssuerCollector(cctx.SharedInformerFactory.Certmanager().V1().Issuers().Lister())
	cctx.Metrics.SetupClusterIssuerCollector(cctx.SharedInformerFactory.Certmanager().V1().ClusterIssuers().Lister())
	metricsServer := cctx.Metrics.NewServer(metricsLn)
	g.Go(func() error {
		<-rootCtx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return metricsServer.Shutdown(shutdownCtx)
	})
	g.Go(func() error {
		log.Info("starting metrics server", "address", metricsLn.Addr())
		if err := metricsServer.Serve(metricsLn); err != http.ErrServerClosed {
			return err
		}
		return nil
	})

	var lc net.ListenConfig
	healthzLn, err := lc.Listen(rootCtx, "tcp", o.healthzAddress)
	if err != nil {
		return fmt.Errorf("failed to listen on healthz address %s: %v", o.healthzAddress, err)
	}
	healthzServer := healthz.NewServer(o.healthzLeaderTimeout)
	g.Go(func() error {
		log.Info("starting healthz server", "address", healthzLn.Addr())
		return healthzServer.Start(rootCtx, healthzLn)
	})

	known := controller.Known()
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		log := log.WithValues("controller", n)
		if !enabled.Has(n) {
			log.Info("skipping disabled controller")
			continue
		}
		iface, err := known[n](factory)
		if err != nil {
			cancel()
			_ = g.Wait()
			return fmt.Errorf("error starting controller: %v", err)
		}
		g.Go(func() error {
			log.Info("starting controller")
			return iface.Run(o.workers, rootCtx)
		})
	}

	cctx.SharedInformerFactory.Start(rootCtx.Done())
	cctx.KubeSharedInformerFactory.Start(rootCtx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(rootCtx.Done())

	if err := g.Wait(); err != nil {
		return fmt.Errorf("error starting controller: %v", err)
	}
	log.Info("control loops exited")
	cctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cctx.KubeSharedInformerFactory.Shutdown()
	cctx.SharedInformerFactory.Shutdown()
	return nil
}
