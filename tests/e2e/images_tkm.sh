#!/usr/bin/env bash
# images_tkm: hack/images/tkm.sh builds tkm's images without Docker (a shared
# distroless-like base layer + one layer per binary) and pushes them to the
# real test registry. Each image's root filesystem, exported from the registry,
# runs its binary in a chroot as the non-root user 65532, holds no shell, and a
# second build gives the same digests (reproducible).
source "$(dirname "$0")/lib.sh"

CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
BINS=(tkmctl="$TKM_BUILD_DIR/cli/tkmctl")
for b in "${BINS[@]}"; do [[ -x ${b#*=} ]] || fail "missing ${b#*=} (build first)"; done
TAG=e2e-$RANDOM

step "build and push"
expect_ok "hack/images/tkm.sh" "$TKM_SOURCE_DIR/hack/images/tkm.sh" "$TKM_REGISTRY" "$TAG" "${BINS[@]}"
FIRST=$OUT
echo "$FIRST"
BASE=$(awk '$1 == "base" {print $2}' <<<"$FIRST")
[[ $BASE == sha256:* ]] || fail "no base layer line in: $FIRST"

for b in "${BINS[@]}"; do
  n=${b%%=*}
  step "image $n"
  ref=$TKM_REGISTRY/tkm/$n:$TAG
  line=$(awk -v n="$n" '$1 == n' <<<"$FIRST")
  [[ -n $line ]] || fail "no line for $n"
  cfg=$("$CRANE" config "$ref")
  assert_eq "$(jq -r '.config.User' <<<"$cfg")" "65532:65532" "$n runs as non-root by default"
  assert_eq "$(jq -c '.config.Entrypoint' <<<"$cfg")" "[\"/usr/bin/$n\"]" "$n entrypoint"
  assert_eq "$(jq -r '.architecture + "/" + .os' <<<"$cfg")" "amd64/linux" "$n platform"
  assert_eq "$("$CRANE" manifest "$ref" | jq -r '.layers[0].digest')" "$BASE" "$n's first layer is the shared base"
  root=$E2E_TMP/root-$n
  mkdir -p "$root"
  "$CRANE" export "$ref" - | tar -x -C "$root"
  [[ ! -e $root/bin/sh && ! -e $root/usr/bin/sh && ! -e $root/bin/bash ]] || fail "$n: the image has a shell"
  pass "$n: no shell in the image"
  [[ -s $root/etc/ssl/certs/ca-certificates.crt ]] || fail "$n: no CA certificates"
  pass "$n: CA certificates present"
  expect_ok "$n runs from its own root filesystem as 65532" chroot --userspec=65532:65532 "$root" "/usr/bin/$n" --help
  assert_contains "$OUT" "sage" "$n --help printed its usage"
  echo "size: $line"
done

step "reproducible"
expect_ok "second build" "$TKM_SOURCE_DIR/hack/images/tkm.sh" "$TKM_REGISTRY" "$TAG" "${BINS[@]}"
assert_eq "$OUT" "$FIRST" "the same binaries give the same digests"

step "bad input"
expect_fail "a non-loopback registry is refused" "$TKM_SOURCE_DIR/hack/images/tkm.sh" registry.example.com "$TAG" "${BINS[@]}"
assert_contains "$OUT" "loopback registries only" "says why"
expect_fail "a missing binary is refused" "$TKM_SOURCE_DIR/hack/images/tkm.sh" "$TKM_REGISTRY" "$TAG" "x=$E2E_TMP/nope"
assert_contains "$OUT" "is not an executable file" "says which"
e2e_done
