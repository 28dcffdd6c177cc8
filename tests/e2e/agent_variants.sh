#!/usr/bin/env bash
# agent_variants: a variant index (issue 24) served by the real registry: an sm90 and an
# sm80 cache image (the sm80 one derived from the sm90 fixture by cache_retarget.py) added
# by `tkmctl build --add-variant` to one OCI image index whose entries carry the
# cache.triton.image/* annotations. Two agents
# with the H200 and the A100 fixture GPU roots each pick their own variant (--once says
# which, per GPU), pull only that variant's layer into their store (the other layer never
# lands there) and answer Materialize with that variant's files. An index with the sm90
# variant alone gives the A100 node NoVariant, served as an empty volume (the default
# whenIncompatible, Empty) while the H200 node still uses it; an index whose sm80 entry names
# the sm90 image is VariantMismatch on the A100 (refused, never empty). A node with both GPUs gets
# both variants in one volume: two store dirs, each layer referenced until Release.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
REPO=$TKM_REGISTRY/e2e-agent-variants-$RANDOM/vadd
mkdir fx && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C fx
python3 "$TKM_SOURCE_DIR/tests/e2e/cache_retarget.py" fx/tcache sm80 80 || fail "cache_retarget.py"
# the sm80 copy keeps the fixture's PTX (ISA 8.7, CUDA 12.8+): the A100 node gets a driver
# that JITs it (the fixture root's 550 driver is CUDA 12.4)
cp -a "$ROOTS/a100" a100root
sed -i 's/^driver=.*/driver=580.65.06/; s/^cuda=.*/cuda=13000/' a100root/nvml.conf
A100=$E2E_TMP/a100root
# a node with both: GPU 0 the H200, GPU 1 that A100
cp -a "$ROOTS/h200" mixedroot
cp -a "$ROOTS/a100/sys/bus/pci/devices/0000:07:00.0" mixedroot/sys/bus/pci/devices/
sed -n '/^\[gpu\]/,$p' a100root/nvml.conf >>mixedroot/nvml.conf
MIXED=$E2E_TMP/mixedroot

step "two variant images and their index in the registry (tkmctl build --add-variant)"
expect_ok "tkmctl build sm90 --add-variant" "$TKMCTL" build fx/tcache --push "$REPO:multi" --add-variant
expect_ok "tkmctl build sm80 --add-variant" "$TKMCTL" build sm80 --push "$REPO:multi" --add-variant
expect_ok "tkmctl build sm90 alone --add-variant" "$TKMCTL" build fx/tcache --push "$REPO:only90" --add-variant
IDX=$("$CRANE" manifest "$REPO:multi") || fail "crane manifest multi"
variant_digest() { jq -r --arg a "$1" '.manifests[] | select(.annotations["cache.triton.image/arch"] == $a) | .digest' <<<"$IDX"; }
D90=$(variant_digest 90) D80=$(variant_digest 80)
case $(uname -m) in x86_64) HOSTCPU=amd64 ;; aarch64) HOSTCPU=arm64 ;; *) HOSTCPU=$(uname -m) ;; esac
assert_eq "2 $HOSTCPU" \
  "$(jq -r '.manifests | length' <<<"$IDX") $(jq -r '.manifests[0].platform.architecture' <<<"$IDX")" "an index of two variants for this host's CPU"
L90=$("$CRANE" manifest "$REPO@$D90" | jq -r '.layers[0].digest')
L80=$("$CRANE" manifest "$REPO@$D80" | jq -r '.layers[0].digest')
DI=$("$CRANE" digest "$REPO:multi")
DS=$("$CRANE" digest "$REPO:only90")
CPU=$(jq -r '.manifests[0].platform.architecture' <<<"$IDX")
# a lying index: its sm80 entry names the sm90 image (written by hand, as an attacker would)
jq -c --arg d "$D90" '.manifests |= map(if .annotations["cache.triton.image/arch"] == "80" then .digest = $d else . end)' \
  <<<"$IDX" >lie.json
