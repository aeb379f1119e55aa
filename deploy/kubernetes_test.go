package deploy

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// drainWorstCase is how long `notifyd run` may take from SIGTERM to exit:
// server.Run's 30 s drain, then up to 10 s cancelling what still runs.
const drainWorstCase = 40 * time.Second

// k8sObject is what the test reads of the example's objects.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		MaxUnavailable *int `yaml:"maxUnavailable"`
		Template       struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	Containers                    []struct {
		Image     string   `yaml:"image"`
		Args      []string `yaml:"args"`
		Lifecycle struct {
			PreStop struct {
				Sleep struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		ReadinessProbe struct {
			HTTPGet struct {
				Path string `yaml:"path"`
			} `yaml:"httpGet"`
		} `yaml:"readinessProbe"`
	} `yaml:"containers"`
}

// TestKubernetesExample reads the Kubernetes example of docs/deploy.md and
// checks what the page promises of it: a Job that migrates with the
// Deployment's image, readiness on /readyz, a grace period that covers the
// pre-stop pause and the drain of the sends in flight, and a
// PodDisruptionBudget over the Deployment's pods.
func TestKubernetesExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile("(?s)## Kubernetes\n.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if section == nil {
		t.Fatal("docs/deploy.md has no Kubernetes example (a yaml block under ## Kubernetes)")
	}
	objects := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(section[1]))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("the Kubernetes example is not YAML: %v", err)
		}
		objects[o.Kind] = o
	}

	job, deploy, pdb := objects["Job"], objects["Deployment"], objects["PodDisruptionBudget"]
	if len(job.Spec.Template.Spec.Containers) != 1 || len(deploy.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Job and a Deployment of one container each, got %v", slices.Sorted(maps.Keys(objects)))
	}
	migrate, run := job.Spec.Template.Spec.Containers[0], deploy.Spec.Template.Spec.Containers[0]
	if len(migrate.Args) == 0 || migrate.Args[0] != "migrate" {
		t.Errorf("the Job runs %v, not notifyd migrate", migrate.Args)
	}
	if migrate.Image != run.Image {
		t.Errorf("the Job migrates with %s, the Deployment runs %s", migrate.Image, run.Image)
	}
	if run.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe on %q, want /readyz", run.ReadinessProbe.HTTPGet.Path)
	}
	grace := deploy.Spec.Template.Spec.TerminationGracePeriodSeconds
	pause := time.Duration(run.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if grace == nil {
		t.Errorf("the Deployment sets no terminationGracePeriodSeconds (Kubernetes' default is 30 s)")
	} else if time.Duration(*grace)*time.Second < pause+drainWorstCase {
		t.Errorf("terminationGracePeriodSeconds %d does not cover the pre-stop pause (%s) and the drain (%s)",
			*grace, pause, drainWorstCase)
	}
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable < 1 {
		t.Errorf("the PodDisruptionBudget lets no replica go (maxUnavailable %v)", pdb.Spec.MaxUnavailable)
	}
	labels := deploy.Spec.Template.Metadata.Labels
	if len(pdb.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("the PodDisruptionBudget selects nothing")
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%s, which the Deployment's pods do not carry", k, v)
		}
	}
}
