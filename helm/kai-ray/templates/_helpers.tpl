{{- define "kai-ray.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "kai-ray.labels" -}}
app.kubernetes.io/name: kai-ray
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "kai-ray.selector" -}}
app.kubernetes.io/name: kai-ray
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kai-ray.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The head container: a Ray head, then the operator inside it as a Ray actor. */}}
{{- define "kai-ray.command" -}}
- bash
- -c
- |
  ray start --head --dashboard-host=0.0.0.0 --metrics-export-port={{ .Values.metrics.port }} --disable-usage-stats &&
  kai-ray operator --in-ray {{ include "kai-ray.operatorArgs" . }} &&
  exec sleep infinity
{{- end -}}


{{- define "kai-ray.operatorArgs" -}}
--default-queue {{ .Values.defaultQueue }}{{ range .Values.schedulerNames }} --scheduler-name {{ . }}{{ end }}
{{- if .Values.dashboard.service.enabled }} --dashboard 0.0.0.0:{{ .Values.dashboard.port }}{{ else }} --dashboard 127.0.0.1:{{ .Values.dashboard.port }}{{ end }}
{{- if .Values.autoscaling.clusterCanGrow }} --cluster-can-grow{{ end }}
{{- if .Values.queueAccess.closed }} --closed-queues{{ end }}
{{- with .Values.autoscaling.preemptionDelay }}
{{- if not (regexMatch "^[0-9][0-9.]*(ms|s|m|h|d)?([0-9.]+(ms|s|m|h|d))*$" (toString .)) }}
{{- fail (printf "autoscaling.preemptionDelay is %q: write a duration such as 2m, 90s or 0s" (toString .)) }}
{{- end }} --preemption-delay {{ . }}
{{- end }}
{{- with .Values.reservations.reserveAfter }}
{{- if not (regexMatch "^[0-9][0-9.]*(ms|s|m|h|d)?([0-9.]+(ms|s|m|h|d))*$" (toString .)) }}
{{- fail (printf "reservations.reserveAfter is %q: write a duration such as 30m, 2h or 0s (off)" (toString .)) }}
{{- end }} --reserve-after {{ . }}
{{- end }}
{{- with .Values.leaderElection }}{{ if .enabled }} --leader-elect-name {{ $.Release.Name }} --leader-elect-lease-duration {{ .leaseDuration }} --leader-elect-renew-deadline {{ .renewDeadline }} --leader-elect-retry-period {{ .retryPeriod }}{{ else }} --no-leader-elect{{ end }}{{ end }}
{{- if .Values.gpuSharing.enabled }} --gpu-sharing {{ include "kai-ray.image" . }} --webhook {{ .Values.gpuSharing.webhookPort }} /etc/kai-ray/webhook/tls.crt /etc/kai-ray/webhook/tls.key{{ end }}
{{- end -}}


{{/* The dashboard's token, from its Secret, where the Service exposes the dashboard. */}}
{{- define "kai-ray.dashboardEnv" -}}
{{- if .Values.dashboard.service.enabled }}
env:
  - name: KAI_RAY_DASHBOARD_TOKEN
    valueFrom:
      secretKeyRef: {name: {{ include "kai-ray.name" . }}-dashboard-token, key: token}
{{- end }}
{{- end -}}