curl -sf -X PUT -H "Content-Type: application/vnd.oci.image.index.v1+json" --data-binary @lie.json \
  "http://$TKM_REGISTRY/v2/${REPO#*/}/manifests/lie" >/dev/null || fail "PUT the lying index"
DL=$("$CRANE" digest "$REPO:lie")

# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" multi "$REPO:multi" "$DI" "  mountPath: /home/ml/.triton/cache
  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" only90 "$REPO:only90" "$DS" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" lie "$REPO:lie" "$DL" "  signaturePolicy: {mode: Disabled}"

step "--once: each GPU's variant"
once_err() { # NAME ROOT_DIR: tkm-agent --once against the apiserver; its stderr
  TKM_FAKE_NVML=$2/nvml.conf "$AGENT" --once --kubeconfig "$KUBECONFIG" --node-name "e2e-once-$1" \
    --namespace "$NS" --sysfs-root "$2/sys" --procfs-root "$2/proc" \
    --nvml-lib "$FAKE_NVML" "${E2E_REACH_FLAGS[@]}" -o json >/dev/null 2>"once-$1.err" || true # only90 fails on the A100
  cat "once-$1.err"
}
agent_node "e2e-once-h200"
agent_node "e2e-once-a100"
OUT=$(once_err h200 "$ROOTS/h200")
assert_contains "$OUT" "$NS/multi: GPU 0 (nvidia-h200): linux/$CPU cuda sm90 warp 32 $D90: Compatible" "H200 picks sm90"
OUT=$(once_err a100 "$A100")
assert_contains "$OUT" "$NS/multi: GPU 0 (nvidia-a100): linux/$CPU cuda sm80 warp 32 $D80: Compatible" "A100 picks sm80"
assert_contains "$OUT" "$NS/only90: GPU 0 (nvidia-a100): no variant: NoVariant" "A100 has no variant in the sm90-only index"
once_image() { # ROOT_DIR REF: tkm-agent --once --image, no apiserver
  env -u KUBECONFIG TKM_FAKE_NVML="$1/nvml.conf" "$AGENT" --once --sysfs-root "$1/sys" \
    --procfs-root "$1/proc" --nvml-lib "$FAKE_NVML" --image "$2" -o json
}
expect_ok "--once --image INDEX on the A100: exit 0" once_image "$A100" "$REPO:multi"
assert_contains "$OUT" "image: GPU 0 (nvidia-a100): linux/$CPU cuda sm80 warp 32 $D80: Compatible" "--image: the A100 picks sm80"
expect_fail "--once --image SM90-ONLY INDEX on the A100: exit 1" once_image "$A100" "$REPO:only90"
assert_contains "$OUT" "image: GPU 0 (nvidia-a100): no variant: NoVariant" "--image: NoVariant"
# the same index in an OCI layout directory (tkmctl build --output --add-variant): picked per GPU too
expect_ok "tkmctl build sm90 --output --add-variant" "$TKMCTL" build fx/tcache --output lay --add-variant
expect_ok "tkmctl build sm80 --output --add-variant" "$TKMCTL" build sm80 --output lay --add-variant
LIDX=$(jq -r '.manifests[0].digest' lay/index.json)
LD80=$(jq -r '.manifests[] | select(.annotations["cache.triton.image/arch"] == "80") | .digest' "lay/blobs/sha256/${LIDX#sha256:}")
LD90=$(jq -r '.manifests[] | select(.annotations["cache.triton.image/arch"] == "90") | .digest' "lay/blobs/sha256/${LIDX#sha256:}")
expect_ok "--once --image LAYOUT INDEX on the A100: exit 0" once_image "$A100" "$E2E_TMP/lay"
assert_contains "$OUT" "image: GPU 0 (nvidia-a100): linux/$CPU cuda sm80 warp 32 $LD80: Compatible" "--image LAYOUT: the A100 picks sm80"
expect_ok "--once --image LAYOUT INDEX on the H200: exit 0" once_image "$ROOTS/h200" "$E2E_TMP/lay"
assert_contains "$OUT" "image: GPU 0 (nvidia-h200): linux/$CPU cuda sm90 warp 32 $LD90: Compatible" "--image LAYOUT: the H200 picks sm90"

