{{- define "kai.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kai.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kai.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{ .Values.serviceAccount.name }}
{{- else -}}
{{ include "kai.fullname" . }}-scheduler
{{- end -}}
{{- end -}}

{{- define "kai.secretName" -}}
{{- if .Values.existingSecret -}}
{{ .Values.existingSecret }}
{{- else -}}
{{ include "kai.fullname" . }}
{{- end -}}
{{- end -}}

{{- define "kai.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "kai.fullname" . }}
  - secretRef:
      name: {{ include "kai.secretName" . }}
{{- end -}}

{{- define "kai.volumes" -}}
volumes:
  - name: var
    emptyDir: {}
  - name: tmp
    emptyDir: {}
{{- end -}}

{{- define "kai.volumeMounts" -}}
volumeMounts:
  - name: var
    mountPath: /var/lib/kaiplatform
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "kai.podSpecCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
