// Command rebound-release builds rebound's release artifacts with no
// container engine: `make build`, `make image`, `make chart`, `make
// release` and `make sizes` run it (internal/release does the work). See
// docs/release.md.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/internal/lab/report"
	"rebound/internal/release"
	"rebound/pkg/exitcode"
)

func main() { cli.Main(newRootCommand(), "Error: ", exitcode.Failed) }

// common are the flags every subcommand shares.
type common struct {
	root, dist, source, downloadURL, repository, caBundle string
}

func (c *common) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.root, "root", ".", "rebound's module folder (a git checkout: the version is stamped from it)")
	f.StringVar(&c.dist, "dist", "dist", "output folder")
	f.StringVar(&c.source, "source", "https://github.com/rebound/rebound", "repository URL: the image's org.opencontainers.image.source label and the krew manifest's homepage")
	f.StringVar(&c.downloadURL, "download-url", "", "folder the krew manifest downloads the kubectl-rebound archives from (default SOURCE/releases/download/VERSION)")
	f.StringVar(&c.repository, "repository", release.DefaultRepository, "image repository named in the OCI layout (docker load tags the image REPOSITORY:VERSION)")
	f.StringVar(&c.caBundle, "ca-bundle", release.DefaultCABundle, "PEM bundle of trusted roots for the image (Debian's ca-certificates)")
}

func (c *common) options(cmd *cobra.Command) (release.Options, error) {
	root, err := filepath.Abs(c.root)
	if err != nil {
		return release.Options{}, err
	}
	s, err := release.ReadState(root)
	if err != nil {
		return release.Options{}, err
	}
	dist := c.dist
	if !filepath.IsAbs(dist) {
		dist = filepath.Join(root, dist)
	}
	return release.Options{
		Root: root, Dist: dist, State: s, Source: c.source, DownloadURL: c.downloadURL,
		Repository: c.repository, CABundle: c.caBundle,
		Log: func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) },
	}, nil
}

