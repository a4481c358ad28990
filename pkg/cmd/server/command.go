package server

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
)

func init() {
	// The upstream sharded list and watch parameter is served by default here;
	// --feature-gates=ShardedListAndWatch=false turns it off.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.ShardedListAndWatch): true}); err != nil {
		panic(err)
	}
	if err := logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
}

// NewCommand returns the index-apiserver command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "index-apiserver",
		Short: "Aggregated API server serving indexed, read-only mirrors of pods and nodes",
		Long: `index-apiserver serves indexing.k8s.io/v1alpha1 pods and nodes behind the
kube-aggregator from its own indexed watch cache. Lists and watches take label,
field and shard selectors; IndexPolicy objects choose which labels and fields
are indexed.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			if err := o.Validate(); err != nil {
				return err
			}
			return Run(cmd.Context(), o)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
	}
	cmd.SetContext(ctx)

	fss := o.Flags()
	verflag.AddFlags(fss.FlagSet("global"))
	fs := cmd.Flags()
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// Run starts the server and blocks until ctx ends.
func Run(ctx context.Context, o *Options) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return err
	}
	klog.InfoS("Starting index-apiserver")
	return srv.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
