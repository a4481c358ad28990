{{/*
The labels Helm adds to every object; test/helm strips exactly these before comparing with
`kubectl kustomize artifacts/`. Everything else matches the kustomize base.
*/}}
{{- define "index-apiserver.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The labels of the base's objects labelled with the app name, plus Helm's. */}}
{{- define "index-apiserver.labels" -}}
app.kubernetes.io/name: index-apiserver
{{ include "index-apiserver.helmLabels" . }}
{{- end }}

{{/* The Service's DNS name: the aggregator dials it and the certificate must carry it. */}}
{{- define "index-apiserver.serviceDNS" -}}
index-apiserver.{{ .Release.Namespace }}.svc
{{- end }}

{{- define "index-apiserver.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The server's ServiceAccount as an RBAC subject. */}}
{{- define "index-apiserver.subject" -}}
- kind: ServiceAccount
  name: index-apiserver
  namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "index-apiserver.validate" -}}
{{- if not (has .Values.certificate.source (list "selfSigned" "certManager" "secret")) }}
{{- fail (printf "certificate.source must be selfSigned, certManager or secret, not %q" .Values.certificate.source) }}
{{- end }}
{{- end }}

{{/*
The self-signed CA and serving certificate (certificate.source=selfSigned), as a YAML map of the
Secret's base64 data. Generated once per render (kept in .Values under a private key, so the
Secret and the APIService's caBundle agree), and reused from the Secret already in the cluster on
upgrades, so an upgrade does not rotate the certificate under running replicas.
*/}}
{{- define "index-apiserver.selfSigned" -}}
{{- if not (hasKey .Values "__selfSignedData") }}
{{- $data := dict }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace .Values.certificate.secretName }}
{{- if $existing }}
{{- $d := $existing.data | default dict }}
{{- if and (hasKey $d "ca.crt") (hasKey $d "tls.crt") (hasKey $d "tls.key") }}
{{- $data = dict "ca.crt" (index $d "ca.crt") "tls.crt" (index $d "tls.crt") "tls.key" (index $d "tls.key") }}
{{- end }}
{{- end }}
{{- if not $data }}
{{- $days := int .Values.certificate.selfSigned.days }}
{{- $dns := include "index-apiserver.serviceDNS" . }}
{{- $ca := genCA "index-apiserver-ca" $days }}
{{- $cert := genSignedCert $dns nil (list $dns (printf "%s.cluster.local" $dns)) $days $ca }}
{{- $data = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__selfSignedData" $data }}
{{- end }}
{{- toYaml (index .Values "__selfSignedData") }}
{{- end }}

{{- define "index-apiserver.selfSignedCA" -}}
{{- index (include "index-apiserver.selfSigned" . | fromYaml) "ca.crt" }}
{{- end }}