S=$RANDOM
N1=e2e-var-h200-$S N2=e2e-var-a100-$S
agent_node "$N1"
agent_node "$N2"
agent_start h200 h200 "$N1" "$NS"
agent_start a100 "$A100" "$N2" "$NS"
SOCK1=$E2E_TMP/h200/run/agent.sock SOCK2=$E2E_TMP/a100/run/agent.sock
store_entries() { # AGENT: the layers extracted into its store
  find "$E2E_TMP/$1/store/sha256" -mindepth 1 -maxdepth 1 ! -name '*.complete' -printf '%f\n'
}
mat() { # POD VOL CACHE
  printf '{"m":"Materialize","ns":"%s","pod":"%s","uid":"0f8e7d6c-1111-4222-8333-%012d","vol":"%s","attrs":{"cacheName":"%s"},"timeout":60}' "$NS" "$1" "$RANDOM" "$2" "$3"
}

step "each node materializes its own variant and pulls only its layer"
wait_jp 60 "multi judged on $N1" nvidia-h200 tkcns "$N1" "$NS" '{.status.caches.multi.compatibleGPUs[0].gpuType}'
wait_jp 60 "multi judged on $N2" nvidia-a100 tkcns "$N2" "$NS" '{.status.caches.multi.compatibleGPUs[0].gpuType}'
wait_for 30 "sockets exist" test -S "$SOCK1" -a -S "$SOCK2"
agent_call "$SOCK1" "$(mat trainer-0 vol-1 multi)"
assert_eq "$(agent_field .code) $(agent_field .resp.target_arch) $(agent_field .resp.digest) $(agent_field '.resp.store_paths|length') $(agent_field .resp.empty)" \
  "OK 90 $DI 1 false" "H200: sm90, the pinned index digest, one store dir: $(agent_field .details)"
P1=$(agent_field .resp.store_path)
diff -r fx/tcache "$P1" >diff.out 2>&1 || fail "the H200 store dir is not the sm90 variant: $(head -5 diff.out)"
agent_call "$SOCK2" "$(mat trainer-1 vol-2 multi)"
assert_eq "$(agent_field .code) $(agent_field .resp.target_arch) $(agent_field '.resp.store_paths|length')" "OK 80 1" "A100: sm80: $(agent_field .details)"
P2=$(agent_field .resp.store_path)
diff -r sm80 "$P2" >diff.out 2>&1 || fail "the A100 store dir is not the sm80 variant: $(head -5 diff.out)"
pass "each store dir holds its own variant's files"
assert_eq "${L90#sha256:}" "$(store_entries h200)" "the H200 store holds the sm90 layer alone"
assert_eq "${L80#sha256:}" "$(store_entries a100)" "the A100 store holds the sm80 layer alone"
wait_jp 30 "H200 node status: extracted, the pod" "true trainer-0" tkcns "$N1" "$NS" \
  '{.status.caches.multi.extracted} {.status.caches.multi.pods[*].name}'

step "an sm90-only index: the H200 uses it, the A100 gets an empty volume (NoVariant)"
wait_jp 60 "only90 on $N2: NoVariant" NoVariant tkcns "$N2" "$NS" '{.status.caches.only90.incompatibleGPUs[0].reason}'
agent_call "$SOCK2" "$(mat trainer-2 vol-3 only90)"
assert_eq "$(agent_field .code) $(agent_field .resp.empty) $(agent_field .resp.empty_reason) [$(agent_field .resp.store_path)]" \
  "OK true NoVariant []" "A100: an empty volume with the reason"
assert_eq "${L80#sha256:}" "$(store_entries a100)" "nothing more pulled on the A100"
agent_call "$SOCK1" "$(mat trainer-3 vol-4 only90)"
assert_eq "$(agent_field .code) $(agent_field .resp.store_path)" "OK $P1" "H200: the same sm90 store dir (one layer, two caches)"

