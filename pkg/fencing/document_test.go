package fencing_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
)

func TestParseDocument(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"valid", `{"list":{"number":2,"members":["node-0","node-1"]},"rounds":[{"node":"node-1","round":"node-1-3"}]}`, ""},
		{"not JSON", `{`, "fencing document"},
		{"no list number", `{"list":{"members":["node-0"]}}`, "list.number=0"},
		{"a member that is not a node name", `{"list":{"number":1,"members":["Node_0"]}}`, `list.members[0]="Node_0"`},
		{"a member twice", `{"list":{"number":1,"members":["a","a"]}}`, "listed twice"},
		{"a round without an id", `{"list":{"number":1,"members":["a"]},"rounds":[{"node":"a","round":""}]}`, "rounds[0].round"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := fencing.ParseDocument([]byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				out, err := d.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if again, err := fencing.ParseDocument(out); err != nil || again.List.Number != d.List.Number {
					t.Fatalf("round trip: %v %+v", err, again)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func FuzzParseDocument(f *testing.F) {
	f.Add([]byte(`{"list":{"number":2,"members":["node-0","node-1"]},"rounds":[{"node":"node-1","round":"node-1-3"}]}`))
	f.Add([]byte(`{"list":{"number":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := fencing.ParseDocument(data)
		if err != nil {
			return
		}
		out, err := d.Encode()
		if err != nil {
			t.Fatalf("a parsed document does not encode: %v", err)
		}
		if _, err := fencing.ParseDocument(out); err != nil {
			t.Fatalf("an encoded document does not parse: %v", err)
		}
	})
}

func TestReportFromAPI(t *testing.T) {
	r := &v1alpha1.FencingReport{ObservedAt: metav1.Now(), Armed: true, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: "b1",
		Lists: []v1alpha1.MemberList{{Number: 3, Members: []string{"a", "b"}}}}
	got := fencing.ReportFromAPI("42", r)
	if !got.Armed || got.Version != "42" || got.Timing != fencing.DefaultTiming() || got.BootID != "b1" || len(got.Lists) != 1 || got.Lists[0].Number != 3 {
		t.Fatalf("ReportFromAPI = %+v", got)
	}
	r.WatchdogSeconds = 0
	if fencing.ReportFromAPI("43", r).Armed {
		t.Fatal("a report without W counts as armed")
	}
	if fencing.ReportFromAPI("1", nil) != nil {
		t.Fatal("no fencing block is not nil")
	}
}

func TestTestimoniesAbout(t *testing.T) {
	report := func(name string, ts ...v1alpha1.FencingTestimony) v1alpha1.PeeringReport {
		r := v1alpha1.PeeringReport{Fencing: &v1alpha1.FencingReport{Testimonies: ts}}
		r.Name = name
		return r
	}
	reports := []v1alpha1.PeeringReport{
		report("a", v1alpha1.FencingTestimony{Node: "x", Round: "x-1", SilentForMilliseconds: 45000}),
		report("b", v1alpha1.FencingTestimony{Node: "y", Round: "y-1", SilentForMilliseconds: 1}),
		report("x", v1alpha1.FencingTestimony{Node: "x", Round: "x-1", SilentForMilliseconds: 99999}),
		{},
	}
	got := fencing.TestimoniesAbout("x", reports, func(m string) bool { return m == "a" })
	if len(got) != 1 || got[0].Member != "a" || got[0].SilentFor != 45*time.Second || !got[0].LeaseRenewing {
		t.Fatalf("TestimoniesAbout = %+v, want a's alone (x never testifies about itself)", got)
	}
}

func TestNextDocument(t *testing.T) {
	first := fencing.NextDocument(fencing.Document{}, []string{"b", "a", "b"}, nil)
	if first.List.Number != 1 || strings.Join(first.List.Members, ",") != "a,b" {
		t.Fatalf("first = %+v", first)
	}
	same := fencing.NextDocument(first, []string{"a", "b"}, []fencing.RoundRequest{{Node: "a", Round: "a-1"}})
	if same.List.Number != 1 || len(same.Rounds) != 1 {
		t.Fatalf("same members, a round: %+v, want number 1", same)
	}
	grown := fencing.NextDocument(same, []string{"a", "b", "c"}, nil)
	if grown.List.Number != 2 {
		t.Fatalf("a member added: number %d, want 2", grown.List.Number)
	}
}
