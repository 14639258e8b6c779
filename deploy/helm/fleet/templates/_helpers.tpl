{{- define "fleet.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleet.labels" -}}
{{ include "fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fleet.databaseSecret" -}}
{{- default (include "fleet.fullname" .) .Values.database.existingSecret -}}
{{- end -}}

{{- /* "true" when the database is SQLite (one replica, no election), else "". */ -}}
{{- define "fleet.sqlite" -}}
{{- $url := "" -}}
{{- if not .Values.database.existingSecret -}}{{- $url = .Values.database.url | default "" -}}{{- end -}}
{{- if or (eq (.Values.database.kind | default "postgresql") "sqlite") (hasPrefix "sqlite" $url) -}}true{{- end -}}
{{- end -}}

{{- /* Replicas: replicaCount, or 2 on PostgreSQL and 1 on SQLite. */ -}}
{{- define "fleet.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount -}}
{{- if include "fleet.sqlite" . -}}1{{- else -}}2{{- end -}}
{{- else -}}
{{- int .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{- /* The Secret that holds the replicas' shared secret (key replica-secret). */ -}}
{{- define "fleet.replicaSecretName" -}}
{{- default (include "fleet.fullname" .) .Values.replicaSecret.existingSecret -}}
{{- end -}}

{{- /* The replicas' shared secret: the value given, else the one the release's Secret
holds already (kept across upgrades), else a new random one. */ -}}
{{- define "fleet.replicaSecret" -}}
{{- $given := .Values.replicaSecret.value | default "" -}}
{{- if $given -}}
{{- if lt (len $given) 32 -}}
{{- fail "replicaSecret.value must have at least 32 characters (e.g. openssl rand -hex 32)" -}}
{{- end -}}
{{- $given -}}
{{- else -}}
{{- $found := lookup "v1" "Secret" .Release.Namespace (include "fleet.fullname" .) -}}
{{- $kept := "" -}}
{{- if and $found $found.data -}}{{- $kept = index $found.data "replica-secret" | default "" -}}{{- end -}}
{{- if $kept -}}{{- $kept | b64dec -}}{{- else -}}{{- randAlphaNum 48 -}}{{- end -}}
{{- end -}}
{{- end -}}
