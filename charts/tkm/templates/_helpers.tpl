{{/*
The chart reads every object from the repository's own manifests (files/base ->
manifests/base, files/monitoring -> manifests/monitoring, files/crds -> crds/,
links that `helm package` resolves) and changes only what the values say. So
there is no second copy of any object to drift from the kustomize base.
*/}}

{{/* Helm's labels, added to each object's own (never to selectors or pod templates:
a changed selector breaks a DaemonSet's upgrade, a changed pod template restarts it). */}}
{{- define "tkm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
tkm.objects (list $ FILE [REPLACEMENTS]): the objects of one file of the linked
manifests, as a JSON list (include ... | fromJsonArray). The base's namespace
tkm-system becomes the release's (in metadata, RBAC subjects and the admission
policy's user name alike), each pair of REPLACEMENTS (a list: from to from to
...) is replaced in the text first (the host paths), and Helm's labels are
added. A file that does not parse fails the render, naming it.
*/}}
{{- define "tkm.objects" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $text := $root.Files.Get $file -}}
{{- if not $text }}{{ fail (printf "tkm chart: %s is missing or empty (charts/tkm/files links to the repository's manifests)" $file) }}{{ end -}}
{{- $text = replace "tkm-system" $root.Release.Namespace $text -}}
{{- if gt (len .) 2 -}}
{{- $r := index . 2 -}}
{{- /* through placeholders, so that a new path that contains an old one is left alone */ -}}
{{- range $i, $_ := until (div (len $r) 2 | int) -}}
{{- $text = replace (index $r (mul $i 2)) (printf "@@tkm-replace-%d@@" $i) $text -}}
{{- end -}}
{{- range $i, $_ := until (div (len $r) 2 | int) -}}
{{- $text = replace (printf "@@tkm-replace-%d@@" $i) (index $r (add1 (mul $i 2))) $text -}}
{{- end -}}
{{- end -}}
{{- $labels := include "tkm.labels" $root | fromYaml -}}
{{- $out := list -}}
{{- range splitList "\n---\n" $text -}}
{{- $o := fromYaml . -}}
{{- if hasKey $o "Error" }}{{ fail (printf "tkm chart: %s: %s" $file $o.Error) }}{{ end -}}
{{- if $o -}}
{{- $_ := set $o.metadata "labels" (merge (dict) ($o.metadata.labels | default dict) $labels) -}}
{{- $out = append $out $o -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* tkm.object (list $ FILE [REPLACEMENTS]): the one object of FILE, as JSON. */}}
{{- define "tkm.object" -}}
{{- $l := include "tkm.objects" . | fromJsonArray -}}
{{- if ne (len $l) 1 }}{{ fail (printf "tkm chart: %s holds %d objects, not 1" (index . 1) (len $l)) }}{{ end -}}
{{- first $l | toJson -}}
{{- end }}

{{/* tkm.print LIST: the objects as YAML documents. */}}
{{- define "tkm.print" -}}
{{- range . }}
---
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* tkm.image (list $ IMAGE): repository:tag, repository@digest or repository:tag@digest. */}}
{{- define "tkm.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- if and $img.digest (not $img.tag) -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository ($img.tag | default $root.Chart.AppVersion) -}}
{{- if $img.digest }}@{{ $img.digest }}{{ end -}}
{{- end -}}
{{- end }}

{{/* tkm.port ADDR: the port of a bind address (":8080", "127.0.0.1:28080"). */}}
{{- define "tkm.port" -}}
{{- $p := regexFind "[0-9]+$" . -}}
{{- if not $p }}{{ fail (printf "tkm chart: bind address %q has no port" .) }}{{ end -}}
{{- $p -}}
{{- end }}

{{/* tkm.container (list POD_SPEC NAME): fails unless the base's pod spec has container NAME. */}}
{{- define "tkm.container" -}}
{{- $name := index . 1 -}}
{{- $n := 0 -}}
{{- range (index . 0).containers }}{{ if eq .name $name }}{{ $n = add1 $n }}{{ end }}{{ end -}}
{{- if ne $n 1 }}{{ fail (printf "tkm chart: the base's pod spec has %d containers named %s, not 1" $n $name) }}{{ end -}}
{{- end }}

{{/*
tkm.pod (list $ POD_SPEC VALUES): what both workloads take from values the same
way: image pull policy and secrets, scheduling, hostNetwork, DNS, priority.
POD_SPEC is changed in place.
*/}}
{{- define "tkm.pod" -}}
{{- $root := index . 0 -}}
{{- $spec := index . 1 -}}
{{- $v := index . 2 -}}
{{- range $spec.containers }}{{ if $root.Values.images.pullPolicy }}{{ $_ := set . "imagePullPolicy" $root.Values.images.pullPolicy }}{{ end }}{{ end -}}
{{- with $root.Values.images.pullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end -}}
{{- with $v.nodeSelector }}{{ $_ := set $spec "nodeSelector" . }}{{ end -}}
{{- if $v.tolerations }}{{ $_ := set $spec "tolerations" $v.tolerations }}{{ else }}{{ $_ := unset $spec "tolerations" }}{{ end -}}
{{- with $v.affinity }}{{ $_ := set $spec "affinity" . }}{{ end -}}
{{- if $v.priorityClassName }}{{ $_ := set $spec "priorityClassName" $v.priorityClassName }}{{ else }}{{ $_ := unset $spec "priorityClassName" }}{{ end -}}
{{- if $v.hostNetwork }}{{ $_ := set $spec "hostNetwork" true }}{{ end -}}
{{- with $v.dnsPolicy }}{{ $_ := set $spec "dnsPolicy" . }}{{ end -}}
{{- end }}

{{/* tkm.podAnnotations (list TEMPLATE ANNOTATIONS): adds them to the pod template. */}}
{{- define "tkm.podAnnotations" -}}
{{- $tpl := index . 0 -}}
{{- with index . 1 }}{{ $_ := set $tpl.metadata "annotations" (merge (dict) . ($tpl.metadata.annotations | default dict)) }}{{ end -}}
{{- end }}
