// Command sigstore-testca makes keyless Sigstore bundles for tkm's tests,
// offline, with sigstore-go's virtual Sigstore (pkg/testing/ca): a test
// Fulcio CA issues a short-lived certificate for an identity, the DSSE
// envelope (the in-toto statement cosign v3 signs for an image) is signed
// with its key, and a test Rekor signs the log entry's SET and a checkpoint
// of a Merkle tree that holds the entry. The matching trusted_root.json
// (Sigstore's format) is written beside the bundle.
//
//	sigstore-testca OUTDIR sha256:<image hex> IDENTITY ISSUER
//
// writes OUTDIR/trusted_root.json, OUTDIR/bundle.json (DSSE, as cosign v3
// signs images), OUTDIR/bundle-message.json (a message signature over the
// digest, v0.2, logged as a hashedrekord) and OUTDIR/other_trusted_root.json (a second, unrelated virtual Sigstore: a
// chain that does not lead to it is untrusted).
//
// The virtual Sigstore keeps its keys private; this test tool reads them by
// reflection to sign a checkpoint for a tree of several leaves (the library's
// own proof covers a one-leaf tree only) and to issue a certificate with an
// embedded SCT (the library's certificates have none).
package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	rekorutil "github.com/sigstore/rekor/pkg/util"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/encoding/protojson"
)

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "sigstore-testca: "+f+"\n", a...)
	os.Exit(1)
}

func leafHash(b []byte) []byte {
	h := sha256.Sum256(append([]byte{0}, b...))
	return h[:]
}

func nodeHash(l, r []byte) []byte {
	h := sha256.Sum256(append(append([]byte{1}, l...), r...))
	return h[:]
}

// split: the largest power of two smaller than n (RFC 6962 section 2.1).
func split(n int) int {
	k := 1
	for k<<1 < n {
		k <<= 1
	}
	return k
}

func mth(leaves [][]byte) []byte {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := split(len(leaves))
	return nodeHash(mth(leaves[:k]), mth(leaves[k:]))
}

// path: the audit path of leaf m (RFC 6962 section 2.1.1), bottom up.
func path(m int, leaves [][]byte) [][]byte {
	if len(leaves) == 1 {
		return nil
	}
	k := split(len(leaves))
	if m < k {
		return append(path(m, leaves[:k]), mth(leaves[k:]))
	}
	return append(path(m-k, leaves[k:]), mth(leaves[:k]))
}

const intotoType = "application/vnd.in-toto+json"

func privateField[T any](vs *ca.VirtualSigstore, name string) T {
	f := reflect.ValueOf(vs).Elem().FieldByName(name)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(T)
}