func newRootCommand() *cobra.Command {
	var c common
	root := &cobra.Command{
		Use:   "rebound-release",
		Short: "Build rebound's binaries, images and release artifacts from the git checkout",
		Long: `Build rebound's binaries, images and release artifacts from the git checkout
(docs/release.md).

Exit codes: 0 built, 1 failure, 2 bad input (a flag or an argument).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(cli.BadFlag)
	c.register(root)
	root.AddCommand(newLDFlagsCommand(&c), newBuildCommand(&c), newImageCommand(&c), newChartCommand(&c), newReleaseCommand(&c), newSizesCommand(&c))
	return root
}

func newLDFlagsCommand(c *common) *cobra.Command {
	return &cobra.Command{
		Use:   "ldflags",
		Short: "Print the -ldflags that stamp a binary with the checkout's version, commit and date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := c.options(cmd)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), o.State.LDFlags())
			return nil
		},
	}
}

func newBuildCommand(c *common) *cobra.Command {
	var out, platform string
	cmd := &cobra.Command{
		Use:   "build [rebound|rebound-manager|kubectl-rebound]...",
		Short: "Build stamped static binaries into --out",
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := c.options(cmd)
			if err != nil {
				return err
			}
			p, err := release.ParsePlatform(platform)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				args = []string{release.CLI.Name, release.Manager.Name, release.Plugin.Name}
			}
			for _, a := range args {
				b, err := binary(a)
				if err != nil {
					return err
				}
				path, err := release.Build(cmd.Context(), o.Root, b, p, o.State, out)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), path)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "bin", "output folder")
	cmd.Flags().StringVar(&platform, "platform", hostPlatform(), "os/arch to build for")
	return cmd
}

func binary(name string) (release.Binary, error) {
	for _, b := range []release.Binary{release.CLI, release.Manager, release.Plugin} {
		if b.Name == name {
			return b, nil
		}
	}
	return release.Binary{}, fmt.Errorf("unknown binary %q: want rebound, rebound-manager or kubectl-rebound", name)
}

// printingCommand is a command that checks -o, reads the common flags,
// runs, and prints its result as text or JSON.
func printingCommand(c *common, use, short string, run func(ctx context.Context, o release.Options) (result any, text func() string, err error)) *cobra.Command {
	var out cli.Output
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.Validate(); err != nil {
				return err
			}
			o, err := c.options(cmd)
			if err != nil {
				return err
			}
			res, text, err := run(cmd.Context(), o)
			if err != nil {
				return err
			}
			return out.Print(cmd.OutOrStdout(), res, text)
		},
	}
	out.Register(cmd)
	return cmd
}

func newImageCommand(c *common) *cobra.Command {
	return printingCommand(c, "image", "Build the rebound-manager image index (linux/amd64, linux/arm64) as an OCI layout tarball in --dist",
		func(ctx context.Context, o release.Options) (any, func() string, error) {
			build, err := os.MkdirTemp("", "rebound-image-")
			if err != nil {
				return nil, nil, err
			}
			defer os.RemoveAll(build)
			res, _, err := release.Image(ctx, o, build)
			return res, func() string { return imageText(res) }, err
		})
}

func imageText(res release.ImageResult) string {
	return fmt.Sprintf("%s\ndigest %s\n", res.Path, res.Digest) + metricText(func(w *report.Writer) {
		for _, p := range res.Platforms {
			w.Metric("image_compressed_size_"+sanitize(p.Platform), float64(p.CompressedBytes)/1e6, "MB")
		}
	})
}

// metricText is the METRIC lines write writes, one per line, through the
// lab's one writer; a line it refuses is said instead.
func metricText(write func(*report.Writer)) string {
	lines, err := report.Lines(write)
	if err != nil {
		return fmt.Sprintf("(METRIC lines not written: %v)\n", err)
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func newChartCommand(c *common) *cobra.Command {
	return printingCommand(c, "chart", "Package charts/rebound (version and appVersion from the checkout), lint it with Helm's linter, and write it as an OCI artifact in --dist",
		func(_ context.Context, o release.Options) (any, func() string, error) {
			res, err := release.Chart(o)
			return res, func() string { return chartText(res) }, err
		})
}

func chartText(res release.ChartResult) string {
	return fmt.Sprintf("%s\nsha256 %s\n%s\nmanifest %s (tag %s)\n", res.Package, res.SHA256, res.Artifact, res.ManifestDigest, res.Tag)
}

func newReleaseCommand(c *common) *cobra.Command {
	return printingCommand(c, "release", "Write dist/: the Helm chart, CLI and kubectl-rebound tarballs, the image, SBOMs, the krew manifest, SHA256SUMS",
		func(ctx context.Context, o release.Options) (any, func() string, error) {
			res, err := release.Release(ctx, o)
			return res, func() string {
				s := fmt.Sprintf("%s (version %s):\n", res.Dist, o.State.Version)
				for _, f := range res.Files {
					s += "  " + f + "\n"
				}
				return s + chartText(res.Chart) + imageText(res.Image)
			}, err
		})
}

func newSizesCommand(c *common) *cobra.Command {
	return printingCommand(c, "sizes", "Print each binary's package count and size (linux/amd64, as released)",
		func(ctx context.Context, o release.Options) (any, func() string, error) {
			dir, err := os.MkdirTemp("", "rebound-sizes-")
			if err != nil {
				return nil, nil, err
			}
			defer os.RemoveAll(dir)
			sizes, err := release.Sizes(ctx, o.Root, o.State, dir, release.CLI, release.Manager, release.Plugin)
			return sizes, func() string {
				return metricText(func(w *report.Writer) {
					for _, z := range sizes {
						n := sanitize(z.Binary)
						w.MetricDecimals("packages_"+n, float64(z.Packages), 0, "packages")
						w.Metric("binary_size_"+n, float64(z.Bytes)/1e6, "MB")
					}
				})
			}, err
		})
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }
