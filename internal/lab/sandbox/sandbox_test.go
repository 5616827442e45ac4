package sandbox

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTimingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Timings)
		wantErr string
	}{
		{"defaults", func(*Timings) {}, ""},
		{"zero monitor period", func(t *Timings) { t.NodeMonitorPeriod = 0 }, "--node-monitor-period"},
		{"lease too short", func(t *Timings) { t.NodeLeaseDuration = time.Second }, "lease duration"},
		{"grace below a renewal", func(t *Timings) { t.NodeMonitorGracePeriod = 10 * time.Second; t.NodeLeaseDuration = 40 * time.Second }, "grace period"},
		{"negative toleration", func(t *Timings) { t.DefaultTolerationSeconds = -1 }, "toleration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, base := range []Timings{DefaultTimings(), FastTimings()} {
				tm := base
				tc.mutate(&tm)
				err := tm.Validate()
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("Validate() = %v, want nil", err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error mentioning %q", err, tc.wantErr)
				}
			}
		})
	}
}

func TestZoneTransitionsFromLog(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{Dir: dir}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Lines as kube-controller-manager v1.37 writes them (klog text format).
	log := `I1129 15:30:01.100000   4242 node_lifecycle_controller.go:1133] "Controller detected that zone is now in new state" zone="sandbox:\x00:zone-a" newState="Normal"
I1129 15:30:02.000000   4242 other.go:1] "unrelated" zone="x"
I1129 15:31:07.300000   4242 node_lifecycle_controller.go:1133] "Controller detected that zone is now in new state" zone="sandbox:\x00:zone-a" newState="PartialDisruption"
I1129 15:31:08.300000   4242 node_lifecycle_controller.go:1133] "Controller detected that zone is now in new state" zone="" newState="FullDisruption"
`
	if err := os.WriteFile(c.LogPath(ControllerManager), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := c.ZoneTransitions()
	if err != nil {
		t.Fatal(err)
	}
	want := []ZoneTransition{
		{Zone: "sandbox:\x00:zone-a", State: "Normal"},
		{Zone: "sandbox:\x00:zone-a", State: "PartialDisruption"},
		{Zone: "", State: "FullDisruption"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d transitions %q, want %q", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("transition %d = %q, want %q", i, got[i], want[i])
		}
	}
	if st, _ := c.ZoneState("sandbox:\x00:zone-a"); st != "PartialDisruption" {
		t.Errorf("ZoneState = %q, want the last one, PartialDisruption", st)
	}
}

func TestTailFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	var b strings.Builder
	for i := range 100 {
		b.WriteString(strings.Repeat("x", i%7) + "line\n")
	}
	b.WriteString("the cause\n")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := tailFile(p, 3)
	if lines := strings.Split(got, "\n"); len(lines) != 3 || lines[2] != "the cause" {
		t.Errorf("tailFile = %q, want 3 lines ending with the cause", got)
	}
	if tailFile(filepath.Join(t.TempDir(), "missing"), 3) != "" {
		t.Error("tailFile of a missing file should be empty")
	}
}