// leafWithSCT issues a Fulcio-like leaf certificate (email SAN, OIDC issuer
// in extension 1.3.6.1.4.1.57264.1.8 as a DER UTF8String, code signing) from
// the virtual Fulcio intermediate, with an SCT from the virtual CT log
// embedded as real Fulcio certificates have (RFC 6962 section 3.3: the log
// signs the precertificate's TBS, i.e. the final TBS without the SCT list).
func leafWithSCT(vs *ca.VirtualSigstore, identity, issuer string) (*x509.Certificate, *ecdsa.PrivateKey) {
	fca := vs.FulcioCertificateAuthorities()[0].(*root.FulcioCertificateAuthority)
	inter := fca.Intermediates[0]
	interKey := privateField[*ecdsa.PrivateKey](vs, "fulcioIntermediateKey")
	ctKey := privateField[*ecdsa.PrivateKey](vs, "ctlogKey")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		die("leaf key: %v", err)
	}
	iss, _ := asn1.MarshalWithParams(issuer, "utf8")
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(now.UnixNano()),
		EmailAddresses:  []string{identity},
		NotBefore:       now,
		NotAfter:        now.Add(10 * time.Minute),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}, Value: iss}},
	}
	pre, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &key.PublicKey, interKey)
	if err != nil {
		die("precertificate: %v", err)
	}
	preCert, _ := x509.ParseCertificate(pre)
	issuerKeyHash := sha256.Sum256(inter.RawSubjectPublicKeyInfo)
	ctDER, _ := x509.MarshalPKIXPublicKey(&ctKey.PublicKey)
	logID := sha256.Sum256(ctDER)
	ts := uint64(now.UnixMilli())
	var signed []byte
	signed = append(signed, 0, 0) // v1, certificate_timestamp
	signed = binary.BigEndian.AppendUint64(signed, ts)
	signed = append(signed, 0, 1) // precert_entry
	signed = append(signed, issuerKeyHash[:]...)
	tbs := preCert.RawTBSCertificate
	signed = append(signed, byte(len(tbs)>>16), byte(len(tbs)>>8), byte(len(tbs)))
	signed = append(signed, tbs...)
	signed = append(signed, 0, 0) // no extensions
	dh := sha256.Sum256(signed)
	ctSig, err := ecdsa.SignASN1(rand.Reader, ctKey, dh[:])
	if err != nil {
		die("SCT: %v", err)
	}
	var sct []byte
	sct = append(sct, 0)
	sct = append(sct, logID[:]...)
	sct = binary.BigEndian.AppendUint64(sct, ts)
	sct = append(sct, 0, 0, 4, 3) // no extensions; sha256, ecdsa
	sct = binary.BigEndian.AppendUint16(sct, uint16(len(ctSig)))
	sct = append(sct, ctSig...)
	list := binary.BigEndian.AppendUint16(nil, uint16(len(sct)+2))
	list = binary.BigEndian.AppendUint16(list, uint16(len(sct)))
	list = append(list, sct...)
	ext, _ := asn1.Marshal(list)
	tmpl.ExtraExtensions = append(tmpl.ExtraExtensions,
		pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11129, 2, 4, 2}, Value: ext})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &key.PublicKey, interKey)
	if err != nil {
		die("certificate: %v", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return leaf, key
}

func trustedRoot(vs *ca.VirtualSigstore) []byte {
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(),
		vs.CTLogs(), vs.TimestampingAuthorities(), vs.RekorLogs())
	if err != nil {
		die("trusted root: %v", err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		die("trusted root: %v", err)
	}
	// The virtual Sigstore's log ids are the hex text of the key hash; a real
	// trusted root (and sigstore-go reading one) has the hash bytes.
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		die("trusted root: %v", err)
	}
	for _, k := range []string{"tlogs", "ctlogs"} {
		logs, _ := m[k].([]any)
		for _, l := range logs {
			lm := l.(map[string]any)
			raw, err := base64.StdEncoding.DecodeString(lm["publicKey"].(map[string]any)["rawBytes"].(string))
			if err != nil {
				die("trusted root: %v", err)
			}
			id := sha256.Sum256(raw)
			lm["logId"] = map[string]any{"keyId": base64.StdEncoding.EncodeToString(id[:])}
		}
	}
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		die("trusted root: %v", err)
	}
	return b
}

// logged completes tle as Rekor v1 would for the entry at leaf 5 of a
// 7-leaf tree: kind/version, the SET, the inclusion proof and its checkpoint.
func logged(vs *ca.VirtualSigstore, tle *protorekor.TransparencyLogEntry, kind string) {
	const index, size = 5, 7
	leaves := make([][]byte, size)
	for i := range leaves {
		leaves[i] = leafHash([]byte(fmt.Sprintf("other entry %d", i)))
	}
	leaves[index] = leafHash(tle.CanonicalizedBody)
	rootHash := mth(leaves)
	signer, err := signature.LoadECDSASignerVerifier(privateField[*ecdsa.PrivateKey](vs, "rekorKey"), crypto.SHA256)
	if err != nil {
		die("rekor signer: %v", err)
	}
	cp, err := rekorutil.CreateAndSignCheckpoint(context.Background(), "rekor.localhost", 123, size, rootHash, signer)
	if err != nil {
		die("checkpoint: %v", err)
	}
	tle.LogIndex = index
	tle.KindVersion = &protorekor.KindVersion{Kind: kind, Version: "0.0.1"}
	set, err := vs.RekorSignPayload(tlog.RekorPayload{
		Body:           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
		IntegratedTime: tle.IntegratedTime,
		LogIndex:       tle.LogIndex,
		LogID:          hex.EncodeToString(tle.LogId.KeyId),
	})
	if err != nil {
		die("SET: %v", err)
	}
	tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
	tle.InclusionProof = &protorekor.InclusionProof{
		LogIndex: index, RootHash: rootHash, TreeSize: size, Hashes: path(index, leaves),
		Checkpoint: &protorekor.Checkpoint{Envelope: string(cp)},
	}
}

