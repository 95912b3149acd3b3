{{/* The chart name, or nameOverride. */}}
{{- define "noexecute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Object names: the release name when it already contains the chart name (a release named
`noexecute` gives `noexecute`), else `<release>-noexecute`. Releases that shard the nodes
(controller.nodeSelector) thereby get distinct names, RBAC objects and Leases.
*/}}
{{- define "noexecute.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "noexecute.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: Helm's recommended ones, then commonLabels. */}}
{{- define "noexecute.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "noexecute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: noexecute
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A probe: the chart's timings, with livenessProbe/readinessProbe's keys over them. */}}
{{- define "noexecute.probe" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $defaults := index . 2 -}}
{{- $overrides := index . 3 | default dict -}}
{{- $probe := dict "httpGet" (dict "path" $path "port" "admin" "scheme" (include "noexecute.adminScheme" $root | upper)) -}}
{{- toYaml (merge $probe (deepCopy $overrides) $defaults) -}}
{{- end -}}

{{/* What selects the controller's pods (Deployment, PDB, Service, spread constraints). */}}
{{- define "noexecute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "noexecute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "noexecute.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "noexecute.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "noexecute.leaseName" -}}
{{- default (include "noexecute.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "noexecute.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.leaseNamespace -}}
{{- end -}}

{{- define "noexecute.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* HTTPS unless the admin server runs in its plain mode. */}}
{{- define "noexecute.adminScheme" -}}
{{- if .Values.adminServer.insecure -}}http{{- else -}}https{{- end -}}
{{- end -}}

{{/* The policy file (the controller's --config), from .Values.policy: unset (null) and empty
values are left out, so the binary's default applies. */}}
{{- define "noexecute.policy" -}}
{{- $lines := list -}}
{{- range $key, $value := .Values.policy -}}
{{- if not (or (kindIs "invalid" $value) (and (kindIs "string" $value) (eq $value ""))) -}}
{{- $lines = append $lines (printf "%s: %s" $key (toJson $value)) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* Where the policy ConfigMap and the Secrets are mounted: side by side, never nested. */}}
{{- define "noexecute.configDir" -}}/etc/noexecute/policy{{- end -}}
{{- define "noexecute.tlsDir" -}}/etc/noexecute/admin-tls{{- end -}}
{{- define "noexecute.kubeconfigDir" -}}/etc/noexecute/kubeconfig{{- end -}}

{{/*
The arguments of `noexecute run`, one per line, as `--flag=value`. Flags at their binary
default are left out, so the arguments show what differs from upstream's behaviour.
*/}}
{{- define "noexecute.args" -}}
{{- $c := .Values.controller -}}
{{- $le := .Values.leaderElection -}}
- run
- --config={{ include "noexecute.configDir" . }}/policy.yaml
- --admin-addr={{ .Values.adminServer.bindAddress }}:{{ .Values.adminServer.port }}
- --leader-elect-name={{ include "noexecute.leaseName" . }}
{{- if $c.nodeSelector }}
- {{ printf "--node-selector=%s" $c.nodeSelector | quote }}
{{- end }}
{{- if ne (toString $c.kubeApiQps) "20" }}
- --kube-api-qps={{ $c.kubeApiQps }}
{{- end }}
{{- if ne (int $c.kubeApiBurst) 30 }}
- --kube-api-burst={{ $c.kubeApiBurst }}
{{- end }}
{{- if ne (int $c.concurrency) 256 }}
- --concurrency={{ $c.concurrency }}
{{- end }}
{{- if ne (int $c.workerThreads) 1 }}
- --worker-threads={{ $c.workerThreads }}
{{- end }}
{{- if ne (toString $c.initialList) "stream" }}
- --initial-list={{ $c.initialList }}
{{- end }}
{{- if ne (int $c.pageSize) 500 }}
- --page-size={{ $c.pageSize }}
{{- end }}
{{- if ne $c.apiContentType "protobuf" }}
- --api-content-type={{ $c.apiContentType }}
{{- end }}
{{- if ne $c.apiHttpVersion "auto" }}
- --api-http-version={{ $c.apiHttpVersion }}
{{- end }}
{{- if ne (toString $c.eventComponent) "taint-eviction-controller" }}
- {{ printf "--event-component=%s" $c.eventComponent | quote }}
{{- end }}
{{- if ne (toString $c.logFormat) "text" }}
- --log-format={{ $c.logFormat }}
{{- end }}
{{- if $c.comparisonOperators }}
- --comparison-operators
{{- end }}
{{- if $c.identity }}
- {{ printf "--identity=%s" $c.identity | quote }}
{{- end }}
{{- if $c.kubeconfig.secretName }}
- --kubeconfig={{ include "noexecute.kubeconfigDir" . }}/{{ $c.kubeconfig.key }}
{{- end }}
{{- if $c.kubeconfig.context }}
- {{ printf "--context=%s" $c.kubeconfig.context | quote }}
{{- end }}
{{- if not $le.enabled }}
- --leader-elect=false
{{- else }}
{{- if ne (toString $le.leaseDuration) "15s" }}
- --leader-elect-lease-duration={{ $le.leaseDuration }}
{{- end }}
{{- if ne (toString $le.renewDeadline) "10s" }}
- --leader-elect-renew-deadline={{ $le.renewDeadline }}
{{- end }}
{{- if ne (toString $le.retryPeriod) "2s" }}
- --leader-elect-retry-period={{ $le.retryPeriod }}
{{- end }}
{{- end }}
{{- if $le.leaseNamespace }}
- --leader-elect-namespace={{ $le.leaseNamespace }}
{{- end }}
{{- if .Values.adminServer.insecure }}
- --admin-insecure
{{- else if .Values.adminServer.tls.secretName }}
- --admin-tls-cert-file={{ include "noexecute.tlsDir" . }}/tls.crt
- --admin-tls-key-file={{ include "noexecute.tlsDir" . }}/tls.key
{{- end }}
{{- if $c.handoverDelay }}
- --handover-delay={{ $c.handoverDelay }}
{{- else if and $c.refuseIfForeign (not .Values.policy.dryRun) }}
- --refuse-if-foreign
{{- end }}
{{- if $c.deviceTaints }}
- --device-taints
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* A duration as the binary's flags take it (15s, 1m30s, 500ms, 1.5s, or bare seconds), in
milliseconds. */}}
{{- define "noexecute.durationMs" -}}
{{- $d := toString . -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?$" $d -}}
{{- mulf (float64 $d) 1000 | int64 -}}
{{- else -}}
{{- $units := dict "h" 3600000.0 "m" 60000.0 "s" 1000.0 "ms" 1.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(h|ms|m|s)" $d -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 -}}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" -}}
{{- $total = addf $total (mulf $number (get $units $unit)) -}}
{{- end -}}
{{- $total | int64 -}}
{{- end -}}
{{- end -}}

{{/* Checks of combinations that would make two replicas act at once, or cannot work. */}}
{{- define "noexecute.validate" -}}
{{- with .Values.controller.handoverDelay -}}
{{- if lt (int64 (include "noexecute.durationMs" .)) 1 -}}
{{- fail "controller.handoverDelay must be more than 0 (leave it empty to evict when due): with no delay, both controllers would evict the same pods" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.controller.deviceTaints .Values.controller.nodeSelector -}}
{{- fail "controller.deviceTaints cannot be combined with controller.nodeSelector: device taints are not sharded by node" -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail "leaderElection.enabled=false needs replicaCount 1: every replica would act" -}}
{{- end -}}
{{- $le := .Values.leaderElection -}}
{{- if $le.enabled -}}
{{- $lease := include "noexecute.durationMs" $le.leaseDuration | int64 -}}
{{- $renew := include "noexecute.durationMs" $le.renewDeadline | int64 -}}
{{- $retry := include "noexecute.durationMs" $le.retryPeriod | int64 -}}
{{- /* The binary's own checks (noexecute run exits on them, and the pods would crash-loop). */ -}}
{{- if le $lease $renew -}}
{{- fail (printf "leaderElection.leaseDuration (%v) must be longer than leaderElection.renewDeadline (%v)" $le.leaseDuration $le.renewDeadline) -}}
{{- end -}}
{{- if le $renew $retry -}}
{{- fail (printf "leaderElection.renewDeadline (%v) must be longer than leaderElection.retryPeriod (%v)" $le.renewDeadline $le.retryPeriod) -}}
{{- end -}}
{{- if lt (sub $lease $renew) 1500 -}}
{{- fail (printf "leaderElection.leaseDuration (%v) must exceed leaderElection.renewDeadline (%v) by at least 1.5s: every request is bounded by the gap less 0.5s" $le.leaseDuration $le.renewDeadline) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.adminServer.insecure .Values.adminServer.tls.secretName -}}
{{- fail "adminServer.insecure serves plain HTTP: unset adminServer.tls.secretName, or insecure" -}}
{{- end -}}
{{- end -}}