func TestPKIIdentities(t *testing.T) {
	p, err := newPKI(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, p.CACert)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, id := range sandboxIdentities {
		cert := readCert(t, p.client(id.file).Cert)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: client certificate does not verify against the CA: %v", id.file, err)
		}
		if cert.Subject.CommonName != id.user || strings.Join(cert.Subject.Organization, ",") != strings.Join(id.groups, ",") {
			t.Errorf("%s: subject %v, want CN=%s O=%v", id.file, cert.Subject, id.user, id.groups)
		}
	}
	serving := readCert(t, p.ServingCert)
	if _, err := serving.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate not valid for 127.0.0.1: %v", err)
	}
	if st, err := os.Stat(p.ServiceAccountKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("service-account key mode = %v (err %v), want 0600", st.Mode(), err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestEnsureBinariesErrors(t *testing.T) {
	t.Run("prebuilt folder lacking binaries", func(t *testing.T) {
		t.Setenv(BinDirEnv, t.TempDir())
		_, err := EnsureBinaries(t.Context(), BuildOptions{})
		if err == nil || !strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), BinDirEnv) {
			t.Fatalf("err = %v, want one naming the missing binaries and %s", err, BinDirEnv)
		}
	})
	t.Run("prebuilt folder of another release than asked for", func(t *testing.T) {
		dir := t.TempDir()
		for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho Kubernetes v1.37.2\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv(BinDirEnv, dir)
		t.Setenv(KubernetesEnv, "")
		b, err := EnsureBinaries(t.Context(), BuildOptions{})
		if err != nil || b.Kubernetes != "v1.37.2" {
			t.Fatalf("no release asked for: Kubernetes %q, err %v; want v1.37.2 read from the apiserver", b.Kubernetes, err)
		}
		if _, err := EnsureBinaries(t.Context(), BuildOptions{Kubernetes: "1.37"}); err != nil {
			t.Fatalf("its own release asked for: %v", err)
		}
		for _, opts := range []struct{ flag, env string }{{"1.35", ""}, {"", "1.35"}} {
			t.Setenv(KubernetesEnv, opts.env)
			_, err := EnsureBinaries(t.Context(), BuildOptions{Kubernetes: opts.flag})
			if err == nil || !strings.Contains(err.Error(), "holds v1.37.2") || !strings.Contains(err.Error(), BinDirEnv) {
				t.Errorf("1.35 asked for (flag %q, env %q) with a folder of 1.37: err = %v, want one naming both", opts.flag, opts.env, err)
			}
		}
	})
	t.Run("not the sandbox module", func(t *testing.T) {
		t.Setenv(BinDirEnv, "")
		_, err := EnsureBinaries(t.Context(), BuildOptions{SourceDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "not the rebound sandbox module") {
			t.Fatalf("err = %v, want a clear 'not the sandbox module' error", err)
		}
	})
	t.Run("found above the working directory", func(t *testing.T) {
		dir, err := findSourceDir("")
		if err != nil {
			t.Fatal(err)
		}
		if !isSandboxModule(dir) {
			t.Fatalf("findSourceDir = %s, not the sandbox module", dir)
		}
	})
}

func TestReleaseModule(t *testing.T) {
	src := t.TempDir()
	for _, r := range []string{"v1.35", "v1.36", "notes"} {
		if err := os.MkdirAll(filepath.Join(src, releasesDir, r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"v1.35", "v1.36"} {
		if err := os.WriteFile(filepath.Join(src, releasesDir, r, "go.mod"), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const newest = "v1.37.2"
	if got, want := releases(src, newest), []string{"1.35", "1.36", "1.37"}; !slices.Equal(got, want) {
		t.Errorf("releases = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		want    string
		dir     string // relative to src; "" means src itself
		errWith string
	}{
		{want: ""},
		{want: "1.37"},
		{want: "v1.37.2"},
		{want: "1.35", dir: "kubernetes/v1.35"},
		{want: "v1.36", dir: "kubernetes/v1.36"},
		{want: "1.36.3", dir: "kubernetes/v1.36"},
		{want: "1.34", errWith: "not a supported release; the sandbox builds 1.35, 1.36, 1.37"},
		{want: "1.38", errWith: "not a supported release"},
		{want: "2.0", errWith: "not a release; give one as 1.MINOR, e.g. 1.37"},
		{want: "1", errWith: "not a release"},
		{want: "1.x", errWith: "not a release"},
		{want: "1.36.3.1", errWith: "not a release"},
		{want: "1.+36", errWith: "not a release"},
		{want: "1.-36", errWith: "not a release"},
		{want: "latest", errWith: "not a release"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			dir, err := releaseModule(src, newest, tc.want)
			if tc.errWith != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWith) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errWith)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(src, tc.dir); dir != want {
				t.Errorf("module = %s, want %s", dir, want)
			}
		})
	}
}

// TestReleaseModulesPinTheirRelease: each folder under kubernetes/ pins
// k8s.io/kubernetes and every staging module at the release its name
// says, so a build of 1.35 cannot quietly mix in another release's code.
func TestReleaseModulesPinTheirRelease(t *testing.T) {
	src, err := findSourceDir("")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(src, releasesDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatalf("no release modules in %s", filepath.Join(src, releasesDir))
	}
	for _, e := range entries {
		minor, ok := parseMinor(e.Name())
		if !ok {
			t.Errorf("%s: not a release folder (want v1.MINOR)", e.Name())
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, releasesDir, e.Name(), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		staging := "v0." + strings.TrimPrefix(minor, "v1.") + "."
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "k8s.io/kubernetes" && !strings.HasPrefix(f[1], minor+"."):
				t.Errorf("%s/go.mod requires k8s.io/kubernetes %s", e.Name(), f[1])
			case len(f) == 4 && f[1] == "=>" && strings.HasPrefix(f[0], "k8s.io/") && !strings.HasPrefix(f[3], staging):
				t.Errorf("%s/go.mod replaces %s with %s, want %sx", e.Name(), f[0], f[3], staging)
			}
		}
	}
}

// TestRunStartsAgainWhenAPortWasTaken: a component that finds its port taken
// between the sandbox's check and its own bind exits saying so; the sandbox
// starts it again on new ports instead of failing, and only the live
// process is recorded. A component that exits for another reason fails at
// once, with its log.
func TestRunStartsAgainWhenAPortWasTaken(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int    // how many starts exit before one stays up
		message   string // what a failing start prints
		wantErr   string
		wantStart int
	}{
		{name: "PortTakenOnce", failures: 1, message: "listen tcp 127.0.0.1:1: bind: address already in use", wantStart: 2},
		{name: "PortTakenEveryTime", failures: 5, message: "bind: address already in use", wantErr: "exited during start-up", wantStart: bindRetries},
		{name: "OtherFailure", failures: 1, message: "flag provided but not defined", wantErr: "flag provided but not defined", wantStart: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			c := &Cluster{Dir: dir}
			t.Cleanup(func() { _ = c.Stop() })
			count := filepath.Join(dir, "starts")
			up := filepath.Join(dir, "up")
			// Each start appends a line to count; the first `failures`
			// starts print the message and exit 1, a later one stays up.
			script := `echo x >> "$1"; n=$(wc -l < "$1"); if [ "$n" -le "$2" ]; then echo "$3"; exit 1; fi; echo "$4" > "$5"; exec sleep 60`
			var seen [][]int
			err := c.run(t.Context(), Options{}, "fake", "/bin/sh", 1, 20*time.Second, func(ports []int) ([]string, func(context.Context) error) {
				seen = append(seen, ports)
				return []string{"-c", script, "sh", count, strconv.Itoa(tc.failures), tc.message, strconv.Itoa(ports[0]), up}, func(context.Context) error {
					if _, err := os.Stat(up); err != nil {
						return err
					}
					return nil
				}
			})
			if tc.wantErr == "" && err != nil {
				t.Fatalf("run: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("run: got %v, want an error saying %q", err, tc.wantErr)
			}
			if len(seen) != tc.wantStart {
				t.Fatalf("started %d times, want %d", len(seen), tc.wantStart)
			}
			if len(c.processes) != 1 {
				t.Fatalf("recorded %d processes, want the last one only", len(c.processes))
			}
			if tc.wantErr == "" {
				got, _ := os.ReadFile(up)
				if strings.TrimSpace(string(got)) != strconv.Itoa(seen[len(seen)-1][0]) {
					t.Fatalf("the process that stayed up was given port %s, want the last pick %d", got, seen[len(seen)-1][0])
				}
			}
		})
	}
}
