package policy

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/leaderelection"
)

// LeaseName is the coordination.k8s.io Lease whose holder writes IndexPolicy status.
const LeaseName = "index-apiserver-policy-status"

// DefaultNamespace is where the Lease lives when neither --leader-elect-namespace
// nor POD_NAMESPACE says otherwise.
const DefaultNamespace = "index-apiserver"

// Options configure the IndexPolicy controller.
type Options struct {
	// MaxIndexesPerResource caps the label keys plus field paths that all
	// accepted policies together may index on one resource. A policy that
	// would push the union over the cap is not accepted.
	MaxIndexesPerResource int
	// StatusInterval is how often the leader refreshes the index statistics in
	// the policies' status (when they changed).
	StatusInterval time.Duration

	// LeaderElect: only the holder of the Lease writes status. Every replica
	// applies the policies to its own caches either way.
	LeaderElect          bool
	LeaderElectNamespace string
	LeaseDuration        time.Duration
	RenewDeadline        time.Duration
	RetryPeriod          time.Duration
}

// NewOptions returns the defaults. The Lease namespace defaults to the
// POD_NAMESPACE environment variable (set it from the downward API), else
// "index-apiserver".
func NewOptions() *Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = DefaultNamespace
	}
	return &Options{
		MaxIndexesPerResource: 16,
		StatusInterval:        30 * time.Second,
		LeaderElect:           true,
		LeaderElectNamespace:  ns,
		LeaseDuration:         15 * time.Second,
		RenewDeadline:         10 * time.Second,
		RetryPeriod:           2 * time.Second,
	}
}

// AddFlags adds the IndexPolicy flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.MaxIndexesPerResource, "max-indexes-per-resource", o.MaxIndexesPerResource,
		"The most label keys plus field paths that IndexPolicies may index on one resource (pods or nodes), "+
			"counted over the union of all accepted policies. Built-in indexes (namespace, metadata.name, pods' spec.nodeName) "+
			"are not counted unless a policy names them. A policy that would exceed the cap gets Accepted=False (reason TooManyIndexes); "+
			"policies accepted earlier keep their indexes.")
	fs.DurationVar(&o.StatusInterval, "index-policy-status-interval", o.StatusInterval,
		"How often the index statistics (values, objects, estimated bytes) in IndexPolicy status are refreshed.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Elect one replica (by the Lease "+LeaseName+") to write IndexPolicy status. Every replica applies the policies either way. "+
			"Disable only when running a single replica.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace,
		"Namespace of the leader-election Lease; defaults to $POD_NAMESPACE when that is set.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration,
		"How long a non-leader waits after the last renewal before it may take the Lease over.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline,
		"How long the leader keeps retrying to renew the Lease before it stops writing status. Must be less than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod,
		"How often replicas try to acquire or renew the Lease.")
}

// Validate checks the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.MaxIndexesPerResource < 0 {
		errs = append(errs, fmt.Errorf("--max-indexes-per-resource must not be negative"))
	}
	if o.StatusInterval <= 0 {
		errs = append(errs, fmt.Errorf("--index-policy-status-interval must be positive"))
	}
	if o.LeaderElect {
		if o.LeaderElectNamespace == "" {
			errs = append(errs, fmt.Errorf("--leader-elect-namespace must not be empty"))
		}
		if o.LeaseDuration <= o.RenewDeadline {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline"))
		}
		if o.RenewDeadline <= 0 || o.RetryPeriod <= 0 {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline and --leader-elect-retry-period must be positive"))
		}
		if float64(o.RenewDeadline) <= leaderelection.JitterFactor*float64(o.RetryPeriod) {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline must be greater than %.1f times --leader-elect-retry-period", leaderelection.JitterFactor))
		}
	}
	return errs
}