step "a node with an H200 and an A100: both variants in one volume"
N3=e2e-var-mixed-$S
agent_node "$N3"
agent_start mixed "$MIXED" "$N3" "$NS" --metrics-bind-address 127.0.0.1:0
SOCK3=$E2E_TMP/mixed/run/agent.sock
wait_jp 60 "multi judged on $N3" "nvidia-h200 nvidia-a100" tkcns "$N3" "$NS" '{.status.caches.multi.compatibleGPUs[*].gpuType}'
wait_for 30 "socket exists" test -S "$SOCK3"
agent_call "$SOCK3" "$(mat trainer-5 vol-5 multi)"
assert_eq "$(agent_field .code) $(agent_field .resp.target_arch) $(agent_field '.resp.store_paths|length') $(agent_field '.resp.parts|join(",")')" \
  "OK 90 2 triton" "two store dirs, the lowest GPU's first: $(agent_field .details)"
assert_eq "$(agent_field .resp.store_path)" "$(agent_field '.resp.store_paths[0]')" "store_paths[0] is store_path"
diff -r fx/tcache "$(agent_field '.resp.store_paths[0]')" >diff.out 2>&1 || fail "store_paths[0] is not sm90: $(head -5 diff.out)"
diff -r sm80 "$(agent_field '.resp.store_paths[1]')" >diff.out 2>&1 || fail "store_paths[1] is not sm80: $(head -5 diff.out)"
pass "store_paths: the sm90 and the sm80 variant"
assert_eq "$(printf '%s\n' "${L80#sha256:}" "${L90#sha256:}" | sort)" "$(store_entries mixed | sort)" "both layers pulled, nothing else"
wait_for 10 "metrics address logged" grep -q "metrics on http://" "$E2E_TMP/mixed.log"
MURL=$(grep -o "metrics on http://[^ ]*" "$E2E_TMP/mixed.log" | head -1 | sed 's/metrics on //')
assert_contains "$(curl -s "$MURL")" "tkm_agent_store_references 2" "the volume references both layers"
agent_call "$SOCK3" "$(mat trainer-5 vol-5 multi)"
assert_eq "$(agent_field .code) $(agent_field '.resp.store_paths|length')" "OK 2" "idempotent per volume"
agent_call "$SOCK3" '{"m":"Release","vol":"vol-5"}'
assert_eq "$(agent_field .code)" OK "released"
assert_contains "$(curl -s "$MURL")" "tkm_agent_store_references 0" "both references dropped"
wait_jp 30 "pods[] empty" "" tkcns "$N3" "$NS" '{.status.caches.multi.pods[*].name}'
agent_stop mixed

step "a variant that disagrees with its annotations: VariantMismatch, never an empty volume"
wait_jp 60 "lie on $N2: VariantMismatch" VariantMismatch tkcns "$N2" "$NS" '{.status.caches.lie.incompatibleGPUs[0].reason}'
agent_call "$SOCK2" "$(mat trainer-6 vol-6 lie)"
assert_eq "$(agent_field .code)" FAILED_PRECONDITION "the A100 refuses the lying variant"
assert_contains "$(agent_field .details)" "VariantMismatch" "with the reason"
assert_eq "${L80#sha256:}" "$(store_entries a100)" "nothing of it pulled"
wait_jp 60 "lie on $N1: the sm90 entry is honest" nvidia-h200 tkcns "$N1" "$NS" '{.status.caches.lie.compatibleGPUs[0].gpuType}'

step "Release"
agent_call "$SOCK1" '{"m":"Release","vol":"vol-1"}' '{"m":"Release","vol":"vol-4"}'
agent_call "$SOCK2" '{"m":"Release","vol":"vol-2"}' '{"m":"Release","vol":"vol-3"}'
assert_eq "$(jq -rs 'map(.code) | join(" ")' <<<"$R")" "OK OK" "released (the empty volume too)"
agent_stop h200
agent_stop a100
assert_not_contains "$(agent_log h200)$(agent_log a100)$(agent_log mixed)" "ERROR" "no error in the logs"
e2e_done
