{{/*
Names are fixed, as in deploy/: ClusterRoles are cluster-wide, so one
release per cluster. Labels: the kustomize ones, plus Helm's bookkeeping.
*/}}
{{- define "rebound.selectorLabels" -}}
app.kubernetes.io/name: rebound
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "rebound.labels" -}}
{{ include "rebound.selectorLabels" .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- /* A label value may not hold "+" (a build's metadata, v0.0.0-dev+gSHA) and is at most 63 characters. */}}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | replace "+" "_" | trunc 63 | trimSuffix "-" | trimSuffix "." | quote }}
{{- end }}

{{- define "rebound.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "rebound.agentNamespace" -}}
{{ .Values.agent.namespace | default .Release.Namespace }}
{{- end }}

{{/* The controller runs its peering reconciler for the agent or Calico. */}}
{{- define "rebound.peering" -}}
{{- if or .Values.agent.enabled .Values.calico.enabled }}true{{ end }}
{{- end }}

{{/* The Calico backend's rejoin agent runs (deploy/agent/rejoin). */}}
{{- define "rebound.rejoin" -}}
{{- if and .Values.calico.enabled .Values.calico.rejoin.enabled }}true{{ end }}
{{- end }}

{{/* Some agent runs in the agents' namespace. */}}
{{- define "rebound.agentNamespaceWanted" -}}
{{- if or .Values.agent.enabled (include "rebound.rejoin" .) .Values.gossip.enabled }}true{{ end }}
{{- end }}

{{/* The Secret holding the gossip members' shared key. */}}
{{- define "rebound.gossipSecret" -}}
{{ .Values.gossip.existingSecret | default "rebound-gossip-key" }}
{{- end }}