func marshal(pb *protobundle.Bundle) []byte {
	bb, err := protojson.Marshal(pb)
	if err != nil {
		die("bundle: %v", err)
	}
	return bb
}

// dsseBundle: cosign v3's form, the in-toto statement for the image in a DSSE envelope.
func dsseBundle(vs *ca.VirtualSigstore, digest, identity, issuer string) []byte {
	statement := fmt.Sprintf(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"%s"}}],"predicateType":"https://sigstore.dev/cosign/sign/v1","predicate":{}}`, digest)
	leaf, leafKey := leafWithSCT(vs, identity, issuer)
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(intotoType), intotoType, len(statement), statement)
	h := sha256.Sum256([]byte(pae))
	sig, err := ecdsa.SignASN1(rand.Reader, leafKey, h[:])
	if err != nil {
		die("sign: %v", err)
	}
	env := &dsse.Envelope{PayloadType: intotoType, Payload: base64.StdEncoding.EncodeToString([]byte(statement)),
		Signatures: []dsse.Signature{{Sig: base64.StdEncoding.EncodeToString(sig)}}}
	entry, err := vs.GenerateTlogEntry(leaf, env, sig, time.Now().Add(time.Minute).Unix(), false)
	if err != nil {
		die("tlog entry: %v", err)
	}
	tle := entry.TransparencyLogEntry()
	logged(vs, tle, "dsse")
	return marshal(&protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:     &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: leaf.Raw}},
			TlogEntries: []*protorekor.TransparencyLogEntry{tle},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: []byte(statement), PayloadType: env.PayloadType,
			Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	})
}

// messageBundle: a message signature over the image digest (cosign sign-blob
// of the manifest), logged as a hashedrekord; v0.2 media type, certificate in
// x509CertificateChain as v0.1/v0.2 bundles carry it.
func messageBundle(vs *ca.VirtualSigstore, digest, identity, issuer string) []byte {
	leaf, leafKey := leafWithSCT(vs, identity, issuer)
	dg, err := hex.DecodeString(digest)
	if err != nil {
		die("digest: %v", err)
	}
	sig, err := ecdsa.SignASN1(rand.Reader, leafKey, dg)
	if err != nil {
		die("sign: %v", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	body := fmt.Sprintf(`{"apiVersion":"0.0.1","kind":"hashedrekord","spec":{"data":{"hash":{"algorithm":"sha256","value":"%s"}},"signature":{"content":"%s","publicKey":{"content":"%s"}}}}`,
		digest, base64.StdEncoding.EncodeToString(sig), base64.StdEncoding.EncodeToString(certPEM))
	logID, err := hex.DecodeString(func() string { id, _ := vs.RekorLogID(); return id }())
	if err != nil {
		die("log id: %v", err)
	}
	entry, err := tlog.NewEntry([]byte(body), time.Now().Add(time.Minute).Unix(), 0, logID, nil, nil) //nolint:staticcheck
	if err != nil {
		die("tlog entry: %v", err)
	}
	tle := entry.TransparencyLogEntry()
	logged(vs, tle, "hashedrekord")
	return marshal(&protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle+json;version=0.2",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_X509CertificateChain{X509CertificateChain: &protocommon.X509CertificateChain{
				Certificates: []*protocommon.X509Certificate{{RawBytes: leaf.Raw}}}},
			TlogEntries: []*protorekor.TransparencyLogEntry{tle},
		},
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: dg},
			Signature:     sig,
		}},
	})
}

func main() {
	if len(os.Args) != 5 || !strings.HasPrefix(os.Args[2], "sha256:") {
		fmt.Fprintln(os.Stderr, "usage: sigstore-testca OUTDIR sha256:<hex> IDENTITY ISSUER")
		os.Exit(2)
	}
	out, digest, identity, issuer := os.Args[1], os.Args[2][7:], os.Args[3], os.Args[4]
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		die("virtual sigstore: %v", err)
	}
	other, err := ca.NewVirtualSigstore()
	if err != nil {
		die("virtual sigstore: %v", err)
	}
	for name, data := range map[string][]byte{
		"bundle.json":             dsseBundle(vs, digest, identity, issuer),
		"bundle-message.json":     messageBundle(vs, digest, identity, issuer),
		"trusted_root.json":       trustedRoot(vs),
		"other_trusted_root.json": trustedRoot(other),
	} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			die("%v", err)
		}
	}
}
